"""Receivers for tests/runtime/test_ipc.py, run in processes that
torch.multiprocessing spawns (they must be importable by name there)."""
import torch
import openreg  # noqa: F401


def write_back(inbox, outbox):
    """Receives (tensor, parameter, storage, view), checks them, adds 1 to the
    tensor in place and reports what it saw."""
    tensor, param, storage, view = inbox.get()
    seen = {
        "device": str(tensor.device),
        "values": tensor.cpu().tolist(),
        "param": (type(param).__name__, param.requires_grad, param.detach().cpu().tolist()),
        "storage": (str(storage.device), storage.nbytes()),
        "view": view.cpu().tolist(),
        "allocated": torch.openreg.memory_allocated(tensor.device),
    }
    tensor.add_(1)
    view.mul_(10)
    torch.openreg.synchronize()
    outbox.put(seen)
    assert inbox.get() == "done"


def hold(inbox, outbox):
    """Keeps a received tensor while the sender frees and reuses memory, then
    reports its sum and releases it."""
    tensor = inbox.get()
    outbox.put("holding")
    assert inbox.get() == "check"
    outbox.put(tensor.sum().item())
    del tensor
    torch.openreg.synchronize()  # the release runs after the current stream's work
    outbox.put("released")
    assert inbox.get() == "done"
