"""The profiler sees openreg: device time per operator without a Kineto plugin
(csrc/runtime/OpenRegProfilerStubs.cpp) and device memory with profile_memory
(the caching allocator reports to the profiler)."""


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
