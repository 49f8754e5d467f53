"""Receivers for tests/runtime/test_ipc.py, run in processes that
torch.multiprocessing spawns (they must be importable by name there)."""
import time

import torch
import openreg


def write_back(inbox, outbox):
    """Receives (tensor, its tail, parameter, storage, view), checks them, adds 1
    to the tensor in place and reports what it saw."""
    tensor, tail, param, storage, view = inbox.get(timeout=60)
    seen = {
        "device": str(tensor.device),
        "values": tensor.cpu().tolist(),
        "one storage": tail.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr(),
        "param": (type(param).__name__, param.requires_grad, param.detach().cpu().tolist()),
        "storage": (str(storage.device), storage.nbytes()),
        "view": view.cpu().tolist(),
        "allocated": torch.openreg.memory_allocated(tensor.device),
    }
    tensor.add_(1)
    view.mul_(10)
    torch.openreg.synchronize(tensor.device)  # synchronize() alone waits for device 0 only
    outbox.put(seen)
    assert inbox.get(timeout=60) == "done"


def hold(inbox, outbox):
    """Keeps a received tensor while the sender frees and reuses memory, then
    reports its sum and releases it while a side stream still reads it."""
    tensor = inbox.get(timeout=60)
    outbox.put("holding")
    assert inbox.get(timeout=60) == "check"
    outbox.put(tensor.sum().item())
    side = torch.openreg.Stream()
    side.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(side):
        torch.openreg._sleep(300)  # the read below runs well after the release is queued
        doubled = tensor * 2
    tensor.record_stream(side)
    del tensor
    torch.openreg.synchronize()  # the release runs after both streams' work,
    while openreg._C._ipc_pending_releases():  # on a thread of its own
        time.sleep(0.001)
    outbox.put(("released", doubled.sum().item()))
    assert inbox.get(timeout=60) == "done"


def report_device(inbox, outbox):
    """Receives (tensor, empty tensor, interprocess event) and reports their
    devices and the tensor's values, or the error."""
    try:
        t, empty, event = inbox.get(timeout=60)
        outbox.put((str(t.device), t.cpu().tolist(), str(empty.device), str(event.device)))
    except RuntimeError as e:
        outbox.put(str(e).splitlines()[0])


def sum_each(inbox, outbox):
    """Unpickles each message (bytes) into a tensor, keeps it and reports its sum."""
    import pickle

    kept = []
    while (message := inbox.get(timeout=60)) != "done":
        kept.append(pickle.loads(message))
        outbox.put(kept[-1].sum().item())
