"""The native kernels for the rest of a training step's hot set (csrc/aten/Reduction.cpp,
Concat.cpp, Foreach.cpp, Attention.cpp): served without the generic fallback (its call
counter stays at zero), asynchronous (they queue behind a busy stream instead of waiting),
one launch per foreach call, bit-for-bit equal to the CPU, and the CPU's errors on the host."""
import pytest
import torch
import torch.nn.functional as F

from common import to_device
from openreg import _C

DEV = "openreg"


def assert_equal(actual, expected):
    """Bit-for-bit: same values (NaN where NaN), dtypes, shapes and strides."""
    if isinstance(expected, torch.Tensor):
        assert actual.device.type == DEV
        assert actual.dtype == expected.dtype and actual.shape == expected.shape
        assert actual.stride() == expected.stride(), (actual.stride(), expected.stride())
        torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0, equal_nan=True)
    else:
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_equal(a, e)


def run_native(fn, *args):
    """fn on the CPU and on openreg; asserts openreg never took the fallback."""
    dev_args = to_device(args, DEV)  # before fn runs: in-place ops change the CPU inputs
    expected = fn(*args)
    torch.openreg.synchronize()
    _C._reset_fallback_counts()
    actual = fn(*dev_args)
    torch.openreg.synchronize()
    assert _C._fallback_counts() == {}
    return actual, expected


def check(fn, *args):
    actual, expected = run_native(fn, *args)
    assert_equal(actual, expected)


def assert_raises_like_cpu(cases):
    """Each case(device) raises on openreg exactly what it raises on the CPU,
    on the host (no kernel fails afterwards)."""
    for fn in cases:
        with pytest.raises(Exception) as cpu:
            fn("cpu")
        with pytest.raises(type(cpu.value)) as dev:
            fn(DEV)
        assert str(dev.value) == str(cpu.value)
    torch.openreg.synchronize()


def test_fallback_counter_counts_fallback_ops():
    x = torch.randn(5, device=DEV)
    _C._reset_fallback_counts()
    torch.flip(x, [0])          # no native kernel: generic path
    torch.flip(x, [0])
    torch.openreg.synchronize()
    assert _C._fallback_counts() == {"aten::flip": 2}


X = torch.randn(6, 7, 5)
X_NAN = X.clone()
X_NAN[1, 2, 3] = float("nan")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("fn", [
    lambda t: t.max(), lambda t: t.max(1), lambda t: t.max(-1, keepdim=True),
    lambda t: t.amax(-1), lambda t: t.amax((0, 2), keepdim=True), lambda t: t.amax(),
    lambda t: t.argmax(), lambda t: t.argmax(1), lambda t: t.argmax(0, keepdim=True),
    lambda t: t.transpose(0, 2).max(0),
])
def test_max_family(fn, dtype):
    check(fn, (X * 10).to(dtype))


def test_max_family_nan():
    for fn in (lambda t: t.max(), lambda t: t.max(2), lambda t: t.amax(0), lambda t: t.argmax(1)):
        check(fn, X_NAN)


@pytest.mark.parametrize("fn", [
    lambda t: torch.linalg.vector_norm(t), lambda t: torch.linalg.vector_norm(t, 1, dim=1),
    lambda t: torch.linalg.vector_norm(t, float("inf"), dim=(0, 2), keepdim=True),
    lambda t: torch.linalg.vector_norm(t, 3.5), lambda t: t.norm(),
    lambda t: torch.linalg.vector_norm(t, dtype=torch.float64),
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_vector_norm(fn, dtype):
    check(fn, X.to(dtype))


def test_cat_split_chunk_cat():
    a, b, c = torch.randn(3, 4), torch.randn(5, 4), torch.randn(2, 4).t()
    check(lambda x, y: torch.cat([x, y]), a, b)
    check(lambda x, y: torch.cat([x, y, x], 1), a, a)
    check(lambda x, y: torch.cat([x.t(), y], 1), a, c)       # non-contiguous input
    check(lambda x, y: torch.cat([x, y.to(torch.float64)]), a, b)   # type promotion
    check(lambda x, y: torch.stack([x, y]), a, a)
    check(lambda x: torch.split_with_sizes_copy(x, [1, 3, 1], 0), b)
    check(lambda x: torch.split_with_sizes_copy(x.t(), [2, 2], 0), b)
    check(lambda x, y: torch._chunk_cat([x, y], 0, 3), a, b)
    check(lambda x, y: torch._chunk_cat([x, y], 1, 2), a, a)

    def out_variants(x, y, o1, o2, o3):
        torch.cat([x, y], out=o1)
        torch.split_with_sizes_copy(y, [2, 3], out=[o2, o3])
        return o1, o2, o3
    e = torch.empty(0)
    check(out_variants, a, b, e, e.clone(), torch.empty(3, 4))


def test_cat_errors_like_cpu():
    assert_raises_like_cpu([
        lambda d: torch.cat([torch.randn(2, 3, device=d), torch.randn(2, 4, device=d)]),
        lambda d: torch.cat([torch.randn(2, device=d)], dim=3),
        lambda d: torch.split_with_sizes_copy(torch.randn(4, device=d), [1, 2]),
        lambda d: torch._chunk_cat([torch.randn(2, device=d), torch.randn(2, device=d,
                                                                           dtype=torch.float64)], 0, 2),
        lambda d: torch.max(torch.randn(0, device=d)),
    ])
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.cat([torch.randn(2, device=DEV), torch.randn(2)])


SHAPES = [(3, 4), (5,), (2, 3, 2), (1,), (7, 1)]


def mixed(seed, positive=False):
    g = torch.Generator().manual_seed(seed)
    ts = [torch.randn(s, generator=g) for s in SHAPES]
    return [t.abs() + 0.5 for t in ts] if positive else ts


@pytest.mark.parametrize("name, fn", [
    ("add_.Scalar", lambda a, b, c: torch._foreach_add_(a, 0.5)),
    ("add.Scalar", lambda a, b, c: torch._foreach_add(a, 2)),
    ("add_.List", lambda a, b, c: torch._foreach_add_(a, b, alpha=-0.3)),
    ("add.List", lambda a, b, c: torch._foreach_add(a, b, alpha=0.1)),
    ("add_.Tensor", lambda a, b, c: torch._foreach_add_(a, c[3].reshape(()), alpha=2)),
    ("mul_.Scalar", lambda a, b, c: torch._foreach_mul_(a, 0.9)),
    ("mul.Scalar", lambda a, b, c: torch._foreach_mul(a, 3)),
    ("mul_.List", lambda a, b, c: torch._foreach_mul_(a, b)),
    ("mul_.Tensor", lambda a, b, c: torch._foreach_mul_(a, c[3].reshape(()))),
    ("div_.Scalar", lambda a, b, c: torch._foreach_div_(a, 7)),
    ("div_.ScalarList", lambda a, b, c: torch._foreach_div_(a, [1.5, 2, 3.0, 0.25, -1])),
    ("lerp_.Scalar", lambda a, b, c: torch._foreach_lerp_(a, b, 0.1)),
    ("addcmul_.Scalar", lambda a, b, c: torch._foreach_addcmul_(a, b, c, value=0.01)),
    ("addcdiv_.Scalar", lambda a, b, c: torch._foreach_addcdiv_(a, b, c, value=-0.5)),
    ("addcdiv_.ScalarList", lambda a, b, c: torch._foreach_addcdiv_(a, b, c, [0.1, 0.2, 0.3, 0.4, 0.5])),
    ("sqrt_", lambda a, b, c: torch._foreach_sqrt_(c)),
    ("sqrt", lambda a, b, c: torch._foreach_sqrt(c)),
    ("norm", lambda a, b, c: torch._foreach_norm(a)),
    ("norm inf", lambda a, b, c: torch._foreach_norm(a, float("inf"))),
])
def test_foreach_mixed_shapes(name, fn):
    def run(a, b, c):
        result = fn(a, b, c)
        return [a, b, c] + ([] if result is None else [list(result)])
    check(run, mixed(0), mixed(1), mixed(2, positive=True))


def test_foreach_is_one_launch():
    """A foreach call queues one kernel: behind a busy stream, the host returns before any of
    the list's tensors is written, and the whole list is done together."""
    a = [torch.ones(s, device=DEV) for s in SHAPES]
    s = torch.openreg.current_stream()
    torch.openreg._sleep(1000)
    torch._foreach_mul_(a, 3.0)
    torch._foreach_add_(a, 1.0)
    assert not s.query()
    s.synchronize()
    for t in a:
        assert t.cpu().eq(4).all()


def test_foreach_errors_on_host_like_cpu():
    cases = [
        lambda d: torch._foreach_add_([torch.ones(2, device=d)], [torch.ones(3, device=d)]),
        lambda d: torch._foreach_add_([torch.ones(2, dtype=torch.long, device=d)], 0.5),
        lambda d: torch._foreach_add_([torch.ones(2, device=d)], [torch.ones(2, device=d)] * 2),
        lambda d: torch._foreach_mul_([torch.ones(2, device=d)], torch.ones(2, device=d)),
        lambda d: torch._foreach_div_([torch.ones(2, device=d)], [1.0, 2.0]),
        lambda d: torch._foreach_norm([torch.ones(2, dtype=torch.long, device=d)]),
    ]
    assert_raises_like_cpu(cases)


@pytest.mark.parametrize("make", [
    lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1, foreach=True),
    lambda ps: torch.optim.Adam(ps, lr=0.01, foreach=True),
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01, foreach=True),
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, foreach=True),
    lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1, fused=True),
    lambda ps: torch.optim.AdamW(ps, lr=0.01, amsgrad=True, maximize=True, fused=True),
])
def test_optimizer_steps_and_clipping_match_cpu_natively(make):
    init, grads = mixed(3), [mixed(10 + i) for i in range(3)]
    results = []
    for device in ("cpu", DEV):
        ps = [torch.nn.Parameter(p.clone().to(device)) for p in init]
        opt = make(ps)
        torch.openreg.synchronize()
        _C._reset_fallback_counts()
        for step in range(3):
            for p, g in zip(ps, grads[step]):
                p.grad = g.clone().to(device)     # clipping scales grads in place
            torch.nn.utils.clip_grad_norm_(ps, 1.0, foreach=True)
            opt.step()
        torch.openreg.synchronize()
        if device == DEV:
            # clipping and the optimizer step never take the generic fallback
            assert not _C._fallback_counts(), _C._fallback_counts()
        results.append([p.detach().cpu() for p in ps])
    torch.testing.assert_close(results[1], results[0], rtol=0, atol=0)


QKV = [torch.randn(2, 3, 16, 8) for _ in range(3)]


@pytest.mark.parametrize("kwargs", [dict(is_causal=True), dict(), dict(scale=0.3),
                                    dict(attn_mask=torch.randn(16, 16)),
                                    dict(attn_mask=torch.ones(16, 16, dtype=torch.bool).tril())])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sdpa_forward_backward_native_and_equal(kwargs, dtype):
    def run(q, k, v, mask=None):
        q, k, v = (t.detach().to(dtype).requires_grad_() for t in (q, k, v))
        kw = {k: v for k, v in kwargs.items() if k != "attn_mask"}
        if mask is not None:
            kw["attn_mask"] = mask if mask.dtype == torch.bool else mask.to(dtype)
        y = F.scaled_dot_product_attention(q, k, v, **kw)
        (y * torch.linspace(-1, 1, 8, dtype=dtype).to(y.device)).sum().backward()
        return [y.detach(), q.grad, k.grad, v.grad]
    # Not popped: pytest hands the same dict to every dtype.
    mask = kwargs.get("attn_mask")
    check(run, *QKV, *([mask] if mask is not None else []))


def test_sdpa_takes_the_cpu_flash_kernel_asynchronously():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))
    q = torch.randn(2, 4, 32, 16, device=DEV, requires_grad=True)
    s = torch.openreg.current_stream()
    torch.openreg._sleep(1000)
    with Ops() as mode:
        y = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        y.sum().backward()
    assert not s.query()        # queued behind the sleep: nothing waited
    assert "aten._scaled_dot_product_flash_attention_for_cpu.default" in mode.ops
    assert "aten._scaled_dot_product_flash_attention_for_cpu_backward.default" in mode.ops
    s.synchronize()


@pytest.mark.parametrize("fn", [
    lambda x: x.max(), lambda x: x.max(0), lambda x: x.amax(0), lambda x: x.argmax(),
    lambda x: torch.linalg.vector_norm(x), lambda x: torch.cat([x, x]),
    lambda x: torch.split_with_sizes_copy(x, [1, 2]), lambda x: torch._chunk_cat([x, x], 0, 2),
    lambda x: torch._foreach_norm([x, x]), lambda x: torch._foreach_sqrt([x.abs(), x.abs()]),
])
def test_native_kernels_are_asynchronous(fn):
    x = torch.randn(3, 4, device=DEV)
    s = torch.openreg.current_stream()
    torch.openreg._sleep(1000)
    result = fn(x)
    assert not s.query()
    s.synchronize()
    assert_equal(result, fn(x.cpu()))


def test_fused_adamw_is_asynchronous_and_checks_on_the_host():
    ps = [torch.nn.Parameter(torch.randn(5, device=DEV)) for _ in range(2)]
    for p in ps:
        p.grad = torch.randn(5, device=DEV)
    opt = torch.optim.AdamW(ps, lr=0.01, fused=True)
    opt.step()
    s = torch.openreg.current_stream()
    torch.openreg._sleep(1000)
    opt.step()  # queued behind the sleeping kernel: the host does not wait
    assert not s.query()
    s.synchronize()
    bad = [torch.zeros(5, device=DEV)] * 2
    with pytest.raises(RuntimeError, match="same length"):
        torch._fused_adamw_(bad, bad[:1], bad, bad, [], bad, lr=0.1, beta1=0.9, beta2=0.99,
                            weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
    with pytest.raises(RuntimeError, match="same device"):
        torch._fused_adamw_(bad, [torch.zeros(5)] * 2, bad, bad, [], bad, lr=0.1, beta1=0.9,
                            beta2=0.99, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)


def test_fused_adamw_refuses_host_tensors_in_its_lists():
    # As CUDA's fused kernel: every list on the device (0-dim CPU tensors pass
    # other ops as scalars, but the kernel writes params and moments).
    def call(param, step):
        torch._fused_adamw_([param], [torch.ones_like(param, device="openreg")],
                            [torch.zeros_like(param, device="openreg")],
                            [torch.zeros_like(param, device="openreg")], [], [step], lr=0.1,
                            beta1=0.9, beta2=0.99, weight_decay=0.0, eps=1e-8, amsgrad=False,
                            maximize=False)
    for param, step in [(torch.ones(3, device="openreg"), torch.tensor(1.0)),
                        (torch.tensor(1.0), torch.tensor(1.0, device="openreg"))]:
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            call(param, step)
