"""Checks and fix-ups around the generic fallback for particular operators, and
the host-side checks of native kernels the CPU makes inside its kernels
(csrc/aten/FallbackChecks.cpp, FusedOptimizers.cpp, Foreach.cpp): the error is
raised at the call, in the CPU's words, and the stream stays usable."""
import pytest
import torch


def _stream_still_works():
    assert (torch.ones(2, device="openreg") + 1).tolist() == [2.0, 2.0]


def _raises_as_on_the_cpu(error, call):
    """call("openreg") raises what call("cpu") raises, in the same words."""
    with pytest.raises(error) as cpu:
        call("cpu")
    with pytest.raises(error) as dev:
        call("openreg")
    assert str(dev.value) == str(cpu.value)


def _amp_update_args(device, scale_dtype=torch.float32, tracker_dtype=torch.int32, inf_dtype=torch.float32, n=1):
    return (torch.full((n,), 1024.0, dtype=scale_dtype, device=device),
            torch.zeros(1, dtype=tracker_dtype, device=device),
            torch.zeros(1, dtype=inf_dtype, device=device))


@pytest.mark.parametrize("bad", [dict(tracker_dtype=torch.int64), dict(scale_dtype=torch.float16),
                                 dict(inf_dtype=torch.float64), dict(n=2)])
def test_amp_update_scale_checks_its_arguments_at_the_call(bad):
    with pytest.raises(RuntimeError) as cpu:
        torch._amp_update_scale_(*_amp_update_args("cpu", **bad), 2.0, 0.5, 2)
    with pytest.raises(RuntimeError) as dev:
        torch._amp_update_scale_(*_amp_update_args("openreg", **bad), 2.0, 0.5, 2)
    assert str(dev.value) == str(cpu.value)
    _stream_still_works()


def test_amp_update_scale_updates_like_the_cpu():
    for device in ("cpu", "openreg"):
        scale, tracker, found_inf = _amp_update_args(device)
        for step in range(3):  # growth after 2 good steps
            torch._amp_update_scale_(scale, tracker, found_inf, 2.0, 0.5, 2)
        found_inf.fill_(1.0)
        torch._amp_update_scale_(scale, tracker, found_inf, 2.0, 0.5, 2)
        if device == "cpu":
            expected = (scale.item(), tracker.item())
    assert (scale.item(), tracker.item()) == expected == (1024.0, 0)


def _unscale(bad):
    def call(device):
        grads = [torch.ones(3, device=device, dtype=bad.get("grad_dtype", torch.float32))]
        found_inf = torch.zeros(bad.get("n", 1), device=device, dtype=bad.get("inf_dtype", torch.float32))
        inv_scale = torch.ones(1, device=device, dtype=bad.get("inv_dtype", torch.float32))
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
    return call


@pytest.mark.parametrize("bad", [dict(inf_dtype=torch.float64), dict(inv_dtype=torch.float64),
                                 dict(n=2), dict(grad_dtype=torch.int32)])
def test_amp_unscale_checks_its_arguments_at_the_call(bad):
    # Queued like any op that writes its arguments: its CPU kernel's checks come first.
    _raises_as_on_the_cpu(RuntimeError, _unscale(bad))
    _stream_still_works()


def _fused_adam(amsgrad, n_grads=1, n_max=0):
    def call(device):
        t = lambda: [torch.ones(3, device=device)]
        torch._fused_adam_(t(), t() * n_grads, t(), t(), t() * n_max, [torch.zeros((), device=device)],
                           lr=0.1, beta1=0.9, beta2=0.99, weight_decay=0.0, eps=1e-8,
                           amsgrad=amsgrad, maximize=False)
    return call


@pytest.mark.parametrize("call", [_fused_adam(amsgrad=True), _fused_adam(amsgrad=False, n_grads=2),
                                  _fused_adam(amsgrad=False, n_max=1)])
def test_fused_adam_checks_its_list_lengths_at_the_call(call):
    _raises_as_on_the_cpu(RuntimeError, call)
    _stream_still_works()


def test_multi_head_attention_fast_path_gives_no_weights_unless_needed():
    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        out_cpu, w_cpu = m(x, x, x, need_weights=False)
        mo = m.to("openreg")
        out, w = mo(x.to("openreg"), x.to("openreg"), x.to("openreg"), need_weights=False)
        assert w_cpu is None and w is None
        torch.testing.assert_close(out.cpu(), out_cpu)
        out, w = mo(x.to("openreg"), x.to("openreg"), x.to("openreg"), need_weights=True)
        _, w_cpu = m.to("cpu")(x, x, x, need_weights=True)
        torch.testing.assert_close(w.cpu(), w_cpu)


def test_fused_adamw_rejects_an_unsupported_dtype_at_the_call():
    def call(device):
        ints = lambda: [torch.ones(3, dtype=torch.int64, device=device)]
        torch._fused_adamw_(ints(), ints(), ints(), ints(), [], [torch.tensor(1.0, device=device)],
                            lr=0.1, beta1=0.9, beta2=0.99, weight_decay=0.0, eps=1e-8,
                            amsgrad=False, maximize=False)
    _raises_as_on_the_cpu(NotImplementedError, call)
    _stream_still_works()


def test_foreach_infinity_norm_of_an_empty_tensor():
    for device in ("cpu", "openreg"):
        with pytest.raises(RuntimeError, match="_foreach_norm cannot compute the infinity norm"):
            torch._foreach_norm([torch.ones(2, device=device), torch.zeros(0, device=device)], float("inf"))
    _stream_still_works()


_HALF = torch.float16
# Calls whose argument errors the CPU kernel raises inside itself, which the
# host checks (csrc/aten/FallbackChecks.cpp, Blas.cpp) raise at the call:
# name -> call(device).
_HOST_CHECKED = {
    "mm dtypes": lambda d: torch.mm(torch.ones(2, 2, device=d), torch.ones(2, 2, device=d, dtype=_HALF)),
    "linear dtypes": lambda d: torch.nn.functional.linear(torch.ones(2, 3, device=d),
                                                          torch.ones(4, 3, device=d, dtype=_HALF)),
    "matmul 3d@2d dtypes": lambda d: torch.ones(2, 2, 2, device=d) @ torch.ones(2, 2, device=d, dtype=_HALF),
    "addbmm dtypes": lambda d: torch.addbmm(torch.ones(2, 2, device=d), torch.ones(1, 2, 2, device=d),
                                            torch.ones(1, 2, 2, device=d, dtype=_HALF)),
    "addbmm_ self dtype": lambda d: torch.ones(2, 2, device=d, dtype=_HALF).addbmm_(
        torch.ones(1, 2, 2, device=d), torch.ones(1, 2, 2, device=d)),
    "cross dtypes": lambda d: torch.cross(torch.ones(3, device=d, dtype=_HALF), torch.ones(3, device=d), dim=0),
    "linalg.cross dtypes": lambda d: torch.linalg.cross(torch.ones(3, device=d), torch.ones(3, device=d, dtype=_HALF)),
    "setitem values dtype": lambda d: torch.zeros(3, device=d).__setitem__(
        torch.tensor([0, 1], device=d), torch.ones(2, device=d, dtype=_HALF)),
    "index_put_ accumulate values dtype": lambda d: torch.zeros(3, device=d).index_put_(
        (torch.tensor([0], device=d),), torch.ones(1, device=d, dtype=_HALF), accumulate=True),
    "index_put_ float index": lambda d: torch.zeros(3, device=d).index_put_(
        (torch.tensor([0.0], device=d),), torch.ones(1, device=d)),
    "index_put_ mask shape": lambda d: torch.zeros(3, device=d).index_put_(
        (torch.tensor([True, False], device=d),), torch.ones(1, device=d)),
    "masked_fill float mask": lambda d: torch.zeros(2, device=d).masked_fill(torch.ones(2, device=d), 0.0),
    "masked_fill_ uint8 mask": lambda d: torch.zeros(2, device=d).masked_fill_(
        torch.ones(2, device=d, dtype=torch.uint8), 0.0),
    "put_ source dtype": lambda d: torch.zeros(2, device=d).put_(torch.tensor([0], device=d),
                                                                 torch.ones(1, device=d, dtype=_HALF)),
    "put_ int32 index": lambda d: torch.zeros(2, device=d).put_(torch.tensor([0], device=d, dtype=torch.int32),
                                                                torch.ones(1, device=d)),
    "put_ numel": lambda d: torch.zeros(2, device=d).put_(torch.tensor([0, 1], device=d), torch.ones(1, device=d)),
    "setitem uint8 mask, one value": lambda d: torch.zeros(2, device=d).__setitem__(
        torch.tensor([1, 0], dtype=torch.uint8, device=d), 2.0),
    "setitem values shape": lambda d: torch.zeros(4, device=d).__setitem__(
        torch.tensor([0, 1], device=d), torch.ones(3, device=d)),
    "linalg.cross out dtype": lambda d: torch.linalg.cross(
        torch.ones(3, device=d), torch.ones(3, device=d), out=torch.empty(3, device=d, dtype=torch.float64)),
    "index_fill_ float index": lambda d: torch.zeros(2, device=d).index_fill_(0, torch.zeros(1, device=d), 1.0),
    "normal negative std": lambda d: torch.normal(torch.zeros(2, device=d), -torch.ones(2, device=d)),
    "normal float mean, nan std": lambda d: torch.normal(0.0, torch.full((1,), float("nan"), device=d)),
    "normal complex std": lambda d: torch.normal(torch.zeros(1, device=d),
                                                 torch.ones(1, device=d, dtype=torch.complex64)),
    "group_norm weight dtype": lambda d: torch.nn.functional.group_norm(
        torch.ones(1, 2, 2, device=d), 1, torch.ones(2, device=d, dtype=_HALF)),
    "binary_cross_entropy target dtype": lambda d: torch.nn.functional.binary_cross_entropy(
        torch.full((2,), 0.5, device=d), torch.ones(2, device=d, dtype=_HALF)),
    "searchsorted float sorter": lambda d: torch.searchsorted(torch.ones(3, device=d), torch.ones(2, device=d),
                                                              sorter=torch.ones(3, device=d)),
    "searchsorted side": lambda d: torch.searchsorted(torch.ones(3, device=d), torch.ones(2, device=d),
                                                      side="middle"),
    # A mask's selection needs its count (read from the device where the values
    # do not broadcast to a one-element selection).
    "index_put_ mask, values shape": lambda d: torch.zeros(4, device=d).index_put_(
        (torch.tensor([True, False, True, False], device=d),), torch.ones(3, device=d)),
    "setitem 2-d mask row, values shape": lambda d: torch.zeros(2, 3, device=d).__setitem__(
        torch.tensor([True, False], device=d), torch.ones(2, device=d)),
    "index_put_ accumulate mask, values shape": lambda d: torch.zeros(2, 2, device=d).index_put_(
        (torch.ones(2, 2, dtype=torch.bool, device=d),), torch.ones(3, device=d), accumulate=True),
    "index_put_ mask and index, broadcast": lambda d: torch.zeros(3, 3, device=d).index_put_(
        (torch.tensor([True, True, False], device=d), torch.tensor([0, 1, 2], device=d)), torch.ones(1, device=d)),
    "index_put_ accumulate mask, one value of too many dims": lambda d: torch.zeros(2, device=d).index_put_(
        (torch.tensor([True, False], device=d),), torch.ones(1, 1, 1, device=d), accumulate=True),
}


@pytest.mark.parametrize("name", list(_HOST_CHECKED))
def test_argument_errors_raise_at_the_call_in_the_cpus_words(name):
    call = _HOST_CHECKED[name]
    with pytest.raises(Exception) as cpu:
        call("cpu")
    with pytest.raises(type(cpu.value)) as dev:
        call("openreg")
    assert type(dev.value) is type(cpu.value)
    assert str(dev.value) == str(cpu.value)
    _stream_still_works()
    assert (torch.ones(3, device="openreg") + 1).sum().item() == 6.0


def test_host_checked_calls_still_run_like_the_cpu():
    # What the checks must let through, with the CPU's results.
    def calls(d):
        x = torch.arange(6.0, device=d).reshape(2, 3)
        y = torch.zeros(3, device=d)
        y[torch.tensor([True, False, True], device=d)] = torch.tensor(2.0, device=d, dtype=_HALF)  # masked_fill path
        y.index_put_((torch.tensor([1], device=d),), torch.ones(1, device=d), accumulate=True)
        z = torch.zeros(3, 4, device=d)
        z[torch.tensor([True, False, True], device=d)] = torch.arange(4.0, device=d)  # no count needed
        z[torch.tensor([True, True, False], device=d)] = torch.ones(2, 1, device=d)
        z.index_put_((torch.tensor([False, True, True], device=d),), torch.ones(2, 4, device=d), accumulate=True)
        torch.manual_seed(0)
        return [x @ x.T, torch.linalg.cross(x, x.flip(1)), y, z,
                torch.zeros(3, device=d).put_(torch.tensor([2], device=d), torch.ones(1, device=d)),
                torch.zeros(3, device=d).index_fill_(0, torch.tensor([1], device=d), 5.0),
                x.masked_fill(x > 2, -1.0),
                torch.normal(torch.zeros(3, device=d), torch.tensor([0.0, 1.0, 2.0], device=d)),
                torch.addbmm(torch.ones(2, 2, device=d), x[None, :, :2], x[None, :, :2].transpose(1, 2)),
                torch.searchsorted(torch.tensor([3.0, 1.0, 2.0], device=d), torch.tensor([2.5], device=d),
                                   sorter=torch.tensor([1, 2, 0], device=d))]
    for got, expected in zip(calls("openreg"), calls("cpu")):
        torch.testing.assert_close(got.cpu(), expected)


def test_where_takes_a_uint8_condition_as_the_cpu():
    def call(d):
        return torch.where(torch.tensor([1, 0], dtype=torch.uint8, device=d), torch.ones(2, device=d),
                           torch.zeros(2, device=d))
    assert call("openreg").tolist() == call("cpu").tolist() == [1.0, 0.0]


def test_segment_reduce_of_float_lengths_raises_at_the_call():
    # The probe with zero lengths fails the lengths' sum check before the
    # kernel's dtype dispatch; the one with ones reaches it.
    def call(d):
        torch.segment_reduce(torch.arange(6.0, device=d), "sum", lengths=torch.tensor([3.0, 3.0], device=d))
    _raises_as_on_the_cpu(NotImplementedError, call)
    _stream_still_works()
    lengths = torch.tensor([2, 4], device="openreg")
    assert torch.segment_reduce(torch.arange(6.0, device="openreg"), "sum", lengths=lengths).tolist() == [1.0, 14.0]


def _same_results(call):
    expected = call("cpu")
    got = call("openreg")
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, tuple) else (got,)
    assert [t.dtype for t in got] == [t.dtype for t in expected]
    for g, e in zip(got, expected):
        torch.testing.assert_close(g.cpu(), e)


def _randn(*sizes, dtype=torch.float32, device="cpu"):
    return torch.randn(*sizes, generator=torch.Generator().manual_seed(sum(sizes))).to(dtype).to(device)


# Valid mixed-dtype calls whose Meta result dtype is not the CPU's: the
# fallback's probe learns the CPU's and allocates that.
_CPU_RESULT_DTYPE = {
    "binary_cross_entropy float64 weight": lambda d: torch.nn.functional.binary_cross_entropy(
        _randn(3, device=d).sigmoid(), _randn(3, device=d).sigmoid(), weight=_randn(3, dtype=torch.float64, device=d)),
    "binary_cross_entropy half, float32 weight": lambda d: torch.nn.functional.binary_cross_entropy(
        _randn(3, device=d).sigmoid().half(), _randn(3, device=d).sigmoid().half(), weight=_randn(3, device=d),
        reduction="none"),
    "huber_loss bfloat16 input, float32 target": lambda d: torch.nn.functional.huber_loss(
        _randn(3, dtype=torch.bfloat16, device=d), _randn(3, device=d)),
}


@pytest.mark.parametrize("name", list(_CPU_RESULT_DTYPE))
def test_mixed_dtype_results_take_the_cpus_dtype(name):
    _same_results(_CPU_RESULT_DTYPE[name])
    _same_results(_CPU_RESULT_DTYPE[name])  # the cached inference too
    _stream_still_works()


def _out(dtype, device, *sizes):
    return torch.empty(*sizes or (0,), dtype=dtype, device=device)


_X = lambda d: _randn(3, 4, device=d)
_F64, _I32, _L = torch.float64, torch.int32, torch.long
# out= arguments of a dtype the CPU kernel refuses and the Meta kernel takes.
_OUT_DTYPE_REFUSED = {
    "sort values": lambda d: torch.sort(_X(d), out=(_out(_F64, d), _out(_L, d))),
    "sort indices": lambda d: torch.sort(_X(d), out=(_out(torch.float32, d), _out(_I32, d))),
    "sort stable values": lambda d: torch.sort(_X(d), stable=True, out=(_out(_F64, d), _out(_L, d))),
    "msort": lambda d: torch.msort(_X(d), out=_out(_F64, d)),
    "argsort": lambda d: torch.argsort(_X(d), dim=1, stable=True, out=_out(_I32, d)),
    "kthvalue values": lambda d: torch.kthvalue(_X(d), 2, out=(_out(_F64, d), _out(_L, d))),
    "cummax values": lambda d: torch.cummax(_X(d), 1, out=(_out(_F64, d), _out(_L, d))),
    "cummin indices": lambda d: torch.cummin(_X(d), 1, out=(_out(torch.float32, d), _out(_I32, d))),
    "median.dim values": lambda d: torch.median(_X(d), 1, out=(_out(_F64, d), _out(_L, d))),
    "nanmedian.dim values": lambda d: torch.nanmedian(_X(d), 1, out=(_out(_F64, d), _out(_L, d))),
    "mode values": lambda d: torch.mode(_X(d), 1, out=(_out(_F64, d), _out(_L, d))),
    "logcumsumexp": lambda d: torch.logcumsumexp(_X(d), 0, out=_out(_F64, d)),
    "index_select": lambda d: torch.index_select(_X(d), 0, torch.zeros(1, dtype=_L, device=d), out=_out(_F64, d)),
    "triu": lambda d: torch.triu(_X(d), out=_out(_F64, d)),
    "histc": lambda d: torch.histc(_X(d), out=_out(_F64, d)),
    "renorm": lambda d: torch.renorm(_X(d), 2, 0, 1.0, out=_out(_F64, d)),
    "nan_to_num": lambda d: torch.nan_to_num(_X(d), out=_out(_F64, d)),
    "amax": lambda d: torch.amax(_X(d), 1, out=_out(_F64, d)),
    "index_add": lambda d: torch.index_add(_X(d), 0, torch.zeros(1, dtype=_L, device=d), _X(d)[:1], out=_out(_F64, d)),
    "topk values": lambda d: torch.topk(_X(d), 2, out=(_out(_F64, d), _out(_L, d))),
    "max.dim indices": lambda d: torch.max(_X(d), 1, out=(_out(torch.float32, d), _out(_I32, d))),
}


@pytest.mark.parametrize("name", list(_OUT_DTYPE_REFUSED))
def test_out_of_a_refused_dtype_raises_at_the_call_in_the_cpus_words(name):
    call = _OUT_DTYPE_REFUSED[name]
    with pytest.raises(Exception) as cpu:
        call("cpu")
    for _ in range(2):  # the verdict kept for the signature too
        with pytest.raises(type(cpu.value)) as dev:
            call("openreg")
        assert type(dev.value) is type(cpu.value)
        assert str(dev.value) == str(cpu.value)
    _stream_still_works()


def test_out_left_untouched_when_its_dtype_is_refused():
    values, indices = _out(_F64, "openreg"), _out(_L, "openreg")
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype float"):
        torch.sort(_X("openreg"), out=(values, indices))
    assert values.shape == indices.shape == (0,)  # as the CPU leaves them


# out= dtypes the CPU kernel takes, casting (or resizing) as the CPU does.
_OUT_DTYPE_TAKEN = {
    "cumsum float64": lambda d: torch.cumsum(_X(d), 0, out=_out(_F64, d)),
    "cumsum int64": lambda d: torch.cumsum(_X(d), 0, out=_out(_L, d)),
    "cumsum float64 of the result's shape": lambda d: torch.cumsum(_X(d), 0, out=_out(_F64, d, 3, 4)),
    "cumprod half": lambda d: torch.cumprod(_X(d), 0, out=_out(torch.float16, d)),
    "sum float64": lambda d: torch.sum(_X(d), 1, out=_out(_F64, d)),
    "logsumexp float64": lambda d: torch.logsumexp(_X(d), 1, out=_out(_F64, d)),
    "max float64": lambda d: torch.max(_X(d), out=_out(_F64, d)),
    "sort": lambda d: torch.sort(_X(d), out=(_out(torch.float32, d, 3, 4), _out(_L, d, 3, 4))),
}


@pytest.mark.parametrize("name", list(_OUT_DTYPE_TAKEN))
def test_out_of_another_dtype_the_cpu_takes(name):
    _same_results(_OUT_DTYPE_TAKEN[name])
    _stream_still_works()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_group_norm_of_a_reduced_precision_input_with_float32_parameters(dtype):
    # Valid on the CPU, which keeps the statistics (and the weight's and
    # bias's gradients) in float32 and the input's gradient in its dtype;
    # Meta says otherwise for both directions.
    def call(d):
        x = _randn(2, 4, 3, dtype=dtype, device=d).requires_grad_()
        w = _randn(4, device=d).requires_grad_()
        b = _randn(4, device=d).requires_grad_()
        out, mean, rstd = torch.native_group_norm(x.detach(), w.detach(), b.detach(), 2, 4, 3, 2, 1e-5)
        y = torch.nn.functional.group_norm(x, 2, w, b)
        y.sum().backward()
        return out, mean, rstd, y, x.grad, w.grad, b.grad
    _same_results(call)
    _stream_still_works()


def test_random_op_dtype_refused_at_the_call_without_drawing():
    # The dispatch probe runs random ops that take a generator with a
    # throwaway one: the CPU's error at the call, no number drawn from the
    # CPU's generator or the device's.
    with pytest.raises(NotImplementedError) as cpu:
        torch.poisson(torch.ones(4, dtype=torch.int64))
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    state = torch.openreg.get_rng_state()
    with pytest.raises(NotImplementedError) as dev:
        torch.poisson(torch.ones(4, dtype=torch.int64, device="openreg"))
    assert str(dev.value) == str(cpu.value)
    torch.openreg.synchronize()
    assert torch.equal(torch.openreg.get_rng_state(), state)
    assert torch.equal(torch.rand(3), expected)
    _stream_still_works()


def test_default_dtype_change_after_a_call_keeps_results_as_the_cpus():
    # The probe's result dtypes are kept per default dtype, as inferences are.
    x = torch.tensor([1, -2, 3], device="openreg")
    assert torch.angle(x).dtype == torch.float32
    torch.openreg.synchronize()
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        r = torch.angle(x)
        assert r.dtype == torch.angle(x.cpu()).dtype == torch.float64
        assert torch.equal(r.cpu(), torch.angle(x.cpu()))
    finally:
        torch.set_default_dtype(previous)
    _stream_still_works()


def test_out_dtype_of_an_operator_registered_after_the_first_out_call():
    # The functional variant that tells which out= dtypes the CPU kernel wants
    # is looked up among the operators registered at the call, not at the
    # first out= call of the process (torch.sort's here).
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype float"):
        torch.sort(_X("openreg"), out=(_out(_F64, "openreg"), _out(_L, "openreg")))
    lib = torch.library.Library("openreg_late_test", "DEF")
    lib.define("scale(Tensor x) -> Tensor")
    lib.define("scale.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)")

    def scale_out(x, *, out):
        if out.dtype != x.dtype:  # what a CPU kernel checks and Meta does not
            raise RuntimeError(f"Expected out tensor to have dtype {x.dtype}, but got {out.dtype} instead")
        return out.resize_(x.shape).copy_(x * 2)

    lib.impl("scale", lambda x: x * 2, "CPU")
    lib.impl("scale.out", scale_out, "CPU")
    lib.impl("scale", lambda x: torch.empty_like(x), "Meta")
    lib.impl("scale.out", lambda x, *, out: out.resize_(x.shape), "Meta")
    x = _X("openreg")
    with pytest.raises(RuntimeError, match="but got torch.float64 instead"):
        torch.ops.openreg_late_test.scale.out(x, out=_out(_F64, "openreg"))
    _stream_still_works()
    result = torch.ops.openreg_late_test.scale.out(x, out=_out(torch.float32, "openreg"))
    torch.testing.assert_close(result.cpu(), x.cpu() * 2)


@pytest.mark.parametrize("weight", ["float32", "float64", "strided float32"])
@pytest.mark.parametrize("forward_only", [False, True])
def test_embedding_bag_results_have_the_cpus_shapes_for_every_mode_and_flag(forward_only, weight):
    # Meta sizes offset2bag / bag_size / max_indices unlike the CPU kernel; the
    # fallback gives each result the CPU's shape (Fallback.cpp,
    # embeddingBagResultsAsTheCpus) and runs the op as a kernel. (A float64 or
    # column-strided weight takes the CPU's slow path, which fills offset2bag:
    # a kernel failure that broke the stream before.)
    import itertools

    op = torch.ops.aten._embedding_bag_forward_only if forward_only else torch.ops.aten._embedding_bag
    w = torch.randn(10, 3, dtype=torch.float64 if weight == "float64" else torch.float32)
    if weight.startswith("strided"):
        w = w.t().contiguous().t()
    idx, offsets = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 4, 6])
    for mode, weighted, last, scale, pad in itertools.product((0, 1, 2), (False, True), (False, True),
                                                              (False, True), (-1, 2)):
        if weighted and mode != 0:
            continue
        psw = torch.rand(8, dtype=w.dtype) if weighted else None
        want = op(w, idx, offsets, scale, mode, False, psw, last, pad)
        got = op(w.to("openreg"), idx.to("openreg"), offsets.to("openreg"), scale, mode, False,
                 None if psw is None else psw.to("openreg"), last, pad)
        case = (mode, weighted, last, scale, pad)
        for k, (a, b) in enumerate(zip(want, got)):
            assert (a.shape, a.dtype) == (b.shape, b.dtype), (case, k)
        torch.testing.assert_close(got[0].cpu(), want[0], msg=str(case))
        torch.testing.assert_close(got[2].cpu(), want[2], msg=str(case))
        torch.openreg.synchronize()  # the stream still works


def _assert_results_as_the_cpus(calls):
    """Each call's results on openreg have the CPU's shapes, strides, dtypes and values."""
    for name, call in calls.items():
        want = call(lambda a: a.clone())
        got = call(lambda a: a.to("openreg"))
        for k, (a, g) in enumerate(zip(want, got)):
            assert (a.shape, a.stride(), a.dtype) == (g.shape, g.stride(), g.dtype), (name, k)
            torch.testing.assert_close(g.cpu(), a, msg=f"{name} {k}")


def test_batch_norm_as_a_kernel_gives_the_cpus_results_layouts_and_errors():
    # Batch norm of float32/64 tensors of one dtype runs as a kernel (Fallback.cpp,
    # kBatchNorm): results, strides, overloads and the CPU kernel's checks as the CPU's.
    aten = torch.ops.aten
    x = torch.randn(8, 6, 4).transpose(1, 2)  # (8, 4, 6), not contiguous
    w, b, rm, rv = torch.rand(4) + 0.5, torch.randn(4), torch.randn(4), torch.rand(4) + 0.5
    channels_last = torch.randn(2, 4, 3, 3).to(memory_format=torch.channels_last)
    calls = {
        "train": lambda t: aten.native_batch_norm(t(x), t(w), t(b), t(rm), t(rv), True, 0.1, 1e-5),
        "eval": lambda t: aten.native_batch_norm(t(x), t(w), t(b), t(rm), t(rv), False, 0.1, 1e-5),
        "no_stats": lambda t: aten._native_batch_norm_legit.no_stats(t(x), t(w), t(b), True, 0.1, 1e-5),
        "backward, channels_last": lambda t: aten.native_batch_norm_backward(
            t(torch.ones(2, 4, 3, 3)), t(channels_last), t(w), t(rm), t(rv), t(rm), t(rv), True,
            1e-5, [True, True, True]),
    }
    _assert_results_as_the_cpus(calls)
    # out= in eval mode: the saved statistics stay empty, as the CPU's.
    outs = [torch.empty(0, device="openreg") for _ in range(3)]
    aten.native_batch_norm.out(x.to("openreg"), None, None, rm.to("openreg"), rv.to("openreg"),
                               False, 0.1, 1e-5, out=outs[0], save_mean=outs[1], save_invstd=outs[2])
    assert [tuple(o.shape) for o in outs] == [(8, 4, 6), (0,), (0,)]
    # Checks the CPU kernel makes and Meta does not: raised at the call.
    with pytest.raises(ValueError, match="must either both be None or neither be None"):
        torch.nn.functional.batch_norm(x.to("openreg"), rm.to("openreg"), None, training=True)
    with pytest.raises(RuntimeError, match="running_mean should contain 4 elements not 3"):
        torch.nn.functional.batch_norm(x.to("openreg"), torch.zeros(3, device="openreg"),
                                       torch.ones(3, device="openreg"))
    _stream_still_works()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reduced_precision_batch_norm_with_float32_parameters_runs_as_a_kernel(python, dtype):
    # The CPU's mixed-type batch norm (a conv net's under autocast): a kernel
    # with the CPU's results, so a capture records it. Without parameters the
    # CPU keeps the statistics in the input's dtype, which Meta does not: that
    # call stays on the host, and a capture refuses it as any host sync.
    aten = torch.ops.aten
    x = torch.randn(8, 6, 4).transpose(1, 2).to(dtype)
    w, b, rm, rv = torch.rand(4) + 0.5, torch.randn(4), torch.randn(4), torch.rand(4) + 0.5
    calls = {
        "train": lambda t: aten.native_batch_norm(t(x), t(w), t(b), t(rm), t(rv), True, 0.1, 1e-5),
        "eval": lambda t: aten.native_batch_norm(t(x), t(w), t(b), t(rm), t(rv), False, 0.1, 1e-5),
        "stats only": lambda t: aten.native_batch_norm(t(x), None, None, t(rm), t(rv), True, 0.1, 1e-5),
        "no_stats": lambda t: aten._native_batch_norm_legit.no_stats(t(x), t(w), t(b), True, 0.1, 1e-5),
        "no parameters": lambda t: aten._native_batch_norm_legit.no_stats(t(x), None, None, True, 0.1, 1e-5),
    }
    _assert_results_as_the_cpus(calls)
    r = python(f"""
        import torch
        bn = torch.nn.BatchNorm2d(4).to("openreg")
        x = torch.randn(2, 4, 3, 3, device="openreg", dtype={dtype})
        want = bn(x)
        g = torch.openreg.Graph()
        with torch.openreg.graph(g):
            y = bn(x)
        g.replay()
        torch.testing.assert_close(y, bn(x))
        print(y.dtype, bn.running_mean.dtype)
        try:
            with torch.openreg.graph(torch.openreg.Graph()):
                torch.nn.functional.batch_norm(x, None, None, training=True)
        except RuntimeError as e:
            print("refused" if "capture" in str(e) else e)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == [f"{dtype} torch.float32", "refused"]


@pytest.mark.parametrize("make", [torch.complex, torch.polar], ids=["complex", "polar"])
def test_complex_of_transposed_parts_is_laid_out_as_the_cpus(make):
    # Both build their result with TensorIterator, which lays it out as the
    # inputs; a given out= of the right shape keeps its strides.
    a, b = torch.rand(3, 4).t(), torch.rand(3, 4).t()
    expected = make(a, b)
    got = make(a.to("openreg"), b.to("openreg"))
    assert got.stride() == expected.stride() == (1, 4)
    torch.testing.assert_close(got.cpu(), expected)
    out = torch.empty(4, 3, dtype=torch.complex64, device="openreg")
    make(a.to("openreg"), b.to("openreg"), out=out)
    assert out.stride() == (3, 1)
    torch.testing.assert_close(out.cpu(), expected)


_F = torch.nn.functional


@pytest.mark.parametrize("name,error,call", [
    # Checks the CPU kernels make on the host besides their Meta kernels'
    # (found by review): each failed the stream instead of raising at the call.
    ("renorm dim", IndexError, lambda d: torch.renorm(torch.ones(4, 5, device=d), 2, 5, 1.0)),
    ("renorm_ dim", IndexError, lambda d: torch.ones(4, 5, device=d).renorm_(2, -3, 1.0)),
    ("eigh of NaN", torch.linalg.LinAlgError,
     lambda d: torch.linalg.eigh(torch.full((3, 3), float("nan"), device=d))),
    ("eigvalsh of NaN", torch.linalg.LinAlgError,
     lambda d: torch.linalg.eigvalsh(torch.full((3, 3), float("nan"), device=d))),
    ("embedding_bag per-sample weights dtype", RuntimeError,
     lambda d: _F.embedding_bag(torch.tensor([0, 1, 2], device=d), torch.ones(4, 2, device=d),
                                torch.tensor([0], device=d), mode="sum",
                                per_sample_weights=torch.ones(3, dtype=torch.float64, device=d))),
    ("embedding_bag per-sample weights with max", NotImplementedError,
     lambda d: _F.embedding_bag(torch.tensor([0, 1, 2], device=d), torch.ones(4, 2, device=d),
                                torch.tensor([0], device=d), mode="max",
                                per_sample_weights=torch.ones(3, device=d))),
])
def test_host_side_checks_of_cpu_kernels_raise_at_the_call(name, error, call):
    _raises_as_on_the_cpu(error, call)
    _stream_still_works()
