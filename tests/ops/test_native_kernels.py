"""The native hot-path kernels (csrc/aten/Pointwise.cpp, Blas.cpp, Reduction.cpp) against the
CPU, including in-place variants, broadcasting, type promotion, and CUDA's device errors."""
import re

import pytest
import torch
import torch.nn.functional as F

DTYPES = [torch.float32, torch.bfloat16, torch.float64]


def both(fn, *cpu_args):
    dev_args = [a.to("openreg") if isinstance(a, torch.Tensor) else a for a in cpu_args]
    expected = fn(*cpu_args)
    actual = fn(*dev_args)
    assert actual.device.type == "openreg"
    torch.testing.assert_close(actual.cpu(), expected)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", [
    lambda a, b: a + b, lambda a, b: torch.add(a, b, alpha=2), lambda a, b: a - b,
    lambda a, b: torch.sub(a, b, alpha=0.5), lambda a, b: a * b, lambda a, b: a / b,
])
def test_binary_broadcast(op, dtype):
    a = torch.randn(3, 1, 5).to(dtype)
    b = torch.randn(4, 5).to(dtype) + 3
    both(op, a, b)


def test_type_promotion_and_cpu_scalar_tensor():
    a = torch.arange(6, dtype=torch.int64).reshape(2, 3)
    b = torch.randn(3)
    both(lambda x, y: x * y, a, b)
    both(lambda x, y: x / y, a, a + 1)          # int / int -> float
    dev = torch.randn(4, device="openreg")
    out = dev + torch.tensor(2.0)               # 0-dim CPU tensors are allowed, as on CUDA
    torch.testing.assert_close(out.cpu(), dev.cpu() + 2)


@pytest.mark.parametrize("name", ["add_", "sub_", "mul_", "div_"])
def test_inplace(name):
    a = torch.randn(4, 5)
    b = torch.randn(5) + 3
    d = a.to("openreg")
    ret = getattr(d, name)(b.to("openreg"))
    assert ret is d
    torch.testing.assert_close(d.cpu(), getattr(a.clone(), name)(b))


def test_inplace_broadcast_error():
    d = torch.randn(5, device="openreg")
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        d.add_(torch.randn(4, 5, device="openreg"))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fn", [
    torch.exp, torch.neg, torch.sigmoid, torch.tanh, torch.nn.functional.silu,
    torch.nn.functional.gelu, lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    torch.relu, lambda x: x.abs().sqrt(), lambda x: (x.abs() + 1).rsqrt(), lambda x: x.pow(2),
])
def test_unary(fn, dtype):
    both(fn, torch.randn(7, 3).to(dtype))


def test_relu_inplace_and_zero():
    a = torch.randn(10)
    d = a.to("openreg")
    d.relu_()
    torch.testing.assert_close(d.cpu(), a.relu())
    d.zero_()
    assert d.cpu().eq(0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matmuls(dtype):
    a, b = torch.randn(8, 16).to(dtype), torch.randn(16, 4).to(dtype)
    both(torch.mm, a, b)
    both(lambda x, y, z: torch.addmm(z, x, y, beta=0.5, alpha=2), a, b, torch.randn(4).to(dtype))
    x, y = torch.randn(3, 8, 16).to(dtype), torch.randn(3, 16, 4).to(dtype)
    both(torch.bmm, x, y)
    both(lambda p, q, r: torch.baddbmm(r, p, q), x, y, torch.randn(3, 8, 4).to(dtype))
    both(torch.matmul, x, b)
    both(lambda p: p.t() @ p, a)                 # non-contiguous input


def test_matmul_shape_error():
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch.mm(torch.randn(2, 3, device="openreg"), torch.randn(4, 5, device="openreg"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reductions_and_softmax(dtype):
    x = torch.randn(4, 6, 5).to(dtype)
    both(lambda t: t.sum(1), x)
    both(lambda t: t.sum((0, 2), keepdim=True), x)
    both(lambda t: t.mean(-1), x)
    both(lambda t: t.sum(), x)
    both(lambda t: torch.softmax(t, -1), x)
    both(lambda t: torch.log_softmax(t, 1), x)
    both(lambda t: t.sum(1, dtype=torch.float64), x)


def test_softmax_backward_matches_cpu():
    x = torch.randn(5, 7)
    grads = []
    for device in ("cpu", "openreg"):
        t = x.to(device).detach().clone().requires_grad_()
        (torch.softmax(t, -1) * torch.arange(7.0, device=device)).sum().backward()
        u = x.to(device).detach().clone().requires_grad_()
        torch.log_softmax(u, -1)[:, 2].sum().backward()
        grads.append((t.grad.cpu(), u.grad.cpu()))
    torch.testing.assert_close(grads[0], grads[1])


def test_cross_device_error_like_cuda():
    a = torch.randn(3, device="openreg:0")
    b = torch.randn(3, device="openreg:1")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        a + b
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.mm(torch.randn(2, 2, device="openreg"), torch.randn(2, 2))


def test_kernels_run_on_the_current_device_and_stream():
    a = torch.randn(16, device="openreg:2")
    s = torch.openreg.Stream(device="openreg:2")
    s.wait_stream(torch.openreg.current_stream(2))  # `a` is written on the default stream
    with torch.openreg.stream(s):
        torch.openreg._sleep(1000)
        b = a * 3
        assert b.device == torch.device("openreg:2")
        assert not s.query()
    s.synchronize()
    torch.testing.assert_close(b.cpu(), a.cpu() * 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norm_forward_backward(dtype):
    x = torch.randn(4, 6, 8).to(dtype)
    ln = torch.nn.LayerNorm(8)
    results = []
    for device in ("cpu", "openreg"):
        layer = ln.to(device)
        t = x.to(device).detach().clone().requires_grad_()
        out = layer(t)
        (out * torch.linspace(-1, 1, 8, device=device)).sum().backward()
        results.append([v.detach().cpu() for v in (out, t.grad, layer.weight.grad, layer.bias.grad)])
        layer.zero_grad()
    torch.testing.assert_close(results[0], results[1])


def test_cross_entropy_embedding_index_select_where():
    torch.manual_seed(0)
    emb = torch.nn.Embedding(20, 6)
    idx = torch.randint(0, 20, (5, 3))
    target = torch.randint(0, 6, (15,))
    outs = []
    for device in ("cpu", "openreg"):
        e = emb.to(device)
        logits = e(idx.to(device)).view(-1, 6)
        loss = torch.nn.functional.cross_entropy(logits, target.to(device), ignore_index=2)
        loss.backward()
        picked = torch.index_select(e.weight, 0, torch.tensor([3, 1, 3], device=device))
        w = torch.where(picked > 0, picked, torch.zeros((), device=device))
        outs.append([loss.detach().cpu(), e.weight.grad.cpu(), picked.detach().cpu(), w.detach().cpu()])
        e.zero_grad()
    torch.testing.assert_close(outs[0], outs[1])


def test_optimizer_ops_all_variants():
    a, b, c = torch.randn(6), torch.randn(6), torch.randn(6).abs() + 1
    d = [t.to("openreg") for t in (a, b, c)]
    torch.testing.assert_close(torch.lerp(d[0], d[1], 0.3).cpu(), torch.lerp(a, b, 0.3))
    torch.testing.assert_close(torch.addcmul(d[0], d[1], d[2], value=2).cpu(), torch.addcmul(a, b, c, value=2))
    torch.testing.assert_close(torch.addcdiv(d[0], d[1], d[2], value=-1).cpu(), torch.addcdiv(a, b, c, value=-1))
    out = torch.empty(0, device="openreg")
    torch.mul(d[0], d[1], out=out)
    torch.testing.assert_close(out.cpu(), a * b)
    x = d[0].clone()
    x.addcdiv_(d[1], d[2]).lerp_(d[1], 0.5).addcmul_(d[1], d[2])
    torch.testing.assert_close(x.cpu(), a.clone().addcdiv_(b, c).lerp_(b, 0.5).addcmul_(b, c))
    # AdamW with foreach on openreg matches the CPU's for-each implementation
    params = [torch.nn.Parameter(torch.randn(3, 3)) for _ in range(2)]
    for device in ("cpu", "openreg"):
        ps = [torch.nn.Parameter(p.detach().clone().to(device)) for p in params]
        opt = torch.optim.AdamW(ps, lr=0.1, foreach=True)
        for _ in range(3):
            sum((p ** 2).sum() for p in ps).backward()
            opt.step()
            opt.zero_grad()
        if device == "cpu":
            ref = [p.detach().clone() for p in ps]
        else:
            torch.testing.assert_close([p.detach().cpu() for p in ps], ref)


def test_fill_value_that_overflows_raises_at_the_call():
    # Converted on the host, as CUDA does: the stream stays usable.
    x = torch.zeros(3, dtype=torch.uint8, device="openreg")
    with pytest.raises(RuntimeError, match="cannot be converted to type uint8_t without overflow"):
        x.fill_(300)
    x.fill_(7)
    assert x.cpu().tolist() == [7, 7, 7]
    # Every dtype the CPU fills, complex32 included.
    z = torch.zeros(2, dtype=torch.complex32, device="openreg")
    assert z.cpu().view(torch.float16).tolist() == [0.0] * 4


def test_layer_norm_statistics_dtype_with_a_float_bias_only():
    # bf16 input, no weight, float32 bias: mixed, so the statistics are float32 (as on CPU).
    x = torch.randn(4, 8).bfloat16()
    bias = torch.randn(8)
    want = torch.native_layer_norm(x, [8], None, bias, 1e-5)
    got = torch.native_layer_norm(x.to("openreg"), [8], None, bias.to("openreg"), 1e-5)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g.cpu(), w)
    with pytest.raises(RuntimeError, match="mixed dtype"):  # a bf16 bias beside a float weight
        torch.native_layer_norm(x.to("openreg"), [8], torch.ones(8, device="openreg"),
                                bias.bfloat16().to("openreg"), 1e-5)



_CPP_META_OPS = """
import sys, torch
import torch.nn.functional as F
def mse_grad(t):
    p = t.clone().requires_grad_()
    F.mse_loss(p, t * 0.1).backward()
    return p.grad
def act_grads(t):
    p, w = t.clone().requires_grad_(), torch.full((6,), 0.25, device=t.device, requires_grad=True)
    loss = F.huber_loss(F.prelu(F.hardswish(p), w), t.roll(1), delta=0.5)
    loss.backward()
    return torch.cat([loss.detach().view(1), p.grad.flatten(), w.grad])
def leaky_grad(t):
    p = t.clone().requires_grad_()
    F.leaky_relu(p, 0.2).sum().backward()
    return p.grad
def smooth_l1_grad(t):
    p = t.clone().requires_grad_()
    F.smooth_l1_loss(p, t.roll(1), beta=0.5).backward()
    return p.grad
def embedding_bag_grads(t):
    w, p = t.clone().requires_grad_(), t[0].clone().requires_grad_()
    i, o = torch.tensor([1, 2, 4, 5, 0, 3], device=t.device), torch.tensor([0, 2, 5], device=t.device)
    out = F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p)
    out.square().sum().backward()
    maxed = F.embedding_bag(i, t, o, mode="max")
    return torch.cat([out.flatten(), w.grad.flatten(), p.grad, maxed.flatten()])
def max_pool_grad(t):
    p = t.view(1, 1, 6, 6).clone().requires_grad_()
    F.max_pool2d(p, 2).sum().backward()
    return p.grad
torch.manual_seed(0)
c = torch.randn(6, 6)
x = c.to("openreg")
ops = {
    "x > 0, cos, sin, log, erf": lambda t: (t > 0) | (t.cos() < t.sin()) | (t.abs() + 1).log().erf().ne(0),
    "masked_fill": lambda t: t.masked_fill(t > 0, 2.0),
    "masked_fill, tensor value": lambda t: t.masked_fill(t < 0, torch.tensor(3.0, device=t.device)),
    "sort": lambda t: t.sort(dim=1, stable=True)[0],
    "sort indices": lambda t: t.sort(dim=0, descending=True, stable=True)[1],
    "cumprod": lambda t: t.cumprod(1),
    "index_add": lambda t: t.index_add(0, torch.tensor([0, 2], device=t.device), t[:2]),
    "clamp_max": lambda t: t.clamp_max(0.5),
    "clamp_min by tensor": lambda t: t.clamp_min(t.t()),
    "sum out=": lambda t: torch.sum(t, 1, out=torch.empty(6, device=t.device)),
    "all": lambda t: torch.stack([(t > -10).all(), (t > 0).all(1).any()]),
    "mse_loss": lambda t: torch.nn.functional.mse_loss(t, t * 2),
    "max_pool2d": lambda t: torch.nn.functional.max_pool2d(t.view(1, 1, 6, 6), 2, return_indices=True)[1],
    "interpolate": lambda t: torch.nn.functional.interpolate(t.view(1, 1, 6, 6), scale_factor=2),
    "eye": lambda t: torch.eye(3, 4, device=t.device),
    "exp out=": lambda t: torch.exp(t, out=torch.empty(6, 6, device=t.device)),
    "bitwise_not": lambda t: ~(t > 0),
    "std, var, std_mean": lambda t: torch.stack([t.std(), t.var(1)[0], *torch.std_mean(t, 0, keepdim=True)[1][0, :2]]),
    "mse_loss backward": lambda t: mse_grad(t),
    "binary_cross_entropy": lambda t: F.binary_cross_entropy(t.sigmoid(), (t > 0).float(), reduction="none"),
    "with logits": lambda t: F.binary_cross_entropy_with_logits(t, t.sigmoid()),
    "adaptive_avg_pool2d": lambda t: F.adaptive_avg_pool2d(t.view(1, 1, 6, 6), (2, 3)),
    "max_pool2d backward": lambda t: max_pool_grad(t),
    "bilinear": lambda t: F.interpolate(t.view(1, 1, 6, 6), scale_factor=2, mode="bilinear"),
    "flip, trace": lambda t: t.flip(0, 1) + t.trace(),
    "nan_to_num": lambda t: t.log().nan_to_num(),
    "smooth_l1, hypot, xlogy": lambda t: F.smooth_l1_loss(t, t.hypot(t * 2)) + torch.xlogy(t.abs(), 2),
    "roll": lambda t: t.roll((1, -2), (0, 1)) + t.roll(3),
    "randperm": lambda t: torch.randperm(6, device=t.device).sort()[0],
    "hardswish, prelu, huber_loss and their backward": lambda t: act_grads(t),
    "index_fill": lambda t: t.index_fill(1, torch.tensor([0, 4], device=t.device), -2.0),
    "nonzero, x[mask], argwhere": lambda t: torch.cat([(t > 0.5).nonzero().flatten().float(), t[t > 0],
                                                      torch.argwhere(t < -1).flatten().float()]),
    "tril_indices, triu_indices": lambda t: torch.cat([torch.tril_indices(4, 5, 1, device=t.device),
                                                      torch.triu_indices(3, 3, device=t.device)], 1),
    "sqrt(out=), x[i] = v, where(out=)": lambda t: torch.where(
        t > 0, t.index_put((torch.tensor([1], device=t.device),), torch.tensor(2.0, device=t.device)),
        torch.sqrt(t.abs(), out=torch.empty(0, device=t.device)), out=torch.empty(0, device=t.device)),
    "hardtanh, relu6, logit, dot, count_nonzero, heaviside": lambda t: torch.cat([
        F.hardtanh(t, -0.5, 0.5).flatten(), F.relu6(t * 4).flatten(), torch.logit(t.sigmoid()).flatten(),
        torch.dot(t[0], t[1]).view(1), torch.count_nonzero(t > 0, dim=0).float(),
        torch.heaviside(t[0], t[1])]),
    "histc, searchsorted": lambda t: torch.cat([torch.histc(t, bins=4, min=-1, max=1),
                                               torch.searchsorted(t[0].sort()[0], t[1:]).flatten().float()]),
    "reflect and replicate pads, unfold, fold": lambda t: torch.cat([
        F.pad(t.view(1, 1, 6, 6), (1, 2, 2, 1), mode="reflect").flatten(),
        F.pad(t.view(1, 1, 6, 6), (1, 2, 2, 1), mode="replicate").flatten(),
        F.fold(F.unfold(t.view(1, 1, 6, 6), 2, stride=2), (6, 6), 2, stride=2).flatten()]),
    "addmv, renorm, leaky_relu backward, adaptive_max_pool2d": lambda t: torch.cat([
        torch.addmv(t[0], t, t[1]), t.renorm(2, 0, 1.0).flatten(), leaky_grad(t).flatten(),
        F.adaptive_max_pool2d(t.view(1, 1, 6, 6), 2, return_indices=True)[1].flatten().float()]),
    "linalg solve, qr, eigh": lambda t: torch.cat([
        torch.linalg.solve(t @ t.mT + torch.eye(6, device=t.device), t).flatten(),
        *[r.flatten() for r in torch.linalg.qr(t)], torch.linalg.eigh(t @ t.mT)[0]]),
    "nll_loss 2-D, smooth_l1_loss backward, weight norm": lambda t: torch.cat([
        F.nll_loss(t.view(1, 4, 3, 3), (t[0, :3].abs() * 2).long().clamp(max=3).view(1, 1, 3).expand(1, 3, 3)).view(1),
        smooth_l1_grad(t).flatten(), torch._weight_norm(t, t.norm(dim=1, keepdim=True), 0).flatten()]),
    "grid_sample, polar, cdist": lambda t: torch.cat([
        F.grid_sample(t.view(1, 1, 6, 6), t[:2].reshape(1, 2, 3, 2).tanh(), align_corners=False).flatten(),
        torch.view_as_real(torch.polar(t.abs(), t)).flatten(), torch.cdist(t, t[:2]).flatten()]),
    "embedding_bag and its backward": lambda t: embedding_bag_grads(t),
}
for name, f in ops.items():
    got, want = f(x).cpu(), f(c)
    assert got.dtype == want.dtype and torch.equal(got, want), (name, got, want)
r = torch.randn(4000, device="openreg").cpu()  # normal_
assert abs(r.mean().item()) < 0.1 and 0.9 < r.std().item() < 1.1
print(sorted(m for m in ("sympy", "torch._dynamo") if m in sys.modules))
"""


def test_common_fallback_ops_infer_outputs_without_python_meta_kernels():
    # `import torch` hands these operators' Meta key to Python kernels, whose
    # first call imports sympy (and torch._dynamo for torch._refs ones): about
    # 1.4 s once per process, every rank of a job. Comparisons and cos/sin/log/
    # erf are native; the rest take the fallback with ATen's C++ Meta kernels
    # or openreg's own (csrc/aten/MetaFunctions.cpp). Results as the CPU's, in
    # a fresh process.
    assert modules_imported_by(_CPP_META_OPS) == "[]"


@pytest.mark.parametrize("mode", ["replicate", "reflect"])
@pytest.mark.parametrize("dims", [2, 3])
def test_padding_a_channels_last_input_gives_the_cpus_values(mode, dims):
    # The CPU kernel lays its result out as its channels-last input, even an
    # out= tensor of the right size; a kernel writing through a contiguous
    # device tensor would scramble it (such calls take the synchronous path).
    fmt = torch.channels_last if dims == 2 else torch.channels_last_3d
    x = torch.randn((2, 3) + (4,) * dims).contiguous(memory_format=fmt)
    pad = [1, 2] * dims
    want = F.pad(x, pad, mode=mode)
    assert torch.equal(F.pad(x.to("openreg"), pad, mode=mode).cpu(), want)
    op = getattr(torch.ops.aten, f"{'replication' if mode == 'replicate' else 'reflection'}_pad{dims}d")
    out = torch.empty(want.shape, device="openreg")
    op.out(x.to("openreg"), pad, out=out)
    assert torch.equal(out.cpu(), want)


@pytest.mark.parametrize("mode", ["replicate", "reflect"])
@pytest.mark.parametrize("dims", [2, 3])
def test_padding_into_a_strided_out_gives_the_cpus_values(mode, dims):
    # The CPU kernel restrides an out= of the right size to contiguous; the
    # device tensor keeps its strides, and gets the values (synchronous path).
    x = torch.randn((2, 3) + (4,) * dims)
    pad = [1, 2] * dims
    op = getattr(torch.ops.aten, f"{'replication' if mode == 'replicate' else 'reflection'}_pad{dims}d")
    want = op(x, pad)
    out = torch.empty(want.shape[:-2] + want.shape[-2:][::-1], device="openreg").transpose(-1, -2)
    op.out(x.to("openreg"), pad, out=out)
    assert torch.equal(out.cpu(), want)


def modules_imported_by(script):
    """Runs `script` in a fresh process; what it printed (which of sympy and
    torch._dynamo it ended up importing)."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip()


_CONV_NET = """
import sys, torch
def run(dev, channels_last, dtype):
    torch.manual_seed(0)
    nn = torch.nn
    m = nn.Sequential(nn.Conv2d(4, 8, 3, stride=2, padding=1, groups=2), nn.BatchNorm2d(8), nn.ReLU(),
                      nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1),
                      nn.GroupNorm(2, 4)).to(dev, dtype)
    x = torch.randn(3, 4, 10, 12, dtype=dtype)
    if channels_last:
        m, x = m.to(memory_format=torch.channels_last), x.to(memory_format=torch.channels_last)
    x = x.to(dev).requires_grad_()
    y = m(x)
    y.square().sum().backward()
    z = m.eval()(x)
    results = [y, z, x.grad, *[p.grad for p in m.parameters()]]
    return [t.detach().cpu() for t in results], [t.stride() for t in results]
for channels_last in (False, True):
    for dtype in (torch.float32, torch.float64):
        want, want_strides = run("cpu", channels_last, dtype)
        got, got_strides = run("openreg", channels_last, dtype)
        assert got_strides == want_strides, (channels_last, dtype, got_strides, want_strides)
        for g, w in zip(got, want):  # (torch.testing imports DTensor, and sympy with it)
            assert g.dtype == w.dtype and torch.allclose(g, w, rtol=1e-4, atol=1e-4), (g, w)
print(sorted(m for m in ("sympy", "torch._dynamo") if m in sys.modules))
"""


def test_conv_net_infers_outputs_without_python_meta_kernels():
    # Convolution, batch norm and group norm (forward and backward) have C++ Meta
    # kernels of openreg's own (MetaFunctions.cpp): a conv net's first step imported
    # sympy and torch._dynamo (~1.2 s) before. Values and strides as the CPU's.
    assert modules_imported_by(_CONV_NET) == "[]"


@pytest.mark.parametrize("call,message", [
    (lambda x: torch.nn.functional.conv2d(x, torch.ones(2, 3, 3, 3, device="openreg")),
     "expected input[1, 4, 6, 6] to have 3 channels, but got 4 channels instead"),
    (lambda x: torch.nn.functional.conv2d(x, torch.ones(2, 4, 7, 7, device="openreg")),
     "Kernel size can't be greater than actual input size"),
    (lambda x: torch.nn.functional.conv_transpose2d(x, torch.ones(4, 2, 3, 3, device="openreg"),
                                                    stride=2, output_padding=2),
     "output padding must be smaller than either stride or dilation"),
    (lambda x: torch.nn.functional.group_norm(x, 3), "divisible by num_groups"),
])
def test_conv_and_norm_argument_errors_raise_at_the_call(call, message):
    # What the C++ Meta kernels do not know to be valid takes the synchronous path:
    # the CPU kernel's own error, at the call, and the stream goes on.
    x = torch.ones(1, 4, 6, 6, device="openreg")
    with pytest.raises(RuntimeError, match=re.escape(message)):
        call(x)
    assert x.sum().item() == 144


def _bn_backward(d, x_dtype, param_dtype):
    x = torch.randn(4, 3, 5, dtype=x_dtype).to(d)
    p = torch.ones(3, dtype=param_dtype, device=d)
    return torch.ops.aten.native_batch_norm_backward(torch.ones_like(x), x, p, p, p, p, p, True,
                                                     1e-5, [True, True, True])


def _conv_backward(d, go_format, x_format, dims=2):
    size = (2, 3) + (8,) * dims
    x = torch.randn(size).to(d).contiguous(memory_format=x_format)
    w = torch.randn((4, 3) + (3,) * dims).to(d)
    go = torch.randn((2, 4) + (6,) * dims).to(d).contiguous(memory_format=go_format)
    return torch.ops.aten.convolution_backward(go, x, w, [4], [1] * dims, [0] * dims, [1] * dims,
                                               False, [0] * dims, 1, [True, True, True])


_CL, _CL3, _C = torch.channels_last, torch.channels_last_3d, torch.contiguous_format


@pytest.mark.parametrize("case", [
    "std of a 0-dim tensor over dim 0", "flip of a 0-dim tensor", "flip with a repeated dim",
    "batch norm backward, float64 input, float32 parameters",
    "batch norm backward, bfloat16 input, float32 parameters",
    "group norm of a non-contiguous input", "group norm backward of no weight, grad_weight asked",
    "conv3d, channels_last_3d input", "conv3d backward, channels_last_3d input",
    "conv2d backward, channels_last grad_output only",
    "nan_to_num of integers into out=", "max_pool2d backward, int32 indices",
    "roll of channels_last", "roll of channels_last by a whole turn", "roll of a 0-dim tensor",
    "triu_indices with a negative row", "randperm too large for float16",
    "clamp(out=) with a bound int16 cannot hold", "linalg.cross of bools", "norm(out=) of complex order",
    "bernoulli_ of an expanded tensor", "exponential_ of an expanded tensor",
    "uniform_ of an expanded tensor", "bernoulli_ of an expanded tensor, tensor p",
    "triu_indices with the largest offset", "x[0-dim mask] = v", "index_put_ with no index",
    "hardswish of channels_last", "hardswish of integers", "hardswish backward, transposed grad",
    "prelu of channels_last", "prelu with a float64 weight", "prelu backward of channels_last",
    "huber_loss of a transposed input", "huber_loss with a zero delta",
    "huber_loss backward of channels_last", "index_fill with a value int8 cannot hold",
    "index_fill with an int32 index", "index_fill of a 0-dim tensor",
    "huber_loss backward into an expanded grad_input",
])
def test_hand_written_meta_kernels_agree_with_the_cpu(case):
    # MetaFunctions.cpp's kernels: the CPU's results (values, dtypes, strides), or its
    # error at the call; what they cannot tell goes to the CPU kernel synchronously.
    A, F = torch.ops.aten, torch.nn.functional
    x0 = torch.randn(2, 6, 4, 5)
    fns = {
        "std of a 0-dim tensor over dim 0": lambda d: torch.tensor(1.5, device=d).std(0, keepdim=True),
        "flip of a 0-dim tensor": lambda d: torch.tensor(1.5, device=d).flip(0),
        "flip with a repeated dim": lambda d: torch.ones(2, 2, device=d).flip([0, -2]),
        "batch norm backward, float64 input, float32 parameters":
            lambda d: _bn_backward(d, torch.float64, torch.float32),
        "batch norm backward, bfloat16 input, float32 parameters":
            lambda d: _bn_backward(d, torch.bfloat16, torch.float32),
        "group norm of a non-contiguous input":
            lambda d: A.native_group_norm(x0.to(d).transpose(2, 3), None, None, 2, 6, 20, 3, 1e-5),
        "group norm backward of no weight, grad_weight asked":
            lambda d: A.native_group_norm_backward(x0.to(d), x0.to(d), torch.zeros(2, 3, device=d),
                                                   torch.ones(2, 3, device=d), None, 2, 6, 20, 3,
                                                   [True, True, True]),
        "conv3d, channels_last_3d input": lambda d: torch.nn.functional.conv3d(
            torch.randn(2, 3, 5, 6, 7).to(d).contiguous(memory_format=_CL3),
            torch.randn(4, 3, 3, 3, 3).to(d)),
        "conv3d backward, channels_last_3d input": lambda d: _conv_backward(d, _C, _CL3, dims=3),
        "conv2d backward, channels_last grad_output only": lambda d: _conv_backward(d, _CL, _C),
        "nan_to_num of integers into out=": lambda d: torch.nan_to_num(
            torch.arange(6, device=d).view(2, 3).t(), out=torch.empty(0, dtype=torch.long, device=d)),
        "max_pool2d backward, int32 indices": lambda d: A.max_pool2d_with_indices_backward(
            torch.ones(1, 1, 2, 2, device=d), torch.randn(1, 1, 4, 4).to(d), [2, 2], [2, 2], [0, 0],
            [1, 1], False, torch.zeros(1, 1, 2, 2, dtype=torch.int32, device=d)),
        "roll of channels_last": lambda d: x0.to(d).contiguous(memory_format=_CL).roll((1, 2), (1, 3)),
        "roll of channels_last by a whole turn":
            lambda d: x0.to(d).contiguous(memory_format=_CL).roll(4, 2),
        "roll of a 0-dim tensor": lambda d: torch.tensor(1.5, device=d).roll(1, 0),
        "triu_indices with a negative row": lambda d: torch.triu_indices(-1, 3, device=d),
        "randperm too large for float16": lambda d: torch.randperm(3000, dtype=torch.half, device=d),
        "clamp(out=) with a bound int16 cannot hold": lambda d: torch.clamp(
            torch.zeros(3, dtype=torch.int16, device=d), min=40000,
            out=torch.empty(3, dtype=torch.int16, device=d)),
        "linalg.cross of bools": lambda d: torch.linalg.cross(*[torch.ones(2, 3, dtype=torch.bool,
                                                                          device=d)] * 2),
        "norm(out=) of complex order": lambda d: A.norm.out(torch.ones(3, 4, device=d), 2j, [1], False,
                                                            out=torch.empty(0, device=d)),
        "bernoulli_ of an expanded tensor": lambda d: torch.zeros(1, 4, device=d).expand(3, 4).bernoulli_(0.5),
        "exponential_ of an expanded tensor": lambda d: torch.zeros(1, 4, device=d).expand(3, 4).exponential_(),
        "uniform_ of an expanded tensor": lambda d: torch.zeros(1, 4, device=d).expand(3, 4).uniform_(),
        "bernoulli_ of an expanded tensor, tensor p": lambda d: torch.zeros(4, 1, device=d).expand(
            4, 5).bernoulli_(torch.full((4, 5), 0.5, device=d)),
        "triu_indices with the largest offset": lambda d: torch.triu_indices(3, 3, 2**63 - 1, device=d),
        "x[0-dim mask] = v": lambda d: torch.zeros(3, 4, 5, device=d).index_put_(
            [torch.tensor(False, device=d)], torch.ones(2, device=d)),
        "index_put_ with no index": lambda d: torch.zeros(3, 4, device=d).index_put_(
            [], torch.ones(1, device=d)),
        "hardswish of channels_last": lambda d: F.hardswish(x0.to(d).contiguous(memory_format=_CL)),
        "hardswish of integers": lambda d: F.hardswish(torch.arange(4, device=d)),
        "hardswish backward, transposed grad": lambda d: A.hardswish_backward(
            x0.to(d).transpose(1, 3), x0.to(d).transpose(1, 3).contiguous()),
        "prelu of channels_last": lambda d: F.prelu(x0.to(d).contiguous(memory_format=_CL),
                                                    torch.rand(6).to(d)),
        "prelu with a float64 weight": lambda d: F.prelu(x0.to(d), torch.rand(6, dtype=torch.double).to(d)),
        "prelu backward of channels_last": lambda d: A._prelu_kernel_backward(
            x0.to(d), x0.to(d).contiguous(memory_format=_CL), torch.rand(1, 6, 1, 1).to(d)),
        "huber_loss of a transposed input": lambda d: F.huber_loss(
            x0.to(d).transpose(0, 3), x0.to(d).transpose(0, 3).contiguous(), reduction="none"),
        "huber_loss with a zero delta": lambda d: F.huber_loss(x0.to(d), x0.to(d), delta=0.0),
        "huber_loss backward of channels_last": lambda d: A.huber_loss_backward(
            torch.tensor(1.0, device=d), x0.to(d).contiguous(memory_format=_CL), x0.to(d), 1, 0.5),
        "index_fill with a value int8 cannot hold": lambda d: torch.zeros(3, 4, dtype=torch.int8,
            device=d).index_fill(1, torch.tensor([1], device=d), 300),
        "index_fill with an int32 index": lambda d: torch.zeros(3, 4, device=d).index_fill(
            1, torch.tensor([1], dtype=torch.int32, device=d), 1.0),
        "index_fill of a 0-dim tensor": lambda d: torch.tensor(1.5, device=d).index_fill(
            0, torch.tensor(0, device=d), 2.0),
        "huber_loss backward into an expanded grad_input": lambda d: A.huber_loss_backward.out(
            *[torch.randn(3, 4).to(d)] * 3, 0, 1.0, grad_input=torch.empty(3, 1, device=d).expand(3, 4)),
    }
    torch.manual_seed(0)
    try:
        want = fns[case]("cpu")
    except (RuntimeError, IndexError) as e:
        with pytest.raises(type(e), match=re.escape(str(e).splitlines()[0])):
            fns[case]("openreg")  # at the call, not at a later synchronisation
        return
    torch.manual_seed(0)
    got = fns[case]("openreg")
    want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and g.shape == w.shape and g.stride() == w.stride(), (g, w)
        torch.testing.assert_close(g.cpu(), w, equal_nan=True)


@pytest.mark.parametrize("mask_shape,message", [
    ((5,), "The size of tensor a (4) must match the size of tensor b (5) at non-singleton dimension 1"),
    ((2, 4, 4), "output with shape [4, 4] doesn't match the broadcast shape [2, 4, 4]"),
])
def test_masked_fill_with_a_mask_that_does_not_broadcast_raises_at_the_call(mask_shape, message):
    x = torch.zeros(4, 4, device="openreg")
    with pytest.raises(RuntimeError, match=re.escape(message)):
        x.masked_fill_(torch.ones(mask_shape, dtype=torch.bool, device="openreg"), 1.0)
    assert x.sum().item() == 0  # the stream still works


@pytest.mark.parametrize("dtype,value", [(torch.int8, 1000), (torch.float16, 1e6), (torch.int64, 1 + 1j)])
def test_masked_fill_with_a_device_value_that_does_not_fit_raises_at_the_call(dtype, value):
    # CUDA's kernel reads a device value with item(): the overflow raises at the call.
    x = torch.zeros(3, dtype=dtype, device="openreg")
    mask = torch.tensor([True, False, True], device="openreg")
    with pytest.raises(RuntimeError, match="value cannot be converted to type .* without overflow"):
        x.masked_fill_(mask, torch.tensor(value, device="openreg"))
    x.masked_fill_(mask, torch.tensor(7, dtype=dtype, device="openreg"))
    assert x.cpu().tolist() == [7, 0, 7]


@pytest.mark.parametrize("op", [torch._softmax, torch._log_softmax])
@pytest.mark.parametrize("out", [False, True])
def test_softmax_half_to_float_raises_at_the_call_as_on_the_cpu(op, out):
    x = torch.randn(2, 3, dtype=torch.half, device="openreg")
    with pytest.raises(RuntimeError, match="softmax with half to float conversion is not supported on CPU"):
        if out:
            op(x, 1, True, out=torch.empty(2, 3, device="openreg"))
        else:
            op(x, 1, True)
    y = op(x, 1, False).float()  # and the stream still works
    probabilities = y.exp() if op is torch._log_softmax else y
    assert probabilities.sum(1).cpu().tolist() == pytest.approx([1, 1], abs=0.01)


def test_range_triangular_and_cumulative_ops_do_not_import_dynamo():
    # Their Meta kernels are Python references whose first call imports
    # torch._dynamo (1-2 s once per process: every rank of a job at its first
    # forward); native kernels skip them. Checked in a fresh process.
    import subprocess
    import sys
    code = (
        "import sys, torch\n"
        "d = 'openreg'\n"
        "x = torch.ones(4, 4, device=d)\n"
        "r = [torch.arange(5, device=d), torch.arange(0, 1, 0.25, device=d),\n"
        "     torch.linspace(0, 1, 5, device=d), x.tril(), x.triu(1), x.cumsum(0)]\n"
        "assert r[1].tolist() == [0.0, 0.25, 0.5, 0.75] and r[3].sum().item() == 10\n"
        "assert r[5][:, 0].tolist() == [1.0, 2.0, 3.0, 4.0]\n"
        "print('torch._dynamo' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"
