"""torch.multiprocessing and openreg tensors: CUDA IPC's counterpart.

PyTorch hook: reducers registered with
``multiprocessing.reduction.ForkingPickler.register`` (``register()``, called at
``import openreg``) for Tensor, Parameter, UntypedStorage and Event.

torch.multiprocessing pickles a CUDA tensor as a CUDA IPC handle, and the
receiver maps the sender's allocation; for other devices it falls back to
the CPU's shared-memory path, which fails for device memory. These reducers
do for openreg what torch's do for CUDA (csrc/runtime/OpenRegIPCTypes.h):
- the receiver's tensor lives in the same device memory, on the same device
  index: writes on either side are seen by the other once their streams ran;
- as CUDA's, the sender records an interprocess event on its current stream
  when it pickles, and the receiver's current stream waits for it (the
  sender's host does not wait; past 1000 live such events it synchronises
  that stream instead, as CUDA does): work the sender queued on
  other streams must be ordered before its current stream, as with CUDA;
- the sender's block outlives its storage until every receiver dropped its
  copy; `torch.openreg.ipc_collect()` (also run at each share and before an
  out-of-memory error) frees those already released, as `torch.cuda.ipc_collect()`;
- tensors sharing a storage arrive sharing one (torch's storage_from_cache);
- interprocess events (``torch.openreg.Event(interprocess=True)``) arrive as
  the same event, as torch.cuda.Event's do.
CPU (and other) tensors keep torch's reducers.
Tests: tests/runtime/test_ipc.py.
"""
import multiprocessing.util
import threading
from multiprocessing.reduction import ForkingPickler

import torch
from torch.multiprocessing import reductions

from . import _C

# Receiver side: storages already opened, by the sender's memory they map
# (torch's storage_from_cache): tensors that share a storage arrive sharing one.
_lock = threading.Lock()
_received = {}  # (pid, fd, inode, offset, nbytes) -> StorageWeakRef


def ipc_collect() -> None:
    """Frees the device memory of shared storages that this process dropped and
    every receiver has released (also done at each share and before an OOM)."""
    _C._ipc_collect()


def _visible_index(physical: int) -> int:
    """This process's index of physical device `physical` (OPENREG_VISIBLE_DEVICES)."""
    index = _C._device_from_physical_index(physical)
    if index < 0:
        raise RuntimeError(f"openreg: the object shared by another process is on physical openreg "
                           f"device {physical}, which this process does not see "
                           "(OPENREG_VISIBLE_DEVICES)")
    return index


def _share(storage):
    if storage.nbytes() == 0:  # no memory to map: only its device, by physical index
        return ("empty", _C._device_physical_index(storage.device.index))
    over = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
    return _C._ipc_share(over)


def _open(device, handle):
    if handle[0] == "empty":
        return torch.UntypedStorage(0, device=torch.device("openreg", _visible_index(handle[1])))
    memory, nbytes = handle[2], handle[1]
    key = (*memory, nbytes)
    with _lock:
        ref = _received.get(key)
        held = None if ref is None else torch.UntypedStorage._new_with_weak_ptr(ref.cdata)
        if held is not None:  # the storage already held serves, once the sender's writes are in
            _C._ipc_reuse(held.device.index, *handle)
            return held
        storage = _C._ipc_open(*handle).untyped_storage()
        _received[key] = reductions.StorageWeakRef(storage)
        for stale in [k for k, r in _received.items() if r.expired()]:
            del _received[stale]
        return storage


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


def _rebuild_event(physical, handle):
    from .streams import Event
    return Event.from_ipc_handle(_visible_index(physical), handle)


def _reduce_event(event):
    # As torch's reduce_event for torch.cuda.Event (interprocess events only),
    # with the device by physical index, as tensors travel.
    handle = event.ipc_handle()  # refuses an event that is not interprocess
    return (_rebuild_event, (_C._device_physical_index(event.device.index), handle))


def register() -> None:
    """Installs the reducers over torch's (torch.multiprocessing registered its own at import)."""
    from .streams import Event
    ForkingPickler.register(Event, _reduce_event)
    for cls in (*torch._tensor_classes, torch.Tensor, torch.nn.parameter.Parameter):
        ForkingPickler.register(cls, _reduce_tensor)
    ForkingPickler.register(torch.UntypedStorage, _reduce_storage)
    # A sender that exits before its stream reached what it shared fails its
    # receivers' streams: at exit, after multiprocessing's queues flushed
    # (their feeder threads pickle too; they join at priority -5), it waits
    # for that, within reason (nothing to wait for if it shared nothing).
    multiprocessing.util.Finalize(None, _C._ipc_await_shared_writes, args=(10.0,), exitpriority=-10)
