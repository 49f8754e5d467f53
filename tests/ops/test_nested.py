"""Nested tensors on openreg (csrc/aten/NestedFallback.cpp): operators run on
the CPU's nested kernels over host copies; results match the CPU's."""
import pytest
import torch

pytestmark = pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")


def _pair(device):
    return torch.nested.nested_tensor([torch.arange(6.0).reshape(2, 3), torch.ones(4, 3)], device=device)


def test_nested_tensor_ops_match_the_cpu():
    cpu, dev = _pair("cpu"), _pair("openreg")
    assert dev.is_nested and dev.device.type == "openreg"
    for f in (lambda t: t * 2 + 1, lambda t: t.relu(), lambda t: torch.nn.functional.linear(t, torch.ones(5, 3, device=t.device))):
        out = f(dev)
        assert out.is_nested and out.device == dev.device
        torch.testing.assert_close(out.to_padded_tensor(0.0).cpu(), f(cpu).to_padded_tensor(0.0))
    dev.mul_(3)  # in place: the device buffer is written
    torch.testing.assert_close(dev.to_padded_tensor(-1.0).cpu(), (cpu * 3).to_padded_tensor(-1.0))
    assert [t.cpu().tolist() for t in dev.unbind()] == [t.tolist() for t in (cpu * 3).unbind()]


def test_transformer_encoder_fast_path_with_a_padding_mask():
    # The default TransformerEncoder takes its nested-tensor fast path in
    # inference with a padding mask (it failed with "NestedTensorImpl doesn't
    # support strides").
    torch.manual_seed(0)
    enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 2).eval()
    x = torch.randn(2, 5, 8)
    mask = torch.tensor([[False] * 5, [False, False, False, True, True]])
    with torch.no_grad():
        expected = enc(x, src_key_padding_mask=mask)
        out = enc.to("openreg")(x.to("openreg"), src_key_padding_mask=mask.to("openreg"))
    assert out.device.type == "openreg" and not out.is_nested
    torch.testing.assert_close(out.cpu(), expected)


def test_results_go_where_the_op_says():
    n = _pair("openreg")
    assert n.cpu().device.type == "cpu" and n.to("cpu").device.type == "cpu"
    assert n.to("openreg:1").device == torch.device("openreg:1")
    assert torch.ones_like(n, device="cpu").device.type == "cpu"
    assert torch.empty_like(n, device="openreg:1").device == torch.device("openreg:1")
    assert n._nested_tensor_size().device.type == "cpu"  # layout metadata stays on the host, as on CUDA
    torch.testing.assert_close(n.to("openreg:1").to_padded_tensor(0.0).cpu(), _pair("cpu").to_padded_tensor(0.0))


def test_views_write_through_to_the_base():
    n, c = _pair("openreg"), _pair("cpu")
    for t in (n, c):
        t.unbind()[0].mul_(0)
        t[1].zero_()
        t.detach().add_(1)
    assert torch.equal(n.to_padded_tensor(-1.0).cpu(), c.to_padded_tensor(-1.0))


def test_nested_from_a_device_buffer_and_the_values_backward():
    sizes, strides, offsets = torch.tensor([[2, 4], [3, 4]]), torch.tensor([[4, 1], [4, 1]]), torch.tensor([0, 8])
    v = torch._nested_view_from_buffer(torch.arange(20.0, device="openreg"), sizes, strides, offsets)
    assert v.device.type == "openreg" and v.to_padded_tensor(0.0).sum().item() == 190.0
    grads = []
    for device in ("cpu", "openreg"):
        torch.manual_seed(0)
        n = torch.nested.nested_tensor([torch.randn(2, 4), torch.randn(3, 4)], device=device, requires_grad=True)
        (n.values() * torch.arange(20.0, device=device)).sum().backward()
        grads.append(n.grad.to_padded_tensor(0.0).cpu())
    assert torch.equal(*grads)
    p = torch._nested_from_padded(torch.ones(2, 3, 4, device="openreg"), sizes)
    assert p.device.type == "openreg" and p.to_padded_tensor(0.0).sum().item() == 20.0


def test_a_host_nested_tensor_moves_to_the_device_and_back_with_gradients():
    cpu = _pair("cpu")
    moved = cpu.to("openreg")
    assert moved.device.type == "openreg"
    assert torch.equal(moved.to_padded_tensor(0.0).cpu(), cpu.to_padded_tensor(0.0))
    n = _pair("openreg").requires_grad_()
    n.cpu().to_padded_tensor(0.0).sum().backward()  # the gradient comes back with .to(openreg)
    assert n.grad.device.type == "openreg"
    assert n.grad.to_padded_tensor(-1.0).cpu().sum().item() == 18 - 6  # ones, and -1 padding
