"""Asynchronous streams and events (csrc/runtime/driver/Stream.cpp,
csrc/runtime/OpenRegStream.cpp, OpenRegGuardImpl.cpp; openreg/streams.py)."""
import time

import pytest
import torch


def test_launch_returns_before_kernel_finishes():
    s = torch.openreg.Stream()
    with torch.openreg.stream(s):
        t0 = time.perf_counter()
        torch.openreg._sleep(1000)
        launched = time.perf_counter() - t0
        assert launched < 0.1
        assert not s.query()
        s.synchronize()
        assert s.query()
        assert time.perf_counter() - t0 >= 0.99


def test_two_streams_overlap():
    a, b = torch.openreg.Stream(), torch.openreg.Stream()
    assert a != b
    # Timing events tell when each stream's worker ran its kernel; a wall-clock
    # bound on both would also count a late wake-up of a busy runner.
    start_a, end_a, start_b, end_b = (torch.openreg.Event(enable_timing=True) for _ in range(4))
    with torch.openreg.stream(a):
        start_a.record()
        torch.openreg._sleep(400)
        end_a.record()
    with torch.openreg.stream(b):
        start_b.record()
        torch.openreg._sleep(400)
        end_b.record()
    a.synchronize()
    b.synchronize()
    # Each began before the other ended (in series one would begin after).
    assert start_b.elapsed_time(end_a) > 0 and start_a.elapsed_time(end_b) > 0, (
        start_a.elapsed_time(start_b), start_a.elapsed_time(end_a))


def test_item_and_d2h_wait_for_queued_work():
    x = torch.zeros(4, device="openreg")
    torch.openreg._sleep(150)
    x.fill_(7)
    assert x.sum().item() == 28
    assert torch.equal(x.cpu(), torch.full((4,), 7.0))


def test_wait_stream_orders_work_across_streams():
    producer, consumer = torch.openreg.Stream(), torch.openreg.Stream()
    x = torch.zeros(1000, device="openreg")
    torch.openreg.current_stream().synchronize()
    with torch.openreg.stream(producer):
        torch.openreg._sleep(200)
        x.fill_(3)
    consumer.wait_stream(producer)
    with torch.openreg.stream(consumer):
        y = x * 2
    consumer.synchronize()
    assert torch.equal(y.cpu(), torch.full((1000,), 6.0))


def test_event_record_wait_query_synchronize():
    s1, s2 = torch.openreg.Stream(), torch.openreg.Stream()
    x = torch.zeros(10, device="openreg")
    torch.openreg.synchronize()
    with torch.openreg.stream(s1):
        torch.openreg._sleep(200)
        x.fill_(1)
        ev = s1.record_event()
    assert not ev.query()
    s2.wait_event(ev)
    with torch.openreg.stream(s2):
        y = x + 1
    ev.synchronize()
    assert ev.query()
    s2.synchronize()
    assert torch.equal(y.cpu(), torch.full((10,), 2.0))


def test_waiters_for_different_points_of_one_queue_each_wake_at_theirs():
    # Blocked waiters publish the point they need; the worker wakes them there,
    # and a woken waiter that needs a later point waits again.
    import threading
    s = torch.openreg.Stream()
    events, woke = [], {}
    t0 = time.perf_counter()
    with torch.openreg.stream(s):
        # First 1 s for the waiting threads to start (on a loaded runner one
        # started only after every point had passed).
        torch.openreg._sleep(1000)
        for _ in range(3):
            # Points far apart: a loaded runner may wake a waiter late, by less than this.
            torch.openreg._sleep(400)
            events.append(s.record_event())

    def wait(i):
        events[i].synchronize()
        woke[i] = (time.perf_counter() - t0, [e.query() for e in events])

    threads = [threading.Thread(target=wait, args=(i,), daemon=True) for i in (2, 0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert sorted(woke) == [0, 1, 2]
    for i in range(3):
        seconds, done = woke[i]
        assert done[:i + 1] == [True] * (i + 1), (i, done)
        assert seconds >= 1.0 + 0.4 * (i + 1) - 0.01, (i, seconds)
    # the first waiter was not held back until the whole queue drained
    assert woke[0][0] < woke[2][0]
    s.synchronize()


def test_event_elapsed_time_of_known_kernel():
    start = torch.openreg.Event(enable_timing=True)
    end = torch.openreg.Event(enable_timing=True)
    start.record()
    torch.openreg._sleep(120)
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    assert 115 <= ms < 1000, ms  # the bound catches a unit error, not a slow runner


def test_elapsed_time_of_a_non_event_is_a_type_error():
    start = torch.openreg.Event(enable_timing=True)
    for other in (5, None):
        with pytest.raises(TypeError, match="expected a torch.Event"):
            start.elapsed_time(other)


def test_elapsed_time_requires_timing():
    a, b = torch.openreg.Event(), torch.openreg.Event()
    a.record()
    b.record()
    b.synchronize()
    # c10::Event raises ValueError here, as torch.Event does for every backend.
    with pytest.raises(ValueError, match="enable_timing=True"):
        a.elapsed_time(b)


def test_elapsed_time_of_events_on_two_devices_says_so():
    a, b = torch.openreg.Event(enable_timing=True), torch.openreg.Event(enable_timing=True)
    a.record(torch.openreg.current_stream(0))
    b.record(torch.openreg.current_stream(1))
    a.synchronize()  # torch.Event checks completion first
    b.synchronize()
    with pytest.raises(RuntimeError, match="recorded on the same device"):
        a.elapsed_time(b)


def test_stream_priority_and_generic_torch_stream():
    hi = torch.openreg.Stream(priority=-1)
    lo = torch.openreg.Stream(priority=0)
    assert hi.priority == -1 and lo.priority == 0
    generic = torch.Stream(device="openreg:1")
    assert generic.device == torch.device("openreg:1")
    ev = torch.Event(device="openreg:1", enable_timing=True)
    ev.record(generic)
    ev.synchronize()
    assert generic.query()


def test_stream_pools_hand_out_32_streams_per_priority_round_robin():
    # torch.cuda's pools: 32 streams per priority, then the first again.
    for priority in (0, -1):
        streams = [torch.openreg.Stream(device="openreg:2", priority=priority) for _ in range(33)]
        ids = [s.stream_id for s in streams]
        assert len(set(ids[:32])) == 32, ids
        assert ids[32] == ids[0]
        assert all(s.priority == priority for s in streams)
    # Distinct pool streams really are independent queues.
    a, b = streams[3], streams[4]
    with torch.openreg.stream(a):
        torch.openreg._sleep(300)
    assert b.query() and not a.query()
    a.synchronize()


def test_current_and_default_stream():
    s = torch.openreg.Stream()
    assert torch.openreg.current_stream() == torch.openreg.default_stream()
    with torch.openreg.stream(s):
        assert torch.openreg.current_stream() == s
    assert torch.openreg.current_stream() == torch.openreg.default_stream()


def test_stream_context_switches_device():
    s = torch.openreg.Stream(device="openreg:3")
    with torch.openreg.stream(s):
        assert torch.openreg.current_device() == 3
        assert torch.openreg.current_stream() == s
    assert torch.openreg.current_device() == 0


def test_kernel_error_is_reported_at_a_later_call(python):
    # A failed stream stays failed (sticky, as on CUDA): run it in its own process.
    r = python("""
        import torch
        torch.openreg._C._raise_in_kernel("simulated device assert")
        try:
            torch.openreg.synchronize()
        except torch.AcceleratorError as e:  # a RuntimeError, as CUDA's errors
            print("raised:", e.error_code, isinstance(e, RuntimeError), e)
        ev = torch.openreg.Event()
        ev.record()
        try:
            ev.synchronize()
        except RuntimeError as e:
            print("event raised:", e)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("raised: 5 True openreg kernel failed asynchronously"), r.stdout
    assert "simulated device assert" in r.stdout
    assert "event raised:" in r.stdout, r.stdout


def test_kernel_error_reaches_waiting_streams_events_and_device_sync(python):
    # A stream that waited for a failed one fails too (its kernels would read
    # what the failed kernel did not write); events after the failure and a
    # device-wide synchronize report the kernel's message; memory management
    # (empty_cache, the OOM retry's synchronize) keeps working.
    r = python("""
        import torch
        O = torch.openreg
        y = torch.zeros(4, device="openreg")
        O.synchronize()
        s = O.Stream()
        start, end = O.Event(enable_timing=True), O.Event(enable_timing=True)
        with O.stream(s):
            start.record()
            O._sleep(50)
            O._C._raise_in_kernel("boom on the side stream")
            end.record()
            y.fill_(7.0)
        O.current_stream().wait_stream(s)
        def outcome(fn):
            try:
                fn()
            except RuntimeError as e:
                return str(e).splitlines()[0]
            return "no error"
        for name, fn in [("cpu", y.cpu), ("query", end.query), ("stream query", s.query),
                         ("elapsed", lambda: start.elapsed_time(end)),
                         ("device", O.synchronize), ("empty_cache", O.empty_cache)]:
            print(name, "|", outcome(fn))
    """)
    assert r.returncode == 0, r.stderr
    got = dict(line.split(" | ") for line in r.stdout.splitlines())
    for name in ("cpu", "query", "stream query", "elapsed", "device"):
        assert "boom on the side stream" in got[name], (name, got[name])
    assert got["empty_cache"] == "no error"


def test_stream_workers_are_named_for_profilers():
    import glob
    torch.zeros(1, device="openreg").add_(1)
    torch.openreg.synchronize()
    names = set()
    for path in glob.glob("/proc/self/task/*/comm"):
        with open(path) as f:
            names.add(f.read().strip())
    assert "oreg_stream_0" in names, names


def test_stream_api_details_as_torch_cuda():
    s = torch.openreg.Stream()
    ev = s.record_event(torch.openreg.Event(enable_timing=True))  # this module's Event
    assert isinstance(ev, torch.openreg.Event)
    assert isinstance(s.record_event(), torch.openreg.Event)
    end = s.record_event(torch.openreg.Event(enable_timing=True))
    end.synchronize()
    assert ev.elapsed_time(end) >= 0
    assert torch.openreg.Stream.priority_range() == (0, -1)
    with pytest.raises(RuntimeError, match="priority to be less than or equal to 0, got 5"):
        torch.openreg.Stream(priority=5)
    with pytest.raises(RuntimeError, match="priority to be less than or equal to 0"):
        torch.Stream(device="openreg", priority=1)
    # Events recorded on two devices have no elapsed time between them (CUDA's error).
    a, b = torch.openreg.Event(enable_timing=True), torch.openreg.Event(enable_timing=True)
    a.record(torch.openreg.current_stream(0))
    b.record(torch.openreg.current_stream(1))
    b.synchronize()
    a.synchronize()
    with pytest.raises(RuntimeError):
        a.elapsed_time(b)


def test_blocking_copies_queued_behind_work_need_no_gil(python):
    # A blocking copy of a pageable tensor queued behind busy work runs on the
    # stream worker while the calling thread waits; it used the caller's tensor
    # there, whose Python object needs the GIL, so a thread that held the GIL
    # while waiting for that stream (empty_cache, storage.cpu(), torch.save)
    # deadlocked with it.
    r = python("""
        import io, threading, time, torch
        torch.openreg.init()
        a = torch.ones(1000)
        def worker():
            torch.openreg._sleep(300)
            x = a.to("openreg")             # host -> device, queued behind the sleep
            c = torch.empty(1000)
            torch.openreg._sleep(300)
            c.copy_(x)                      # device -> host, likewise
            print(int(c.sum()))
        t = threading.Thread(target=worker)
        t.start()
        time.sleep(0.1)
        torch.openreg.empty_cache()
        time.sleep(0.35)
        torch.save(torch.ones(4, device="openreg"), io.BytesIO())
        t.join()
        print("done")
    """, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1000", "done"]


def test_kernels_launched_under_inference_mode():
    # Kernel views made under inference mode were inference tensors, and the
    # stream worker (outside inference mode) could not write through them:
    # clone, device-to-device and queued host copies failed the stream.
    x = torch.arange(4.0, device="openreg")
    with torch.inference_mode():
        torch.openreg._sleep(50)  # the host copy below is queued on the worker
        copies = [x.clone(), x.to("openreg:1"), torch.arange(4.0).to("openreg"), (x * 2).cpu() / 2]
        layer = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).eval()
        src = torch.randn(2, 5, 8)
        expected = layer(src)
        out = layer.to("openreg")(src.to("openreg"))
    for c in copies:
        assert c.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    torch.testing.assert_close(out.cpu(), expected)


def test_sync_debug_mode_reports_each_operation_that_waits_for_the_device(python):
    """torch.cuda.set_sync_debug_mode's contract: asynchronous work is silent,
    every host wait on the user's behalf warns (1) or raises (2), naming what
    waited; an explicit device synchronize is not reported."""
    r = python("""
        import warnings, torch
        O = torch.openreg
        x = torch.arange(10., device="openreg")
        O.set_sync_debug_mode("warn")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            y = (x * 2).sum()
            x.add_(y)
            # Returns nothing, writes its arguments (GradScaler's unscale): queued too.
            found_inf, inv_scale = torch.zeros(1, device="openreg"), torch.ones(1, device="openreg")
            torch._amp_foreach_non_finite_check_and_unscale_([x], found_inf, inv_scale)
            pinned = torch.empty(10, pin_memory=True)
            pinned.copy_(x, non_blocking=True)  # pinned: asynchronous
            x.to("cpu", non_blocking=True)      # returns pinned memory: asynchronous
            torch.ones(10).to("openreg", non_blocking=True)  # pageable: waits, unreported (CUDA)
            O.synchronize()
            print("async", len(w))
            y.item(); x.cpu(); x[x > 3]; O.current_stream().synchronize()
            print([str(m.message).split(" (Triggered")[0] for m in w])
        O.set_sync_debug_mode(2)
        try:
            x[0].item()
        except RuntimeError as e:
            print("error", e)
        O.set_sync_debug_mode("default")
        print(O.get_sync_debug_mode(), x[1].item())
        for bad in ("loud", 3):
            try:
                O.set_sync_debug_mode(bad)
            except RuntimeError as e:
                print(e)
    """)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    prefix = "called a synchronizing openreg operation"
    assert lines[0] == "async 0"
    assert lines[1] == str([f"{prefix} (aten::_local_scalar_dense)", f"{prefix} (a blocking copy)",
                            # x[mask]: its nonzero waits, the index by positions does not
                            f"{prefix} (aten::nonzero)", f"{prefix} (Stream.synchronize)"])
    assert lines[2] == f"error {prefix} (aten::_local_scalar_dense)"
    assert lines[3] == "0 91.0"  # 1 + sum(2 * arange(10))
    assert lines[4:] == ["invalid value of debug_mode, expected one of `default`, `warn`, `error`",
                         "invalid value of debug_mode, expected one of 0,1,2"]


@pytest.mark.parametrize("copy", ["host to device", "device to host"])
def test_a_blocking_copy_the_host_runs_itself_keeps_its_place_in_the_stream(copy):
    # On an idle stream the host thread does a blocking copy itself; it is still
    # that stream's item: a kernel another thread queues on the stream meanwhile
    # runs after it, and a synchronize or an event recorded meanwhile waits for it.
    import threading
    n = 1 << 25  # a copy of ~20-30 ms, long enough for the other thread to act during it
    acted_during_the_copy = 0
    for _ in range(3):
        x = torch.zeros(n, device="openreg:0")
        src = torch.ones(n)
        torch.openreg.synchronize()
        started, out = threading.Event(), {}

        def other():
            started.wait()
            # Acts once the copy holds the stream (it counts as queued work
            # there), or after it (then there is nothing to get wrong).
            deadline, busy = time.monotonic() + 2, False
            while not busy and time.monotonic() < deadline:
                busy = not torch.openreg.default_stream(0).query()
            out["during the copy"] = busy
            if copy == "host to device":
                out["sum"] = x.sum()  # queued on the copying stream
            else:
                x.fill_(1.0)          # must not reach the snapshot being taken
            torch.openreg.synchronize(0)
            side = torch.openreg.Stream(device=0)
            with torch.openreg.stream(side):  # no wait: the synchronize already did
                out["sum_after_synchronize"] = x.sum()
            e = torch.openreg.Event()
            e.record(torch.openreg.default_stream(0))
            side.wait_event(e)
            with torch.openreg.stream(side):
                out["side_sum"] = x.sum()
            side.synchronize()

        t = threading.Thread(target=other)
        t.start()
        started.set()
        if copy == "host to device":
            x.copy_(src)
        else:
            snapshot = x.cpu()
        t.join()
        acted_during_the_copy += out["during the copy"]
        assert out["sum_after_synchronize"].item() == out["side_sum"].item() == n
        if copy == "host to device":
            assert out["sum"].item() == n
        else:
            assert snapshot.sum().item() in (0, n)  # before or after the fill, never torn
    assert acted_during_the_copy > 0
