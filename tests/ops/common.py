"""Helpers shared by the openreg-vs-CPU comparison tests in tests/ops."""
import torch
from torch.utils._pytree import tree_flatten, tree_map

DEVICE = "openreg"


def copy_tensor(x, device):
    """A copy of `x` on `device` with the same storage layout (size, strides,
    offset, and the bytes around the view), so ops that look past the view
    (as_strided, set_) see the same memory on both devices. requires_grad is
    kept on a fresh leaf, so autograd comparisons start independently."""
    with torch.no_grad():
        if x.layout != torch.strided or x.is_contiguous() and x.storage_offset() == 0 \
                and x.untyped_storage().nbytes() == x.numel() * x.element_size():
            y = x.detach().to(device)
        else:
            flat = torch.empty(0, dtype=x.dtype, device=x.device)
            flat.set_(x.untyped_storage())
            y = flat.to(device).as_strided(x.size(), x.stride(), x.storage_offset())
    y = y.detach()
    if x.requires_grad:
        y.requires_grad_(True)
    return y


def to_device(value, device=DEVICE, source="cpu"):
    """Copies every `source` tensor in a nested value to `device`; torch.device
    and device strings naming `source` are renamed (factory kwargs, `to`).
    A tensor passed twice stays one tensor (autograd sums its gradients)."""
    copies = {}

    def move(x):
        if isinstance(x, torch.Tensor):
            if x.device.type != source:
                return x
            if id(x) not in copies:
                copies[id(x)] = copy_tensor(x, device)
            return copies[id(x)]
        if isinstance(x, torch.device) and x.type == source:
            return torch.device(device)
        if isinstance(x, str) and x.split(":")[0] == source:
            return device
        return x

    return tree_map(move, value)


def to_cpu(value):
    return tree_map(lambda x: x.detach().cpu() if isinstance(x, torch.Tensor) else x, value)


def tensor_devices(value):
    return [x.device.type for x in tree_flatten(value)[0] if isinstance(x, torch.Tensor)]


def assert_same(actual, expected, **kwargs):
    """`actual` (an openreg result) equals the CPU's `expected`: same structure,
    dtypes and values, and every tensor the CPU returns on the CPU comes back
    on openreg (a result silently computed on the host is a failure)."""
    exp_devices = tensor_devices(expected)
    act_devices = tensor_devices(actual)
    assert len(exp_devices) == len(act_devices), (act_devices, exp_devices)
    for a, e in zip(act_devices, exp_devices):
        assert a == (DEVICE if e == "cpu" else e), f"result on {a}, expected {DEVICE}"
    kwargs.setdefault("equal_nan", True)
    torch.testing.assert_close(to_cpu(actual), expected, **kwargs)
