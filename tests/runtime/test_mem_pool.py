"""Memory pools outside graphs: torch.openreg.MemPool and use_mem_pool, as torch.cuda's
(csrc/runtime/OpenRegMemPool.cpp, the pools of OpenRegCachingAllocator.cpp)."""
import gc
import threading

import pytest
import torch

KIB = 1024
MIB = 1024 * KIB


def segment_of(ptr, device=None):
    for s in torch.openreg.memory_snapshot():
        if (device is None or s["device"] == device) and s["address"] <= ptr < s["address"] + s["total_size"]:
            return s
    raise AssertionError(f"no segment holds {ptr:#x}")


def test_a_pool_serves_the_calling_thread_inside_use_mem_pool_and_nothing_else():
    pool = torch.openreg.MemPool()
    assert pool.id[0] == 0 and pool.id[1] > 0 and pool.use_count() == 1 and pool.allocator is None
    allocated = torch.openreg.memory_allocated()
    with torch.openreg.use_mem_pool(pool):
        assert pool.use_count() == 2
        inside = torch.full((64 * KIB,), 3.0, device="openreg")
    assert pool.use_count() == 1
    outside = torch.empty(64 * KIB, device="openreg")
    # Pool memory counts in the device's statistics, as CUDA's.
    assert torch.openreg.memory_allocated() - allocated == 2 * 256 * KIB
    assert tuple(segment_of(inside.data_ptr())["segment_pool_id"]) == pool.id
    assert tuple(segment_of(outside.data_ptr())["segment_pool_id"]) == (0, 0)
    assert {s["address"] for s in pool.snapshot()} == {segment_of(inside.data_ptr())["address"]}
    assert pool.snapshot() == torch.openreg.memory_snapshot(pool.id)

    # A freed pool block is reused only by the pool's own allocations.
    freed = inside.data_ptr()
    del inside
    again_outside = torch.empty(64 * KIB, device="openreg")
    assert tuple(segment_of(again_outside.data_ptr())["segment_pool_id"]) == (0, 0)
    with torch.openreg.use_mem_pool(pool):
        reused = torch.zeros(64 * KIB, device="openreg")
    assert reused.data_ptr() == freed and torch.count_nonzero(reused).item() == 0


def test_other_threads_allocate_as_before_inside_use_mem_pool():
    pool = torch.openreg.MemPool()
    seen = {}

    def other_thread():
        seen["tensor"] = torch.empty(1000, device="openreg")

    with torch.openreg.use_mem_pool(pool):
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
        mine = torch.empty(1000, device="openreg")
    assert tuple(segment_of(seen["tensor"].data_ptr())["segment_pool_id"]) == (0, 0)
    assert tuple(segment_of(mine.data_ptr())["segment_pool_id"]) == pool.id


def test_nested_pools_route_to_the_innermost_and_back():
    outer, inner = torch.openreg.MemPool(), torch.openreg.MemPool()
    with torch.openreg.use_mem_pool(outer):
        a = torch.empty(10, device="openreg")
        with torch.openreg.use_mem_pool(inner):
            b = torch.empty(10, device="openreg")
        c = torch.empty(10, device="openreg")
    assert [tuple(segment_of(t.data_ptr())["segment_pool_id"]) for t in (a, b, c)] == [
        outer.id, inner.id, outer.id]


def test_use_mem_pool_on_another_device_routes_only_that_devices_allocations():
    pool = torch.openreg.MemPool()  # made on the current device, 0
    with torch.openreg.use_mem_pool(pool, device="openreg:1"):
        on_1 = torch.empty(100, device="openreg:1")
        on_0 = torch.empty(100, device="openreg:0")
    assert tuple(segment_of(on_1.data_ptr(), 1)["segment_pool_id"]) == pool.id
    assert tuple(segment_of(on_0.data_ptr(), 0)["segment_pool_id"]) == (0, 0)


def test_empty_cache_keeps_a_live_pools_memory_and_deleting_the_pool_returns_it(python):
    r = python("""
        import gc, torch
        pool = torch.openreg.MemPool()
        with torch.openreg.use_mem_pool(pool):
            x = torch.ones(5 << 20, dtype=torch.uint8, device="openreg")   # a 20 MiB segment
            y = torch.ones(1000, device="openreg")                        # a 2 MiB one
        kept = y.clone()
        del x
        torch.openreg.empty_cache()
        print(torch.openreg.memory_reserved() >> 20)   # the pool's 22 MiB + kept's 2 MiB
        del pool
        gc.collect()
        print(torch.openreg.memory_reserved() >> 20)   # the freed 20 MiB went back at once
        print(int(y.sum().item()), tuple(torch.openreg.memory_snapshot()[0]["segment_pool_id"]))
        del y
        torch.openreg.empty_cache()
        print(torch.openreg.memory_reserved() >> 20)   # y's segment is an ordinary one now
    """, env={"OPENREG_DEVICE_MEMORY": "256MiB"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["24", "4", "1000", "(0,", "0)", "2"]


def test_a_pool_made_with_use_on_oom_serves_an_allocation_that_found_no_memory(python):
    r = python("""
        import torch
        for use_on_oom in (False, True):
            pool = torch.openreg.MemPool(use_on_oom=use_on_oom)
            with torch.openreg.use_mem_pool(pool):
                t = torch.empty(40 << 20, dtype=torch.uint8, device="openreg")
            pooled = t.data_ptr()
            del t            # cached in the pool: no other allocation may have it
            try:
                u = torch.empty(30 << 20, dtype=torch.uint8, device="openreg")  # 24 MiB are free
                print(use_on_oom, "served from the pool:", u.data_ptr() == pooled)
                del u
            except torch.OutOfMemoryError:
                print(use_on_oom, "oom")
            del pool
    """, env={"OPENREG_DEVICE_MEMORY": "64MiB"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["False oom", "True served from the pool: True"]


@pytest.mark.parametrize("no_split", [False, True])
def test_a_no_split_pool_gives_each_allocation_a_whole_segment(no_split):
    pool = torch.openreg.MemPool(no_split=no_split)
    with torch.openreg.use_mem_pool(pool):
        a = torch.empty(256, device="openreg")
        b = torch.empty(256, device="openreg")
    segments = pool.snapshot()
    if no_split:
        assert len(segments) == 2
        assert all(len(s["blocks"]) == 1 and s["blocks"][0]["size"] == 2 * MIB for s in segments)
    else:
        assert len(segments) == 1 and segment_of(a.data_ptr()) == segment_of(b.data_ptr())


def test_a_graph_captured_with_a_mem_pools_id_allocates_from_that_pool():
    pool = torch.openreg.MemPool()
    x = torch.arange(8.0, device="openreg")
    s = torch.openreg.Stream()
    s.wait_stream(torch.openreg.current_stream())
    g = torch.openreg.Graph()
    with torch.openreg.graph(g, pool=pool.id, stream=s):
        y = x * 2
    assert pool.use_count() == 2  # the pool and the graph
    assert tuple(segment_of(y.data_ptr())["segment_pool_id"]) == pool.id
    x.fill_(1.0)
    g.replay()
    assert y.cpu().tolist() == [2.0] * 8
    del g
    assert pool.use_count() == 1


def test_bad_arguments_raise_as_torch_cuda_does():
    with pytest.raises(NotImplementedError, match="pluggable allocators are not built"):
        torch.openreg.MemPool(allocator=object())
    with pytest.raises(TypeError, match="expects a torch.openreg.MemPool"):
        with torch.openreg.use_mem_pool((0, 1)):
            pass


def test_deleting_a_pool_returns_memory_on_every_device_it_was_used_on(python):
    # Device 1 only ever had raw allocations (caching_allocator_alloc), no tensor.
    r = python("""
        import gc, torch
        pool = torch.openreg.MemPool()
        with torch.openreg.use_mem_pool(pool, device=1):
            ptr = torch.openreg.caching_allocator_alloc(5 << 20, device=1)
        print([tuple(s["segment_pool_id"]) == pool.id for s in torch.openreg.memory_snapshot()])
        torch.openreg.caching_allocator_delete(ptr)
        del pool
        gc.collect()
        print(torch.openreg.memory_reserved(1), torch.openreg.memory_snapshot())
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["[True]", "0 []"]


def test_deleting_pools_during_a_capture_leaves_the_capture_intact(python):
    r = python("""
        import gc, torch
        unused = torch.openreg.MemPool()
        cached = torch.openreg.MemPool()
        with torch.openreg.use_mem_pool(cached):
            t = torch.empty(5 << 20, dtype=torch.uint8, device="openreg")
        del t
        x = torch.arange(3.0, device="openreg")
        s = torch.openreg.Stream()
        s.wait_stream(torch.openreg.current_stream())
        g = torch.openreg.Graph()
        with torch.openreg.graph(g, stream=s):
            y = x * 2 + 1
            del unused, cached   # no wait for the device: that would end the capture
            gc.collect()
        g.replay()
        print(y.cpu().tolist())
        torch.openreg.empty_cache()   # the deleted pool's 20 MiB are ordinary cache now
        print(sum(s["total_size"] for s in torch.openreg.memory_snapshot() if s["total_size"] >= 20 << 20))
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["[1.0, 3.0, 5.0]", "0"]


def test_a_use_mem_pool_block_ended_on_another_thread_stops_routing_its_thread():
    import contextlib

    pool = torch.openreg.MemPool()
    stack = contextlib.ExitStack()
    stack.enter_context(torch.openreg.use_mem_pool(pool))
    inside = torch.empty(10, device="openreg")
    closer = threading.Thread(target=stack.close)
    closer.start()
    closer.join()
    after = torch.empty(10, device="openreg")
    assert pool.use_count() == 1
    assert tuple(segment_of(inside.data_ptr())["segment_pool_id"]) == pool.id
    assert tuple(segment_of(after.data_ptr())["segment_pool_id"]) == (0, 0)


def test_deleting_a_pool_does_not_wait_for_other_devices():
    import time

    pool = torch.openreg.MemPool()
    with torch.openreg.use_mem_pool(pool):
        kept = torch.empty(10, device="openreg:0")
    with torch.openreg.device(1):
        torch.openreg._sleep(1500)  # queued on openreg:1, which the pool never used
    start = time.monotonic()
    del pool
    elapsed = time.monotonic() - start
    torch.openreg.synchronize(1)
    assert elapsed < 1.0, elapsed
    assert kept.numel() == 10


def test_deleting_a_pool_does_not_wait_for_its_streams_and_returns_memory_after_them():
    import time

    pool = torch.openreg.MemPool()
    with torch.openreg.use_mem_pool(pool):
        x = torch.ones(5 << 20, dtype=torch.uint8, device="openreg")  # a 20 MiB segment
    base = x.data_ptr()
    torch.openreg._sleep(1000)
    x.add_(1)  # queued behind the sleep: the segment is still in use when x is freed
    del x
    start = time.monotonic()
    del pool
    elapsed = time.monotonic() - start
    assert elapsed < 0.9, elapsed
    # Not given back under the queued kernel, though unused and its pool gone.
    assert segment_of(base)["total_size"] == 20 * MIB
    torch.openreg.synchronize()
    torch.empty(1, device="openreg")  # the device's next allocation completes the release
    # (A new, smaller segment may take its address.)
    assert all(s["total_size"] != 20 * MIB for s in torch.openreg.memory_snapshot()
               if s["address"] == base), "the unused segment was not given back"


def test_a_pool_deleted_behind_queued_work_gives_its_memory_to_a_later_capture(python):
    r = python("""
        import time, torch
        pool = torch.openreg.MemPool()
        with torch.openreg.use_mem_pool(pool):
            t = torch.empty(40 << 20, dtype=torch.uint8, device="openreg")
        del t
        torch.openreg._sleep(300)   # queued: the pool's memory is given back after it
        del pool
        torch.openreg.synchronize()
        print(torch.openreg.memory_reserved() >> 20)   # given back once the sleep ran
        s = torch.openreg.Stream()
        s.wait_stream(torch.openreg.current_stream())
        g = torch.accelerator.Graph()
        with torch.openreg.stream(s):
            g.capture_begin()
            y = torch.empty(40 << 20, dtype=torch.uint8, device="openreg")  # 40 of 64 MiB
            g.capture_end()
        print("captured")
    """, env={"OPENREG_DEVICE_MEMORY": "64MiB"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "captured"]


def test_the_all_zero_pool_id_means_every_segment():
    pool = torch.openreg.MemPool()
    with torch.openreg.use_mem_pool(pool):
        a = torch.empty(10, device="openreg")
    b = torch.empty(10, device="openreg")
    # The same segments (blocks of earlier tests' memory may change state between
    # the two calls as their streams finish, so only segments are compared).
    def segments(snapshot):
        return [(s["device"], s["address"], s["segment_pool_id"]) for s in snapshot]
    gc.collect()  # earlier tests' pools are released now, not between the calls
    torch.openreg.synchronize()
    assert segments(torch.openreg.memory_snapshot((0, 0))) == segments(torch.openreg.memory_snapshot())
    assert len(torch.openreg.memory_snapshot()) > len(pool.snapshot()) >= 1
