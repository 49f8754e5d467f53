"""Caching allocator, statistics, OOM and memory isolation
(csrc/runtime/OpenRegCachingAllocator.cpp, driver/Memory.cpp, driver/FaultHandler.cpp;
openreg/memory.py)."""
import signal
import time

import pytest
import torch


def test_exact_statistics_after_known_allocations(python):
    r = python("""
        import torch, json
        o = torch.openreg
        a = torch.empty(250, device="openreg")           # 1000 B -> one 1024 B block
        b = torch.empty(1024 * 1024, device="openreg")    # 4 MiB -> large pool, 4 MiB block
        s1 = o.memory_stats()
        del a
        s2 = o.memory_stats()
        c = torch.empty(256, device="openreg")           # reuses the cached 1024 B block
        s3 = o.memory_stats()
        del b, c
        o.empty_cache()
        s4 = o.memory_stats()
        keys = ["allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
                "requested_bytes.all.current", "allocation.all.current", "segment.all.current",
                "allocated_bytes.small_pool.current", "allocated_bytes.large_pool.current"]
        print(json.dumps([[s[k] for k in keys] for s in (s1, s2, s3, s4)]))
        print(o.memory_allocated(), o.max_memory_allocated(), o.memory_reserved(), o.max_memory_reserved())
        print(torch.accelerator.max_memory_allocated())
    """)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    import json
    s1, s2, s3, s4 = json.loads(lines[0])
    mib4 = 4 * 1024 * 1024
    assert s1 == [1024 + mib4, 1024 + mib4, 1024 + mib4, 1000 + mib4, 2, 2, 1024, mib4]
    assert s2 == [mib4, 1024 + mib4, 1024 + mib4, mib4, 1, 2, 0, mib4]
    assert s3 == [1024 + mib4, 1024 + mib4, 1024 + mib4, 1024 + mib4, 2, 2, 1024, mib4]
    assert s4 == [0, 1024 + mib4, 0, 0, 0, 0, 0, 0]
    assert lines[1].split() == ["0", str(1024 + mib4), "0", str(1024 + mib4)]
    assert lines[2] == str(1024 + mib4)


def test_reset_peak_and_summary():
    x = torch.empty(1 << 20, device="openreg:2")
    del x
    torch.openreg.reset_peak_memory_stats(2)
    assert torch.openreg.max_memory_allocated(2) == torch.openreg.memory_allocated(2)
    summary = torch.openreg.memory_summary(2)
    assert "Allocated memory" in summary and "device ID 2" in summary


def test_oom_then_recovery(python):
    r = python("""
        import torch
        keep = torch.empty(40 * 1024 * 1024 // 4, device="openreg")   # 40 MiB of 64
        try:
            torch.empty(30 * 1024 * 1024 // 4, device="openreg")
        except torch.OutOfMemoryError as e:
            print("OOM:", e)
        stats = torch.openreg.memory_stats()
        print(stats["num_ooms"])
        del keep
        y = torch.ones(30 * 1024 * 1024 // 4, device="openreg")       # fits after the free
        print(int(y.sum().item()))
    """, env={"OPENREG_DEVICE_MEMORY": "64MiB"})
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0].startswith("OOM: openreg out of memory. Tried to allocate 30.00 MiB")
    assert "total capacity of 64.00 MiB" in out[0] and "40.00 MiB is allocated by PyTorch" in out[0]
    assert out[1] == "1"
    assert out[2] == str(30 * 1024 * 1024 // 4)


def test_oom_frees_cache_and_retries(python):
    r = python("""
        import torch
        x = torch.empty(40 * 1024 * 1024 // 4, device="openreg")
        del x                                   # cached, still reserved
        y = torch.empty(50 * 1024 * 1024 // 4, device="openreg")  # needs the cache released
        s = torch.openreg.memory_stats()
        print(s["num_alloc_retries"], s["num_ooms"], torch.openreg.memory_reserved())
    """, env={"OPENREG_DEVICE_MEMORY": "64MiB"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "0", str(50 * 1024 * 1024)]


@pytest.mark.parametrize("release", ["oom_retry", "empty_cache"])
def test_cache_release_waits_for_other_devices_streams_that_used_a_block(python, release):
    # A block freed while another device's stream still uses it (record_stream)
    # is released by an OOM retry or empty_cache once that stream got there, as
    # CUDA's allocator waits for every outstanding event (it raised OOM with
    # 40 MiB "reserved but unallocated", and empty_cache kept it reserved).
    r = python(f"""
        import torch
        o = torch.openreg
        x = torch.ones(40 * 1024 * 1024 // 4, device="openreg:0")
        s1 = o.Stream(device=1)
        with o.stream(s1):
            y = x.to("openreg:1")
            o._sleep(1000)  # s1 is still busy when x goes
        x.record_stream(s1)
        del x
        if "{release}" == "empty_cache":
            o.empty_cache()
            print(o.memory_reserved(0))
        z = torch.empty(40 * 1024 * 1024 // 4, device="openreg:0")
        print(o.memory_stats(0)["num_ooms"], int(y.sum().item()))
    """, env={"OPENREG_DEVICE_MEMORY": "64MiB"})
    assert r.returncode == 0, r.stderr
    expected = ["0", str(40 * 1024 * 1024 // 4)]
    assert r.stdout.split() == (["0"] + expected if release == "empty_cache" else expected)


def test_free_memory_in_holes_still_serves_a_large_allocation(python):
    # Capacity limits the bytes in use, not the span of one address range: 28
    # MiB free in three holes serve 20 MiB, as a GPU maps pages into a large
    # virtual space (cudaMalloc does not fail on fragmentation of free memory).
    r = python("""
        import torch
        MiB = 1024 * 1024
        xs = [torch.empty(12 * MiB, dtype=torch.uint8, device="openreg") for _ in range(5)]
        del xs[3], xs[1]
        torch.openreg.empty_cache()
        print(torch.openreg.mem_get_info()[0] // MiB)
        y = torch.ones(20 * MiB, dtype=torch.uint8, device="openreg")
        print(int(y.sum().item()) // MiB)
        try:
            torch.empty(9 * MiB, dtype=torch.uint8, device="openreg")  # 8 MiB left
        except torch.OutOfMemoryError:
            print("OOM")
    """, env={"OPENREG_DEVICE_MEMORY": "64MiB"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["28", "20", "OOM"]


def test_host_access_to_device_memory_faults(python):
    r = python("""
        import ctypes, torch
        x = torch.ones(16, device="openreg")
        torch.openreg.synchronize()
        value = ctypes.c_float.from_address(x.data_ptr()).value
        print("read", value)
    """)
    assert r.returncode == -signal.SIGSEGV, (r.returncode, r.stdout)
    assert "read" not in r.stdout
    assert "illegal host access to device memory" in r.stderr


def test_record_stream_delays_reuse():
    side = torch.openreg.Stream()
    x = torch.ones(1 << 16, device="openreg")
    ptr = x.data_ptr()
    torch.openreg.synchronize()
    with torch.openreg.stream(side):
        torch.openreg._sleep(200)
        y = x * 2          # reads x on the side stream
    x.record_stream(side)
    del x
    z = torch.empty(1 << 16, device="openreg")   # same size, same stream as x was allocated on
    assert z.data_ptr() != ptr                   # not reused while `side` may still read it
    side.synchronize()
    assert torch.equal(y.cpu(), torch.full((1 << 16,), 2.0))


def test_record_stream_of_another_device_delays_reuse():
    # x (openreg:0) is read by a copy queued on a stream of openreg:1: the
    # free must wait for that stream, not for a stream of openreg:0 with the
    # same id.
    x = torch.ones(1 << 16, device="openreg:0")
    ptr = x.data_ptr()
    torch.openreg.synchronize(0)
    other = torch.openreg.Stream(device=1)
    with torch.openreg.stream(other):
        torch.openreg._sleep(300)
        y = x.to("openreg:1")
    x.record_stream(other)
    del x
    time.sleep(0.05)
    z = torch.empty(1 << 16, device="openreg:0")
    assert z.data_ptr() != ptr
    z.fill_(5.0)
    other.synchronize()
    assert torch.equal(y.cpu(), torch.ones(1 << 16))


def test_record_stream_checks_the_stream_when_recorded():
    # Not at the free, which runs in a deleter and must not throw.
    x = torch.ones(4, device="openreg")
    kind = torch.openreg.current_stream().device_type
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        x.record_stream(torch.Stream(stream_id=0, device_index=11, device_type=kind))
    del x


def test_failed_resize_restores_the_current_device(python):
    r = python("""
        import torch
        t = torch.ones(4, device="openreg:1")
        for resize in (lambda: t.untyped_storage().resize_(100 << 20), lambda: t.resize_(30 << 20)):
            try:
                resize()
            except torch.OutOfMemoryError:
                pass
            print(torch.openreg.current_device(), torch.empty(1, device="openreg").device)
    """, env={"OPENREG_DEVICE_MEMORY": "64MiB"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["0 openreg:0", "0 openreg:0"], r.stdout


def test_freed_block_reused_on_same_stream():
    x = torch.empty(3000, device="openreg:5")
    ptr = x.data_ptr()
    del x
    y = torch.empty(3000, device="openreg:5")
    assert y.data_ptr() == ptr


def test_mem_get_info_and_accelerator_stats():
    free, total = torch.openreg.mem_get_info(0)
    assert total == 16 * 1024**3 and 0 < free <= total
    x = torch.empty(1 << 18, device="openreg")
    assert torch.accelerator.memory_allocated() == torch.openreg.memory_allocated()
    del x
