"""Processes for tests/runtime/test_ipc_events.py, spawned by
torch.multiprocessing (they must be importable by name there)."""
import torch
import openreg


def wait_then_record(inbox, outbox):
    """Waits on its stream for the sender's record, sums the shared tensor,
    then writes 3s into it behind a long kernel and records the event itself."""
    x, event = inbox.get(timeout=60)
    outbox.put(("opened", str(event.device)))
    assert inbox.get(timeout=60) == "recorded"
    before = event.query()  # the sender's 3 s kernel is still running
    torch.openreg.current_stream().wait_event(event)
    total = x.sum().item()
    outbox.put({"query before": before, "sum": total})
    torch.openreg._sleep(300)
    x.fill_(3.0)
    event.record()
    outbox.put("child recorded")
    assert inbox.get(timeout=60) == "done"


def record_and_stall(inbox, outbox):
    """Records the received event behind a 60 s kernel: it is killed first."""
    event = inbox.get(timeout=60)
    torch.openreg._sleep(60_000)
    event.record()
    outbox.put("recorded")
    inbox.get(timeout=120)


def record_after_a_failure(inbox, outbox):
    """Records the received event on a stream whose kernel failed before it."""
    event = inbox.get(timeout=60)
    torch.openreg._C._raise_in_kernel("boom in the recorder")
    event.record()
    outbox.put("recorded")
    inbox.get(timeout=120)
