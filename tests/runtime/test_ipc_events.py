"""Interprocess events (torch.openreg.Event(interprocess=True), ipc_handle,
from_ipc_handle), as torch.cuda.Event's (csrc/runtime/OpenRegIpcEvent.h,
csrc/runtime/driver/IpcEvent.h)."""
import os
import textwrap

_PRELUDE = f"""
import sys, time
sys.path.insert(0, {os.path.dirname(__file__)!r})
import torch, torch.multiprocessing as mp
import openreg
import _ipc_event_children
ctx = mp.get_context("spawn")
inbox, outbox = ctx.Queue(), ctx.Queue()
"""


def _run(python, body, child=None):
    start = "" if child is None else f"""
        child = ctx.Process(target=_ipc_event_children.{child}, args=(inbox, outbox), daemon=True)
        child.start()
    """
    r = python(_PRELUDE + textwrap.dedent(start) + textwrap.dedent(body) + "\nprint('ok')\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "ok", r.stdout


def test_an_interprocess_event_works_as_an_event_in_its_own_process(python):
    _run(python, """
        event = torch.openreg.Event(interprocess=True)
        assert event.query()  # never recorded
        assert event.device == torch.device("openreg:0"), event.device
        side = torch.openreg.Stream()
        x = torch.zeros(1 << 16, device="openreg")
        side.wait_stream(torch.openreg.current_stream())  # x's zeros first (the race checker's find)
        with torch.openreg.stream(side):
            torch.openreg._sleep(1000)
            x.fill_(2.0)
            event.record()
        assert not event.query()
        torch.openreg.current_stream().wait_event(event)
        assert x.sum().item() == 2.0 * (1 << 16)  # ordered after the side stream's fill
        assert event.query()
        # Opened in the same process: the same event.
        opened = torch.openreg.Event.from_ipc_handle(0, event.ipc_handle())
        with torch.openreg.stream(side):
            torch.openreg._sleep(1000)
            event.record()
        assert not opened.query()
        opened.synchronize()
        assert event.query()
    """)


def test_interprocess_events_refuse_what_cuda_refuses(python):
    r = python(_PRELUDE + textwrap.dedent("""
        from multiprocessing.reduction import ForkingPickler
        def message(call):
            try:
                call()
            except RuntimeError as e:
                return str(e).splitlines()[0]
            return "no error"
        print(message(lambda: torch.openreg.Event(enable_timing=True, interprocess=True)))
        print(message(lambda: torch.openreg.Event().ipc_handle()))
        print(message(lambda: ForkingPickler.dumps(torch.openreg.Event())))
        print(message(lambda: torch.openreg.Event.from_ipc_handle(0, b"not a handle")))
        handle = torch.openreg.Event(interprocess=True).ipc_handle()  # destroyed at once
        print(message(lambda: torch.openreg.Event.from_ipc_handle(0, handle)).split(" of process")[0])
        event = torch.openreg.Event(interprocess=True)
        def record_in_capture():
            with torch.openreg.graph(torch.openreg.Graph()):
                torch.ones(2, device="openreg")
                event.record()
        try:
            record_in_capture()
        except RuntimeError as e:  # the capture's end raises on top of the refused record
            print(str(e).splitlines()[0], "|", str(e.__context__).splitlines()[0])
        print(event.query(), torch.ones(1, device="openreg").item())  # both still usable
    """))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "openreg: an event cannot be both interprocess and timing (use enable_timing=False with "
        "interprocess=True)",
        "openreg: ipc_handle() needs an event created with interprocess=True",
        "openreg: ipc_handle() needs an event created with interprocess=True",
        "openreg: not an interprocess event handle (expected the bytes of an openreg "
        "Event(interprocess=True).ipc_handle())",
        "openreg: cannot open the interprocess event",
        "openreg error: operation failed due to a previous error during capture | "
        "openreg error: operation not permitted when stream is capturing",
        "True 1.0",
    ], r.stdout


def test_a_record_in_one_process_orders_a_stream_of_another(python):
    _run(python, """
        x = torch.zeros(1 << 20, device="openreg")
        event = torch.openreg.Event(interprocess=True)
        inbox.put((x, event))  # the event travels as its handle
        assert outbox.get(timeout=60) == ("opened", "openreg:0")
        # Long enough that the child sees the record pending after the queue's
        # feeder thread, a pipe and a wake-up on a busy runner.
        torch.openreg._sleep(3000)
        x.fill_(7.0)
        event.record()
        inbox.put("recorded")
        seen = outbox.get(timeout=60)
        assert seen == {"query before": False, "sum": 7.0 * (1 << 20)}, seen
        # The child's own record of the same event: this process waits for it.
        assert outbox.get(timeout=60) == "child recorded"
        event.synchronize()
        assert x.sum().item() == 3.0 * (1 << 20)
        inbox.put("done")
        child.join(60)
        assert child.exitcode == 0
    """, child="wait_then_record")


def test_a_recorder_that_dies_before_its_record_fails_the_waiters(python):
    _run(python, """
        event = torch.openreg.Event(interprocess=True)
        inbox.put(event)
        while event.query():  # until the child's record is made
            time.sleep(0.01)
        waiting = torch.openreg.Stream()
        waiting.wait_event(event)
        child.kill()
        started = time.monotonic()
        try:
            event.synchronize()
            raise AssertionError("synchronize returned")
        except RuntimeError as e:
            assert "exited before the event completed" in str(e), e
        try:
            waiting.synchronize()
            raise AssertionError("the waiting stream completed")
        except RuntimeError as e:
            assert f"process {child.pid}, which recorded the interprocess event" in str(e), e
        assert time.monotonic() - started < 10
    """, child="record_and_stall")


def test_a_failure_on_the_recording_stream_reaches_the_waiters(python):
    _run(python, """
        event = torch.openreg.Event(interprocess=True)
        inbox.put(event)
        assert outbox.get(timeout=60) == "recorded"
        try:
            event.synchronize()
            raise AssertionError("synchronize returned")
        except RuntimeError as e:
            assert "another process that recorded an interprocess event" in str(e), e
        stream = torch.openreg.Stream()
        stream.wait_event(event)
        try:
            stream.synchronize()
            raise AssertionError("the waiting stream completed")
        except RuntimeError as e:
            assert "a kernel failed on the stream of process" in str(e), e
        inbox.put("done")
        child.join(60)
    """, child="record_after_a_failure")


def test_later_records_do_not_complete_an_earlier_one(python):
    # A record still queued behind a long kernel, then 70 records of the same
    # event on an idle stream: a wait for the first stays a wait for it.
    _run(python, """
        event = torch.openreg.Event(interprocess=True)
        opened = torch.openreg.Event.from_ipc_handle(0, event.ipc_handle())
        slow, fast, waiter = torch.openreg.Stream(), torch.openreg.Stream(), torch.openreg.Stream()
        with torch.openreg.stream(slow):
            torch.openreg._sleep(1500)
            event.record()
        waiter.wait_event(opened)  # the first record, through the other handle
        passed = torch.openreg.Event()
        with torch.openreg.stream(waiter):
            passed.record()
        for _ in range(70):
            with torch.openreg.stream(fast):
                event.record()
        fast.synchronize()
        time.sleep(0.2)
        assert not slow.query()
        assert not passed.query()
        passed.synchronize()
        assert slow.query()
    """)


def test_events_share_their_processs_memfds_and_a_stale_handle_fails(python):
    # Each 1024 events of a process take one descriptor, not one each. The
    # page of a destroyed event goes to a new one; the old handle then no
    # longer opens (before, a handle of a closed memfd failed the same way).
    _run(python, """
        import os
        def memfds():
            return sum("openreg-events" in os.path.realpath(f"/proc/self/fd/{f}")
                       for f in os.listdir("/proc/self/fd"))
        events = [torch.openreg.Event(interprocess=True) for _ in range(2048)]
        assert memfds() == 2, memfds()
        stale = events[5].ipc_handle()
        reopened = torch.openreg.Event.from_ipc_handle(0, stale)  # holds the page too
        del events[5]
        kept_apart = torch.openreg.Event(interprocess=True)  # not on the page still held
        assert memfds() == 3, memfds()
        del reopened, kept_apart
        newer = torch.openreg.Event(interprocess=True)  # takes the page no event holds now
        assert memfds() == 3, memfds()
        try:
            torch.openreg.Event.from_ipc_handle(0, stale)
            raise AssertionError("a stale handle opened")
        except RuntimeError as e:
            assert "cannot open the interprocess event" in str(e), e
        same = torch.openreg.Event.from_ipc_handle(0, newer.ipc_handle())
        side = torch.openreg.Stream()
        with torch.openreg.stream(side):
            torch.openreg._sleep(200)
            newer.record()
        assert not same.query()
        same.synchronize()
        assert newer.query()
    """)


def test_a_forked_child_dropping_an_inherited_event_leaves_its_own_files(python):
    _run(python, """
        import os
        event = torch.openreg.Event(interprocess=True)
        fds = [int(f) for f in os.listdir("/proc/self/fd")
               if "openreg-event" in os.path.realpath(f"/proc/self/fd/{f}")]
        assert len(fds) == 1, fds
        pid = os.fork()
        if pid == 0:
            os.close(fds[0])
            log = os.open(os.devnull, os.O_WRONLY)  # takes the inherited descriptor's number
            del event
            os._exit(0 if os.write(log, b"x") == 1 else 1)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    """)
