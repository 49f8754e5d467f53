"""torch.openreg.memory._record_memory_history / _snapshot / _dump_snapshot:
the allocator's actions and live blocks with the Python tracebacks that made
them, in torch.cuda's snapshot format (csrc/runtime/MemoryHistory.h,
csrc/python/MemorySnapshot.cpp)."""


def test_history_records_actions_with_tracebacks_in_cudas_format(python):
    r = python("""
        import os, pickle, tempfile, torch
        from torch.cuda import _memory_viz
        M = torch.openreg.memory
        M._record_memory_history(max_entries=100000)
        def make_weights():
            return torch.empty(3 << 20, dtype=torch.uint8, device="openreg:1")  # a large segment
        def make_scratch():
            return torch.empty(1000, device="openreg:1")
        keep = make_weights()
        scratch = make_scratch()
        del scratch
        snap = M._snapshot()
        trace = snap["device_traces"][1]
        print([e["action"] for e in trace])
        print([e["size"] for e in trace[:4]], trace[1]["addr"] == keep.data_ptr())
        print(any(f["name"] == "make_weights" for f in trace[1]["frames"]))
        print(any(f["name"] == "make_scratch" for f in trace[3]["frames"]))
        print(snap["device_traces"][0])
        live = [b for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
        print(len(live), any(f["name"] == "make_weights" for f in live[0]["frames"]))
        # torch's own viewer reads it.
        print("segments" in _memory_viz.segsum(snap), "alloc" in _memory_viz.trace(snap))
        path = os.path.join(tempfile.mkdtemp(), "snap.pickle")
        M._dump_snapshot(path)
        print(pickle.load(open(path, "rb"))["device_traces"][1][0]["action"])
        # Stopping drops the trace (as CUDA's); a new recording starts empty.
        M._record_memory_history(enabled=None)
        del keep
        print(len(M._snapshot()["device_traces"][1]))
        M._record_memory_history()
        print(M._snapshot()["device_traces"][1])
    """)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == str(["segment_alloc", "alloc", "segment_alloc", "alloc",
                            "free_requested", "free_completed"]), lines[0]
    # A 20 MiB segment, as CUDA's; allocations by their requested size, as CUDA's trace.
    assert lines[1] == str([20 << 20, 3 << 20, 2 << 20, 4000]) + " True"
    assert lines[2:5] == ["True", "True", "[]"]
    assert lines[5] == "1 True"
    assert lines[6] == "True True"
    assert lines[7] == "segment_alloc"
    assert lines[8] == "0"
    assert lines[9] == "[]"


def test_context_levels_and_limits(python):
    r = python("""
        import torch
        M = torch.openreg.memory
        def frames_of(entries):
            return [bool(e["frames"]) for e in entries]
        # "state": live blocks carry their traceback, the actions carry none.
        M._record_memory_history(context="state", clear_history=True)
        x = torch.empty(10, device="openreg")
        del x
        y = torch.empty(10, device="openreg")
        snap = M._snapshot()
        print(frames_of(snap["device_traces"][0]))
        live = [b for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
        print([bool(b["frames"]) for b in live])
        # "alloc": allocations carry it, frees their allocation's; max_entries keeps the last ones.
        M._record_memory_history(context="alloc", stacks="python", max_entries=2, clear_history=True)
        del y
        z = torch.empty(10, device="openreg")
        print([(e["action"], bool(e["frames"])) for e in M._snapshot()["device_traces"][0]])
        # Legacy bool form, and CUDA's argument checks.
        M._record_memory_history(False)
        for kwargs in ({"enabled": "some"}, {"context": "free"}, {"stacks": "cpp"}):
            try:
                M._record_memory_history(**kwargs)
            except RuntimeError as e:
                print(str(e).splitlines()[0])
    """)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == str([False] * 5), lines[0]  # segment_alloc, alloc, free x2, alloc
    assert lines[1] == "[True]"
    assert lines[2] == str([("free_completed", True), ("alloc", True)])
    assert lines[3:] == ["expected state to be 'state', 'all', or None",
                         "expected context to be 'state', 'alloc', 'all', or None",
                         "expected stacks to be 'python', or 'all'"]


def test_oom_is_recorded_with_the_free_memory(python):
    r = python("""
        import torch
        M = torch.openreg.memory
        M._record_memory_history()
        try:
            torch.empty(1 << 40, dtype=torch.uint8, device="openreg")
        except torch.OutOfMemoryError:
            pass
        oom = [e for e in M._snapshot()["device_traces"][0] if e["action"] == "oom"]
        free, total = torch.openreg.mem_get_info()
        print(len(oom), oom[0]["size"] >= 1 << 40, oom[0]["device_free"] == free)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "True", "True"]
