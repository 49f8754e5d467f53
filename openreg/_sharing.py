"""torch.multiprocessing and openreg tensors: CUDA IPC's counterpart.

torch.multiprocessing pickles a CUDA tensor as a CUDA IPC handle, and the
receiver maps the sender's allocation; for other devices it falls back to
the CPU's shared-memory path, which fails for device memory. These reducers
do for openreg what torch's do for CUDA (csrc/runtime/OpenRegIPCTypes.h):
- the receiver's tensor lives in the same device memory, on the same device
  index: writes on either side are seen by the other once their streams ran;
- the sender waits for its device's queued work when it pickles (CUDA records
  an event for the receiver to wait on instead);
- the sender keeps each pickled storage alive until its receiver dropped it;
  `torch.openreg.ipc_collect()` (run at each new share as well) lets go of
  those already released, as `torch.cuda.ipc_collect()` does.
CPU (and other) tensors keep torch's reducers.
Tests: tests/runtime/test_ipc.py.
"""
import threading
from multiprocessing.reduction import ForkingPickler

import torch
from torch.multiprocessing import reductions

from . import _C

_lock = threading.Lock()
_sent = {}  # slot -> the storage kept alive for its receiver


def ipc_collect() -> None:
    """Lets go of the shared storages every receiver has released."""
    with _lock:
        for slot in [s for s in _sent if _C._ipc_slot_released(s)]:
            del _sent[slot]


def _share(storage):
    if storage.nbytes() == 0:
        return None
    ipc_collect()
    over = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
    handle = _C._ipc_share(over)
    with _lock:
        _sent[handle[-1]] = storage
    return handle


def _open(device, handle):
    if handle is None:
        return torch.UntypedStorage(0, device=device)
    return _C._ipc_open(*handle).untyped_storage()


def _rebuild_storage(device, handle):
    return _open(device, handle)


def _rebuild_tensor(cls, device, handle, dtype, size, stride, offset, requires_grad):
    storage = _open(device, handle)
    t = torch.empty(0, dtype=dtype, device=storage.device).set_(storage, offset, size, stride)
    if cls is torch.nn.parameter.Parameter:
        return torch.nn.parameter.Parameter(t, requires_grad=requires_grad)
    return t.requires_grad_(requires_grad)


def _reduce_tensor(tensor):
    if tensor.device.type != "openreg":
        return reductions.reduce_tensor(tensor)
    # torch's own refusal, worded as torch words it for CUDA tensors.
    if tensor.requires_grad and not tensor.is_leaf:
        raise RuntimeError(
            "Cowardly refusing to serialize non-leaf tensor which requires_grad, since autograd "
            "does not support crossing process boundaries.  If you just want to transfer the "
            "data, call detach() on the tensor before serializing (e.g., putting it on the queue).")
    if tensor.layout != torch.strided:
        raise RuntimeError(f"Cannot share an openreg tensor of layout {tensor.layout} between "
                           "processes: only strided tensors are shared")
    storage = tensor.untyped_storage()
    return (_rebuild_tensor, (type(tensor), tensor.device, _share(storage), tensor.dtype,
                              tuple(tensor.size()), tuple(tensor.stride()),
                              tensor.storage_offset(), tensor.requires_grad))


def _reduce_storage(storage):
    if storage.device.type != "openreg":
        return reductions.reduce_storage(storage)
    return (_rebuild_storage, (storage.device, _share(storage)))


def register() -> None:
    """Installs the reducers over torch's (torch.multiprocessing registered its own at import)."""
    for cls in (*torch._tensor_classes, torch.Tensor, torch.nn.parameter.Parameter):
        ForkingPickler.register(cls, _reduce_tensor)
    ForkingPickler.register(torch.UntypedStorage, _reduce_storage)
