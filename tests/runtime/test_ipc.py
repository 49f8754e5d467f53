"""Sharing openreg tensors between processes (torch.multiprocessing), as CUDA
IPC shares CUDA tensors (csrc/runtime/OpenRegIPCTypes.h, openreg/_sharing.py)."""
import os
import textwrap
import time

_PRELUDE = f"""
import sys
sys.path.insert(0, {os.path.dirname(__file__)!r})
import torch, torch.multiprocessing as mp
import openreg
import _ipc_children
ctx = mp.get_context("spawn")
inbox, outbox = ctx.Queue(), ctx.Queue()
"""


def _script(body):
    return _PRELUDE + textwrap.dedent(body)


def _run_with_child(python, target, body, env=None):
    """Runs `body` in a sender beside a spawned receiver running
    _ipc_children.<target>, which exits once the sender puts "done"."""
    r = python(_script(f"""
        child = ctx.Process(target=_ipc_children.{target}, args=(inbox, outbox), daemon=True)
        child.start()
    """) + textwrap.dedent(body) + textwrap.dedent("""
        inbox.put("done")
        child.join(60)
        assert child.exitcode == 0
        print("ok")
    """), env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_a_tensor_sent_to_another_process_is_the_same_device_memory(python):
    _run_with_child(python, "write_back", """
        torch.openreg.set_device(1)
        torch.openreg._sleep(300)  # t is still being written when the queue's thread pickles it
        t = torch.arange(4.0, device="openreg:1")
        lazy_copy = torch._lazy_clone(t)  # copy-on-write: sharing t gives t memory of its own
        p = torch.nn.Parameter(torch.ones(2, device="openreg:1"))
        s = torch.full((3,), 7, dtype=torch.int32, device="openreg:1").untyped_storage()
        base = torch.arange(6.0, device="openreg:1")
        inbox.put((t, t[1:], p, s, base[2:5]))
        seen = outbox.get(timeout=60)
        assert seen["device"] == "openreg:1", seen
        assert seen["values"] == [0.0, 1.0, 2.0, 3.0], seen
        assert seen["one storage"], seen  # tensors sharing a storage arrive sharing one
        assert seen["param"] == ("Parameter", True, [1.0, 1.0]), seen
        assert seen["storage"] == ("openreg:1", 12), seen
        assert seen["view"] == [2.0, 3.0, 4.0], seen
        # The receiver's device memory is the sender's: none of its own was allocated.
        assert seen["allocated"] == 0, seen
        # Its writes (in place, on the view's offset too) are the sender's tensors'.
        assert t.cpu().tolist() == [1.0, 2.0, 3.0, 4.0], t
        assert lazy_copy.cpu().tolist() == [0.0, 1.0, 2.0, 3.0], lazy_copy
        assert base.cpu().tolist() == [0.0, 1.0, 20.0, 30.0, 40.0, 5.0], base
    """)


def test_the_sender_keeps_shared_memory_until_the_receiver_releases_it(python):
    _run_with_child(python, "hold", """
        before = torch.openreg.memory_allocated()
        t = torch.full((1 << 18,), 2.0, device="openreg")
        inbox.put(t)
        assert outbox.get(timeout=60) == "holding"
        t.untyped_storage().resize_(0)  # as FSDP frees a parameter's memory
        del t
        torch.openreg.ipc_collect()
        torch.openreg.empty_cache()
        # Still held for the receiver: not back in the allocator, so not reused here.
        assert torch.openreg.memory_allocated() == before + (1 << 20)
        others = [torch.full((1 << 18,), -1.0, device="openreg") for _ in range(4)]
        inbox.put("check")
        assert outbox.get(timeout=60) == 2.0 * (1 << 18)
        assert outbox.get(timeout=60) == ("released", 4.0 * (1 << 18))
        torch.openreg.ipc_collect()
        assert torch.openreg.memory_allocated() == before + 4 * (1 << 20)
    """)


def test_the_receiver_waits_for_the_senders_stream_instead_of_the_sender(python):
    # CUDA's protocol: pickling records an interprocess event on the sender's
    # current stream, and the receiver's current stream waits for it; the
    # sender's host goes on at once. Also for a storage the receiver holds
    # already (which torch's CUDA path does not wait for).
    _run_with_child(python, "sum_each", """
        from multiprocessing.reduction import ForkingPickler
        t = torch.zeros(1 << 16, device="openreg")
        for value in (1.0, 2.0):
            torch.openreg._sleep(1000)
            t.fill_(value)
            message = bytes(ForkingPickler.dumps(t))
            assert not torch.openreg.current_stream().query()  # the sender did not wait
            inbox.put(message)
            assert outbox.get(timeout=60) == value * (1 << 16)
    """)


_RECEIVE_AFTER_THE_SENDER_EXITS = """
import os, pickle, sys, time
import torch, openreg
sender, out = int(sys.argv[1]), sys.argv[2]
print("ready", flush=True)
t = pickle.loads(sys.stdin.buffer.read(int(sys.stdin.buffer.readline())))
print("got", flush=True)
def gone():
    try:
        with open(f"/proc/{sender}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in "ZX"
    except FileNotFoundError:
        return True
while not gone():
    time.sleep(0.02)
try:
    result = [t.sum().item(), (torch.ones(2, device="openreg") + 1).sum().item()]
except RuntimeError as e:
    result = str(e).splitlines()[0]
with open(out + ".tmp", "w") as f:
    f.write(repr(result))
os.rename(out + ".tmp", out)
"""


def test_a_sender_exiting_at_once_lets_its_stream_reach_what_it_shared(python, tmp_path):
    # The receiver has opened the tensor; the sender exits while its stream
    # still runs the writes the receiver must wait for. It lets them finish
    # first, so the receiver's stream is not failed by a lost record.
    out = tmp_path / "seen"
    r = python(f"""
        import os, subprocess, sys
        import torch, openreg
        from multiprocessing.reduction import ForkingPickler
        receiver = subprocess.Popen(
            [sys.executable, "-c", {_RECEIVE_AFTER_THE_SENDER_EXITS!r}, str(os.getpid()), {str(out)!r}],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert receiver.stdout.readline().strip() == b"ready"
        t = torch.ones(1 << 16, device="openreg")
        torch.openreg._sleep(3000)  # outlasts the receiver's unpickling, even on a loaded machine
        t.fill_(2.0)
        data = bytes(ForkingPickler.dumps(t))
        receiver.stdin.write(b"%d\\n" % len(data) + data)
        receiver.stdin.flush()
        assert receiver.stdout.readline().strip() == b"got"
        print(torch.openreg.current_stream().query())
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"  # it exits with the writes still queued
    deadline = time.monotonic() + 60
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert out.read_text() == repr([2.0 * (1 << 16), 4.0])


def test_a_sender_whose_stream_failed_raises_at_pickling(python):
    r = python(_script("""
        import time
        from multiprocessing.reduction import ForkingPickler
        t = torch.ones(4, device="openreg")
        torch.openreg._C._raise_in_kernel("boom")
        while True:  # until the failure is known
            try:
                torch.openreg.current_stream().query()
                time.sleep(0.01)
            except RuntimeError:
                break
        try:
            ForkingPickler.dumps(t)
            print("pickled")
        except RuntimeError as e:
            print(str(e).splitlines()[0])
    """))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "openreg kernel failed asynchronously on stream 0 on device openreg:0: boom"


def test_past_1000_live_sharing_events_the_sender_synchronises_its_stream(python):
    # Each event is kept until its receiver lets go: as CUDA past its 1000,
    # the sender then waits for its stream instead.
    r = python(_script("""
        from multiprocessing.reduction import ForkingPickler
        t = torch.ones(4, device="openreg")
        held = [ForkingPickler.dumps(t) for _ in range(999)]  # no receiver: all stay live
        torch.openreg._sleep(1000)
        held.append(ForkingPickler.dumps(t))
        print(torch.openreg.current_stream().query())
        held.append(ForkingPickler.dumps(t))
        print(torch.openreg.current_stream().query())
    """))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "True"]


def test_a_non_leaf_tensor_that_requires_grad_is_refused_as_torch_refuses_it(python):
    r = python(_script("""
        q = ctx.SimpleQueue()  # pickles in put(), on this thread
        x = torch.ones(3, device="openreg", requires_grad=True) * 2
        try:
            q.put(x)
        except RuntimeError as e:
            print(str(e).split(",")[0])
        q.put(torch.ones(2))  # CPU tensors keep torch's shared-memory path
        print(q.get().tolist())
    """))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "Cowardly refusing to serialize non-leaf tensor which requires_grad", "[1.0, 1.0]"]


def test_released_shared_memory_is_freed_before_an_out_of_memory_error(python):
    # A 24 MiB device: a shared 12 MiB block, dropped here and released by
    # the receiver, is freed when a later allocation would not fit (CUDA's IPC
    # collect callback).
    _run_with_child(python, "hold", """
        t = torch.full((3 << 20,), 2.0, device="openreg")
        inbox.put(t)
        assert outbox.get(timeout=60) == "holding"
        del t
        inbox.put("check")
        outbox.get(timeout=60)
        outbox.get(timeout=60)  # released
        torch.openreg.empty_cache()
        x = torch.empty(4 << 20, device="openreg")  # fits only once the shared block is freed
    """, env={"OPENREG_DEVICE_MEMORY": str(24 << 20)})


def test_sharing_in_a_forked_child_raises_instead_of_crashing(python):
    r = python(_script("""
        import os
        from multiprocessing.reduction import ForkingPickler
        t = torch.ones(4, device="openreg")
        ForkingPickler.dumps(t)  # a share before the fork maps the reference counts
        pid = os.fork()
        if pid == 0:
            torch.openreg.ipc_collect()  # nothing to free in a child: no crash
            try:
                ForkingPickler.dumps(t)
                os._exit(3)
            except RuntimeError as e:
                if "forked subprocess" not in str(e):
                    os._exit(4)
            del t  # the inherited shared storage dies here: no crash either
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    """))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "0"


def test_a_shared_tensor_arrives_on_the_same_physical_device(python):
    # The sender sees physical devices 1 and 2 (OPENREG_VISIBLE_DEVICES=1,2) and
    # shares from its openreg:1, physical device 2: a receiver that sees only
    # device 2 gets it on its openreg:0; one that does not see it, an error.
    r = python(_script("""
        import os
        assert torch.openreg.device_count() == 2
        t = torch.arange(3.0, device="openreg:1")
        empty = torch.empty(0, device="openreg:1")
        torch.openreg.set_device(1)
        event = torch.openreg.Event(interprocess=True)
        seen = []
        for visible in ("2", "0"):
            os.environ["OPENREG_VISIBLE_DEVICES"] = visible  # the child's, at its start
            child = ctx.Process(target=_ipc_children.report_device, args=(inbox, outbox))
            child.start()
            inbox.put((t, empty, event))
            seen.append(outbox.get(timeout=60))
            child.join(60)
        print(seen[0])
        print(seen[1])
    """), env={"OPENREG_DEVICE_COUNT": "4", "OPENREG_VISIBLE_DEVICES": "1,2"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "('openreg:0', [0.0, 1.0, 2.0], 'openreg:0', 'openreg:0')", lines
    assert lines[1].endswith(" on physical openreg device 2, which this process does not see "
                             "(OPENREG_VISIBLE_DEVICES)"), lines
