"""Caching allocator, statistics, OOM and memory isolation
(csrc/runtime/OpenRegCachingAllocator.cpp, driver/Memory.cpp, driver/FaultHandler.cpp;
openreg/memory.py)."""
import signal
import textwrap
import time

import pytest
import torch


def test_exact_statistics_after_known_allocations(python):
    r = python("""
        import torch, json
        o = torch.openreg
        a = torch.empty(250, device="openreg")           # 1000 B -> 1024 B of a 2 MiB small segment
        b = torch.empty(1024 * 1024, device="openreg")    # 4 MiB -> 4 MiB of a 20 MiB large segment
        s1 = o.memory_stats()
        del a                                             # merges back: the small segment is whole
        s2 = o.memory_stats()
        c = torch.empty(256, device="openreg")           # 1024 B from the cached small segment
        s3 = o.memory_stats()
        del b, c
        o.empty_cache()
        s4 = o.memory_stats()
        keys = ["allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
                "requested_bytes.all.current", "allocation.all.current", "segment.all.current",
                "allocated_bytes.small_pool.current", "allocated_bytes.large_pool.current",
                "inactive_split_bytes.all.current", "inactive_split.all.current"]
        print(json.dumps([[s[k] for k in keys] for s in (s1, s2, s3, s4)]))
        print(o.memory_allocated(), o.max_memory_allocated(), o.memory_reserved(), o.max_memory_reserved())
        print(torch.accelerator.max_memory_allocated())
    """)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    import json
    s1, s2, s3, s4 = json.loads(lines[0])
    mib = 1024 * 1024
    reserved = 2 * mib + 20 * mib
    split_rest = (2 * mib - 1024) + 16 * mib
    assert s1 == [1024 + 4 * mib, 1024 + 4 * mib, reserved, 1000 + 4 * mib, 2, 2, 1024, 4 * mib, split_rest, 2]
    assert s2 == [4 * mib, 1024 + 4 * mib, reserved, 4 * mib, 1, 2, 0, 4 * mib, 16 * mib, 1]
    assert s3 == [1024 + 4 * mib, 1024 + 4 * mib, reserved, 1024 + 4 * mib, 2, 2, 1024, 4 * mib, split_rest, 2]
    assert s4 == [0, 1024 + 4 * mib, 0, 0, 0, 0, 0, 0, 0, 0]
    assert lines[1].split() == ["0", str(1024 + 4 * mib), "0", str(reserved)]
    assert lines[2] == str(1024 + 4 * mib)


def test_blocks_split_from_one_segment_keep_their_data_and_merge_back():
    o = torch.openreg
    o.empty_cache()
    s = o.Stream(device=3)  # a stream of its own: no cached block of another test serves it
    with o.stream(s):
        before = o.memory_reserved(3)
        a = torch.full((250,), 1.0, device="openreg:3")
        b = torch.full((250,), 2.0, device="openreg:3")
        c = torch.full((300_000,), 3.0, device="openreg:3")  # 1.2 MB: large pool, a 20 MiB segment
        d = torch.full((300_000,), 4.0, device="openreg:3")
        assert b.data_ptr() == a.data_ptr() + 1024
        assert d.data_ptr() == c.data_ptr() + 1_200_128  # 1.2 MB rounded up to 512 B
        assert o.memory_reserved(3) - before == (2 + 20) << 20
        assert [t.sum().item() for t in (a, b, c, d)] == [250.0, 500.0, 900_000.0, 1_200_000.0]
        del a, c
        s.synchronize()
        o.empty_cache()  # b and d keep their segments
        assert o.memory_reserved(3) - before == (2 + 20) << 20
        assert b.sum().item() == 500.0 and d.sum().item() == 1_200_000.0
        del b, d
        s.synchronize()
        o.empty_cache()
        assert o.memory_reserved(3) == before


def test_requests_just_above_a_small_block_share_segments(python):
    # 40 x 1.25 MiB fit a 64 MiB device as on CUDA (three 20 MiB segments);
    # rounding each to 2 MiB, as without splitting, needs 80 MiB.
    r = python("""
        import torch
        MiB = 1024 * 1024
        xs = [torch.ones(5 * MiB // 4, dtype=torch.uint8, device="openreg") for _ in range(40)]
        o = torch.openreg
        print(o.memory_allocated() // (MiB // 4), o.memory_reserved() // MiB, o.memory_stats()["segment.all.current"])
        print(sum(int(x.sum().item()) for x in xs) == 40 * 5 * MiB // 4)
    """, env={"OPENREG_DEVICE_MEMORY": "64MiB"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["200", "60", "3", "True"]


def test_lazy_clone_copies_on_write():
    x = torch.arange(6.0, device="openreg")
    y = torch._lazy_clone(x)
    assert torch._C._is_cow_tensor(x) and torch._C._is_cow_tensor(y)  # shared until written
    y.add_(10)
    assert not torch._C._is_cow_tensor(y)
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert y.tolist() == [10.0, 11.0, 12.0, 13.0, 14.0, 15.0]


WRITES = {
    "fill_": lambda t: t.fill_(7),
    "zero_": lambda t: t.zero_(),
    "copy_ from the device": lambda t: t.copy_(torch.ones(6, device="openreg")),
    "copy_ from the host": lambda t: t.copy_(torch.ones(6)),
    "setitem": lambda t: t.__setitem__(0, 9.0),
    "index_put_": lambda t: t.index_put_((torch.tensor([1], device="openreg"),),
                                         torch.tensor(3.0, device="openreg")),
    "normal_": lambda t: t.normal_(),
    "sort out=": lambda t: torch.sort(torch.ones(6, device="openreg"),
                                      out=(t, torch.empty(6, dtype=torch.long, device="openreg"))),
    "cumsum out=": lambda t: torch.cumsum(torch.ones(6, device="openreg"), 0, out=t),
}


@pytest.mark.parametrize("write", list(WRITES), ids=list(WRITES))
@pytest.mark.parametrize("written", ["clone", "original"])
def test_lazy_clone_copies_on_write_for_every_kind_of_kernel(write, written):
    # Not only TensorIterator's outputs (add_ above): native kernels, copies and
    # the fallback's kernels write through kernel views, which copy first.
    x = torch.arange(6.0, device="openreg")
    y = torch._lazy_clone(x)
    WRITES[write](y if written == "clone" else x)
    assert (x if written == "clone" else y).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_lazy_clone_written_in_a_graph_capture():
    # Its copy is queued on the capturing stream like a kernel (a host wait
    # there would fail the capture, and ATen has already let go of the
    # shared memory: an internal assert at exit), so each replay copies again.
    x = torch.ones(4, device="openreg")
    y = torch._lazy_clone(x)
    g = torch.openreg.Graph()
    with torch.openreg.graph(g):
        y.add_(1)
    assert x.tolist() == [1.0] * 4
    g.replay()
    assert y.tolist() == [2.0] * 4 and x.tolist() == [1.0] * 4


def test_deterministic_mode_fills_uninitialized_memory():
    # As CUDA's empty: NaN for floating types, the largest value for integers.
    torch.use_deterministic_algorithms(True)
    try:
        assert torch.empty(3, device="openreg").isnan().all().item()
        assert torch.empty_strided((2, 2), (1, 2), device="openreg").isnan().all().item()
        assert torch.empty(2, dtype=torch.int32, device="openreg").tolist() == [2**31 - 1] * 2
        assert torch.empty_like(torch.ones(2, device="openreg")).isnan().all().item()
        # resize_ fills only what it grew; what was there is kept.
        grown = torch.ones(2, device="openreg").resize_(5)
        assert grown[:2].tolist() == [1.0, 1.0] and grown[2:].isnan().all().item()
        ints = torch.zeros(1, dtype=torch.int64, device="openreg").resize_(3)
        assert ints.tolist() == [0, 2**63 - 1, 2**63 - 1]
    finally:
        torch.use_deterministic_algorithms(False)


def test_reset_peak_and_summary():
    x = torch.empty(1 << 20, device="openreg:2")
    del x
    torch.openreg.reset_peak_memory_stats(2)
    assert torch.openreg.max_memory_allocated(2) == torch.openreg.memory_allocated(2)
    summary = torch.openreg.memory_summary(2)
    assert "Allocated memory" in summary and "device ID 2" in summary


def test_summary_splits_rows_by_pool_unless_abbreviated():
    keep = [torch.empty(10, device="openreg:3"), torch.empty(1 << 20, device="openreg:3")]
    stats = torch.openreg.memory_stats(3)
    full = torch.openreg.memory_summary(3).splitlines()
    rows = {line.split("|")[0].strip(): line for line in full}
    assert all(name in rows for name in ("Allocations", "from large pool", "from small pool"))
    index = next(i for i, line in enumerate(full) if line.startswith("Allocations"))
    counts = [int(full[index + k].split("|")[1]) for k in range(3)]  # all, large, small
    assert counts == [stats["allocation.all.current"], stats["allocation.large_pool.current"],
                      stats["allocation.small_pool.current"]]
    assert counts[0] == counts[1] + counts[2] and counts[1] >= 1 and counts[2] >= 1
    assert "from large pool" not in torch.openreg.memory_summary(3, abbreviated=True)
    del keep


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
        o.current_stream(1).wait_stream(s1)  # y is s1's (the race checker's find)
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
        torch.openreg._sleep(1000)
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
        torch.openreg._sleep(1000)
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


def test_memory_snapshot_lists_segments_and_blocks():
    o = torch.openreg
    s = o.Stream(device=4)
    with o.stream(s):
        a = torch.empty(250, device="openreg:4")
        b = torch.empty(250, device="openreg:4")
        del a
        segments = [seg for seg in o.memory_snapshot() if seg["device"] == 4 and seg["stream"] == s.stream_id]
    assert len(segments) == 1
    seg = segments[0]
    assert seg["segment_type"] == "small" and seg["total_size"] == 2 << 20
    assert seg["allocated_size"] == seg["active_size"] == 1024 and seg["requested_size"] == 1000
    states = [(blk["address"] - seg["address"], blk["size"], blk["state"]) for blk in seg["blocks"]]
    assert states == [(0, 1024, "inactive"), (1024, 1024, "active_allocated"), (2048, (2 << 20) - 2048, "inactive")]
    assert b.data_ptr() == seg["address"] + 1024
    nested = o.memory_stats_as_nested_dict(4)
    assert nested["allocated_bytes"]["all"]["current"] == o.memory_stats(4)["allocated_bytes.all.current"]


def test_per_process_memory_fraction_limits_reserved_memory(python):
    r = python("""
        import torch
        o = torch.openreg
        MiB = 1024 * 1024
        o.set_per_process_memory_fraction(0.5)             # 32 of 64 MiB
        print(o.get_per_process_memory_fraction())
        x = torch.empty(24 * MiB, dtype=torch.uint8, device="openreg")
        try:
            torch.empty(12 * MiB, dtype=torch.uint8, device="openreg")
        except torch.OutOfMemoryError as e:
            print("OOM", "32.00 MiB allowed" in str(e))
        o.set_per_process_memory_fraction(1.0)
        y = torch.empty(12 * MiB, dtype=torch.uint8, device="openreg")
        for bad in (1.5, -0.1, float("nan")):
            try:
                o.set_per_process_memory_fraction(bad)
            except ValueError as e:
                print(e)
        try:
            o.set_per_process_memory_fraction(1)
        except TypeError as e:
            print(e)
    """, env={"OPENREG_DEVICE_MEMORY": "64MiB"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "0.5", "OOM True",
        "Invalid fraction value: 1.5. Allowed range: 0~1",
        "Invalid fraction value: -0.1. Allowed range: 0~1",
        "Invalid fraction value: nan. Allowed range: 0~1",
        "Invalid type for fraction argument, must be `float`"]


def test_caching_allocator_alloc_and_delete():
    o = torch.openreg
    s = o.Stream(device=6)
    before = o.memory_allocated(6)
    ptr = o.caching_allocator_alloc(3000, device=6, stream=s)
    assert o.memory_allocated(6) - before == 3072
    o.caching_allocator_delete(ptr)
    assert o.memory_allocated(6) == before
    with pytest.raises(RuntimeError, match="invalid device pointer"):
        o.caching_allocator_delete(ptr)  # freed already
    with pytest.raises(TypeError, match="must be `torch.openreg.Stream`"):
        o.caching_allocator_alloc(10, stream=torch.Stream(device="cpu"))
    with pytest.raises(ValueError, match="openreg:6, not on openreg:1"):
        o.caching_allocator_alloc(10, device=1, stream=s)


def test_requested_bytes_stay_counted_while_a_freed_block_is_still_in_use():
    # As CUDA's: requested bytes drop with active bytes, when the other
    # stream's work is done (they dropped at free, leaving stats and snapshot apart).
    o = torch.openreg
    s = o.Stream(device=7)
    x = torch.empty(1000, device="openreg:7")
    s.wait_stream(o.current_stream(7))
    with o.stream(s):
        o._sleep(300)
        x.sum()
    x.record_stream(s)
    before = o.memory_stats(7)
    del x
    pending = o.memory_stats(7)
    assert pending["requested_bytes.all.current"] == before["requested_bytes.all.current"]
    assert pending["active_bytes.all.current"] == before["active_bytes.all.current"]
    s.synchronize()
    torch.empty(1, device="openreg:7")  # an allocation processes finished frees
    after = o.memory_stats(7)
    assert before["requested_bytes.all.current"] - after["requested_bytes.all.current"] == 4000


def test_a_request_beyond_any_device_raises_out_of_memory():
    with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate"):
        torch.openreg.caching_allocator_alloc(2**64 - 1, device=7)


MIB = 1024 * 1024
# A script's helpers: allocate n MiB / report what the cache holds.
_ALLOC = """
import torch
o = torch.openreg
MiB = 1024 * 1024
def alloc(mib):
    return torch.empty(int(mib * MiB), dtype=torch.uint8, device="openreg")
def show(*keys):
    s = o.memory_stats()
    print(*[s[k] // MiB if k.endswith("bytes.all.current") else s[k] for k in keys])
"""


def test_max_split_size_keeps_oversize_blocks_whole(python):
    # PYTORCH_ALLOC_CONF=max_split_size_mb (CUDA's semantics): a cached block of
    # at least that size is never split for a smaller request and serves an
    # oversize one only within max_non_split_rounding_mb (20 MiB) of its size.
    r = python(_ALLOC + textwrap.dedent("""
        a = alloc(40)
        print(o.memory_stats()["max_split_size"] // MiB)
        show("oversize_allocations.current", "oversize_segments.current")
        del a
        b = alloc(12)                    # below max_split: the cached 40 MiB block is not split
        show("reserved_bytes.all.current", "allocated_bytes.all.current")
        c = alloc(30)                    # oversize, 40 < 30 + 20: served whole by the 40 MiB block
        show("reserved_bytes.all.current", "allocated_bytes.all.current", "oversize_allocations.current")
        del c
        d = alloc(20)                    # 40 >= 20 + 20: a new segment
        show("reserved_bytes.all.current", "oversize_segments.current", "oversize_allocations.current")
        torch._C._accelerator_setAllocatorSettings("max_split_size_mb:100")
        e = alloc(12)                    # the 40 MiB block is no longer oversize: split
        show("reserved_bytes.all.current", "inactive_split.all.current")
        print([line for line in o.memory_summary().splitlines() if "Oversize" in line])
    """), env={"PYTORCH_ALLOC_CONF": "max_split_size_mb:20", "OPENREG_DEVICE_MEMORY": "256MiB"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[:-1] == ["20", "1 1", "52 12", "52 52 1", "72 2 1", "72 1"]
    allocations, segments = eval(lines[-1])
    assert allocations.split("|")[1:3] == ["           1 ", "           1 "]   # current, peak
    assert segments.split("|")[1:3] == ["           2 ", "           2 "]


def test_oversize_segments_count_what_they_were_when_allocated(python):
    # max_split_size_mb changed while a segment lives: its release still
    # undoes what its allocation counted (the count never goes negative).
    r = python(_ALLOC + textwrap.dedent("""
        a = alloc(30)
        torch._C._accelerator_setAllocatorSettings("max_split_size_mb:20")
        b = alloc(30)
        show("oversize_segments.current")
        del a, b
        o.empty_cache()
        show("oversize_segments.current", "reserved_bytes.all.current")
    """), env={"PYTORCH_ALLOC_CONF": "max_split_size_mb:100"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["1", "0 0"]


def test_max_split_size_unset_splits_as_before_and_reports_minus_one(python):
    r = python(_ALLOC + textwrap.dedent("""
        a = alloc(40)
        print(o.memory_stats()["max_split_size"])
        del a
        b = alloc(12)                    # split off the cached 40 MiB segment
        show("reserved_bytes.all.current", "oversize_allocations.current")
    """))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["-1", "40 0"]


@pytest.mark.parametrize("request_mib, reserved_after, freed", [(26, 12 + 22 + 26, 1), (60, 12 + 60, 2)])
def test_oom_first_returns_only_enough_oversize_blocks(python, request_mib, reserved_after, freed):
    # CUDA's order on an allocation failure with max_split_size_mb set: the
    # smallest cached oversize block that covers the request (26 MiB: the
    # 50 MiB one, too big to serve it), else the largest oversize ones until
    # they add up (60 MiB: 50 + 22); the 12 MiB segment below max_split stays
    # cached, and this is not counted as a retry (which frees every segment).
    r = python(_ALLOC + textwrap.dedent(f"""
        blocks = [alloc(12), alloc(22), alloc(50)]
        del blocks
        x = alloc({request_mib})
        show("reserved_bytes.all.current", "num_alloc_retries", "num_device_free")
    """), env={"PYTORCH_ALLOC_CONF": "max_split_size_mb:20", "OPENREG_DEVICE_MEMORY": "100MiB"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(reserved_after), "0", str(freed)]


def test_roundup_power2_divisions(python):
    r = python(_ALLOC + textwrap.dedent("""
        a = alloc(1.3)                   # 4 steps between 1 and 2 MiB: 1.5 MiB
        b = torch.empty(5000, dtype=torch.uint8, device="openreg")   # 4096 + 1024
        c = torch.empty(1000, dtype=torch.uint8, device="openreg")   # below 512 x 4: to 512 B
        print(o.memory_stats()["allocated_bytes.all.current"])
    """), env={"PYTORCH_ALLOC_CONF": "roundup_power2_divisions:4"})
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) == 3 * MIB // 2 + 5120 + 1024


def test_garbage_collection_returns_the_oldest_cached_segments(python):
    # garbage_collection_threshold:0.6 under a fraction of 0.5 of 100 MiB:
    # before a new segment, once reserved passes 30 MiB, cached segments at
    # least as old as the average go back to the driver until under it: the
    # 12 MiB one (cached longest), not the 14 or 16 MiB ones, and no OOM retry.
    r = python(_ALLOC + textwrap.dedent("""
        o.set_per_process_memory_fraction(0.5)
        x, y = alloc(12), alloc(14)
        del x, y
        z = alloc(16)
        del z
        show("reserved_bytes.all.current", "num_device_free")
        w = alloc(18)
        show("reserved_bytes.all.current", "num_device_free", "num_alloc_retries")
        print(sorted(s["total_size"] // MiB for s in o.memory_snapshot()))
    """), env={"PYTORCH_ALLOC_CONF": "garbage_collection_threshold:0.6", "OPENREG_DEVICE_MEMORY": "100MiB"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["42 0", "48 1 0", "[14, 16, 18]"]


def test_expandable_segments_warns_that_it_is_not_simulated(python):
    r = python("""
        import warnings, torch
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            x = torch.ones(10, device="openreg") + 1
            y = torch.ones(10, device="openreg")
        print(sum("expandable_segments is not simulated" in str(w.message) for w in caught))
        print(x.sum().item())
    """, env={"PYTORCH_ALLOC_CONF": "expandable_segments:True"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "20.0"]


def test_deprecated_names_and_process_listing(python):
    r = python("""
        import os, warnings, torch
        O = torch.openreg
        print(O.list_gpu_processes(2))
        x = torch.empty(1000, device="openreg:2")
        print(O.list_gpu_processes(2) == f"GPU:2\\nprocess {os.getpid():>10d} uses {2.0:>12.3f} MB GPU memory")
        print(O.device_memory_used(2) == O.mem_get_info(2)[1] - O.mem_get_info(2)[0] == 2 << 20)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            print(O.memory_cached(2) == O.memory_reserved(2), O.max_memory_cached(2) == O.max_memory_reserved(2))
            del x
            O.reset_max_memory_allocated(2)
            print(O.max_memory_allocated(2))
            O.reset_max_memory_cached(2)
            print([m.category.__name__ for m in w])
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["GPU:2", "no processes are running", "True", "True", "True True",
                                     "0", str(["FutureWarning"] * 4)], r.stdout


def test_accelerator_memory_queries_do_not_initialise_the_device(python):
    # As CUDA's allocator: {} / 0 before the device is used, so that a child
    # forked afterwards can still use it.
    r = python("""
        import multiprocessing as mp, torch
        assert torch.accelerator.memory_allocated() == 0 and torch.accelerator.memory_stats() == {}
        assert not torch.openreg.is_initialized()
        def child(q):
            q.put(torch.ones(2, device="openreg").sum().item())
        ctx = mp.get_context("fork")
        q = ctx.Queue()
        p = ctx.Process(target=child, args=(q,))
        p.start()
        print(q.get(timeout=60))
        p.join(60)
        x = torch.ones(4, device="openreg")
        print(torch.accelerator.memory_allocated() > 0)
    """, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["2.0", "True"]
