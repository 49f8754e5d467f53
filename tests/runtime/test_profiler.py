"""The profiler sees openreg: device time per operator with torch.profiler's
PrivateUse1 activity (the Kineto plugin, csrc/runtime/OpenRegKinetoPlugin.cpp)
and with the legacy profiler's events (csrc/runtime/OpenRegProfilerStubs.cpp),
and device memory with profile_memory (the caching allocator reports to it)."""

import pytest


def test_autograd_profiler_with_use_device_times_device_work(python):
    r = python("""
        import torch
        x = torch.randn(256, 256, device="openreg")
        torch.openreg.synchronize()
        with torch.autograd.profiler.profile(use_device="openreg") as p:
            for _ in range(3):
                y = x @ x
            torch.openreg.synchronize()
        mm = [e for e in p.key_averages() if e.key == "aten::mm"][0]
        print(mm.count, mm.device_time_total > 0, mm.device_time_total < 10e6)
    """)
    assert r.returncode == 0, r.stderr
    assert "Exception" not in r.stderr and "INTERNAL ASSERT" not in r.stderr, r.stderr
    assert r.stdout.split() == ["3", "True", "True"]


def test_profile_memory_reports_device_allocations(python):
    r = python("""
        import json, os, tempfile, torch
        from torch.profiler import profile, ProfilerActivity
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as p:
            y = torch.empty(1 << 20, device="openreg:1")   # 4 MiB
            del y
        empty = [e for e in p.key_averages() if e.key == "aten::empty"][0]
        print(empty.device_memory_usage)
        path = os.path.join(tempfile.mkdtemp(), "trace.json")
        p.export_chrome_trace(path)
        events = [e["args"] for e in json.load(open(path))["traceEvents"] if e.get("name") == "[memory]"]
        print([(e["Bytes"], e["Device Id"]) for e in events if e["Device Type"] != 0])
    """)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == str(4 << 20)
    assert lines[1] == str([(4 << 20, 1), (-(4 << 20), 1)])


def test_torch_profiler_shows_each_kernel_on_its_device_and_stream(python):
    """ProfilerActivity.PrivateUse1: kernels are device activities of their
    device (pid) and stream (tid), linked to the operator that launched them,
    timed when they ran, after their launch (csrc/runtime/OpenRegKinetoPlugin.cpp)."""
    r = python("""
        import json, os, tempfile, torch
        from torch.profiler import profile, ProfilerActivity
        x = torch.randn(256, 256, device="openreg:1")
        host = torch.randn(1024)
        side = torch.openreg.Stream("openreg:1")
        torch.openreg.synchronize("openreg:1")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as p:
            for _ in range(3):
                y = x @ x
            with torch.openreg.stream(side):
                z = x.mul(2)
            d = host.to("openreg:1")
            torch.openreg.synchronize("openreg:1")
        avg = {e.key: e for e in p.key_averages()}
        mm = avg["aten::mm"]
        print("mm", mm.count, mm.self_device_time_total > 0, abs(mm.device_time_total - avg["kernel aten::mm"].self_device_time_total) < 1e-3)
        path = os.path.join(tempfile.mkdtemp(), "trace.json")
        p.export_chrome_trace(path)
        events = json.load(open(path))["traceEvents"]
        ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op"}
        device = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy")]
        # Each launch is a host event with an arrow to its kernel, as cudaLaunchKernel's.
        launches = [e for e in events if e.get("name") == "openregLaunchKernel"]
        starts = {e["id"] for e in events if e.get("cat") == "ac2g" and e["ph"] == "s"}
        ends = {e["id"] for e in events if e.get("cat") == "ac2g" and e["ph"] == "f"}
        print("launches", len(launches) >= 4, starts == ends, len(starts) == len(launches))
        for e in sorted(device, key=lambda e: e["name"]):
            op = ops[e["args"]["External id"]]
            # Launched inside its operator (the two clocks agree to a few us).
            print(e["cat"], e["name"], e["pid"], e["tid"] == side.stream_id, op["name"],
                  e["ts"] > op["ts"] - 50, e["ts"] - op["ts"])
    """)
    assert r.returncode == 0, r.stderr
    lines = [" ".join(line.split()[:7]) for line in r.stdout.splitlines()]
    assert lines[0] == "mm 3 True True"
    assert lines[1] == "launches True True True"
    assert lines[2:] == [
        "gpu_memcpy Memcpy aten::_copy_from 1 False aten::_copy_from True",
        *["kernel kernel aten::mm 1 False aten::mm True"] * 3,
        "kernel kernel aten::mul 1 True aten::mul True",
    ], r.stdout


def test_cpu_only_profile_records_no_kernels(python):
    r = python("""
        import torch
        from torch.profiler import profile, ProfilerActivity
        x = torch.randn(64, device="openreg")
        with profile(activities=[ProfilerActivity.CPU]) as p:
            y = x + 1
            torch.openreg.synchronize()
        print(sorted({e.device_type.name for e in p.events()}))
        print(any(e.key.startswith("kernel ") for e in p.key_averages()))
        with profile(activities=[ProfilerActivity.PrivateUse1]) as p:
            y = x + 1
            torch.openreg.synchronize()
        print([e.key for e in p.key_averages() if e.key.startswith("kernel ")])
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["['CPU']", "False", "['kernel aten::add']"], r.stdout


def test_profile_waits_for_kernels_of_other_devices_and_records_host_run_work(python):
    """torch.profiler synchronizes only the current device: kernels still queued
    on another one are waited for, not lost. Work the host does in a stream's
    order (a blocking copy on an idle stream, .item(), an operator that runs
    synchronously) shows as that stream's device work, as CUDA's kernels and
    memcpys do."""
    r = python("""
        import torch
        from torch.profiler import profile, ProfilerActivity
        x1 = torch.randn(512, 512, device="openreg:1")
        x0 = torch.arange(8., device="openreg:0")
        host = torch.randn(64)
        torch.openreg.synchronize(1)
        torch.openreg.synchronize(0)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as p:
            for _ in range(5):
                y = x1 @ x1                  # openreg:1, never synchronized here
            d = host.to("openreg:0")         # the idle stream: the host copies
            v = x0.sum().item()
            nz = x0.nonzero()
        names = sorted((e.key, e.device_index) for e in p.events()
                       if e.device_type != torch.autograd.DeviceType.CPU)
        print(names.count(("kernel aten::mm", 1)))
        print(sorted({k for k, _ in names if k != "kernel aten::mm"}))
    """)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "5", r.stdout
    assert lines[1] == str(["Memcpy aten::_copy_from", "Memcpy aten::_local_scalar_dense",
                            "kernel aten::nonzero", "kernel aten::sum"]), r.stdout


def test_graph_replays_are_device_work(python):
    # A replay is one kernel: the profile shows it (with its device time), not
    # the captured kernels one by one, as CUDA's shows a graph launch.
    r = python("""
        import torch
        from torch.profiler import profile, ProfilerActivity
        x = torch.ones(1000, device="openreg")
        s = torch.openreg.Stream()
        s.wait_stream(torch.openreg.current_stream())
        g = torch.accelerator.Graph()
        with torch.openreg.stream(s), g:
            y = (x * 2).sin()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as p:
            g.replay()
            g.replay()
            torch.openreg.synchronize()
        kernels = {e.key: e.count for e in p.key_averages() if e.key.startswith("kernel ")}
        print(kernels)
        print(all(e.device_time_total > 0 for e in p.key_averages() if e.key == "kernel Graph::replay"))
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["{'kernel Graph::replay': 2}", "True"], r.stdout


@pytest.mark.parametrize("thread", ["main", "another"])
def test_a_kernel_error_inside_a_profile_ends_the_process_cleanly(python, thread):
    # The profiler's exit raises the sticky error at its device synchronize,
    # before turning itself off; the process must still end with its own code,
    # not a crash in torch's profiler state at exit (also when the profile ran
    # in a thread other than the one that exits).
    r = python(f"""
        import threading, torch, openreg
        from torch.profiler import ProfilerActivity, profile
        def run():
            try:
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]):
                    x = torch.ones(4, device="openreg") + 1
                    torch.openreg._C._raise_in_kernel("boom")
            except RuntimeError as e:
                print(str(e).splitlines()[0])
        if {thread!r} == "main":
            run()
        else:
            t = threading.Thread(target=run)
            t.start()
            t.join()
    """)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert r.stdout.strip() == "openreg kernel failed asynchronously on openreg:0: boom"
