"""The native hot-path kernels (csrc/aten/Pointwise.cpp, Blas.cpp, Reduction.cpp) against the
CPU, including in-place variants, broadcasting, type promotion, and CUDA's device errors."""
import pytest
import torch

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
    with torch.openreg.stream(s):
        torch.openreg._sleep(150)
        b = a * 3
        assert b.device == torch.device("openreg:2")
        assert not s.query()
    s.synchronize()
    torch.testing.assert_close(b.cpu(), a.cpu() * 3)
