"""torch.multiprocessing and openreg tensors: sharing them between processes is
refused with a clear error at the pickling step.

torch.multiprocessing shares a CUDA tensor through CUDA IPC (the receiver maps
the sender's allocation); for any other device it falls back to the CPU's
shared-memory path, which fails for device memory with "_share_fd_: only
available on CPU". openreg does not simulate that IPC path, so its reducers
say so and suggest the CPU; CPU (and other) tensors keep torch's reducers.
Tests: tests/runtime/test_device.py.
"""
from multiprocessing.reduction import ForkingPickler

import torch
from torch.multiprocessing import reductions

_MESSAGE = ("Cannot share an openreg {} between processes: torch.multiprocessing shares CUDA "
            "tensors through CUDA IPC, which openreg does not simulate. Move it to the CPU first "
            "(.cpu()) and back to the device in the receiving process.")


def _reduce_tensor(tensor):
    if tensor.device.type == "openreg":
        raise RuntimeError(_MESSAGE.format("tensor"))
    return reductions.reduce_tensor(tensor)


def _reduce_storage(storage):
    if storage.device.type == "openreg":
        raise RuntimeError(_MESSAGE.format("storage"))
    return reductions.reduce_storage(storage)


def register() -> None:
    """Installs the reducers over torch's (torch.multiprocessing registered its own at import)."""
    for cls in (*torch._tensor_classes, torch.Tensor, torch.nn.parameter.Parameter):
        ForkingPickler.register(cls, _reduce_tensor)
    ForkingPickler.register(torch.UntypedStorage, _reduce_storage)
