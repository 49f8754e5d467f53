"""Pinned host memory and CUDA's non_blocking copy rule
(csrc/runtime/OpenRegHostAllocator.cpp, csrc/aten/Copy.cpp)."""
import time

import torch


def test_pin_memory():
    x = torch.arange(10.0)
    assert not x.is_pinned()
    p = x.pin_memory()
    assert p.is_pinned() and torch.equal(p, x)


def test_non_blocking_h2d_from_pinned_is_asynchronous():
    src = torch.arange(1 << 16, dtype=torch.float32).pin_memory()
    dst = torch.empty(1 << 16, device="openreg")
    torch.openreg.synchronize()
    torch.openreg._sleep(1000)
    t0 = time.perf_counter()
    dst.copy_(src, non_blocking=True)
    assert time.perf_counter() - t0 < 0.1
    assert not torch.openreg.current_stream().query()
    assert torch.equal(dst.cpu(), src)


def test_non_blocking_h2d_from_pageable_is_synchronous():
    src = torch.arange(1 << 16, dtype=torch.float32)
    dst = torch.empty(1 << 16, device="openreg")
    torch.openreg.synchronize()
    t0 = time.perf_counter()  # before the kernel: a host stall after it cannot shorten the wait
    torch.openreg._sleep(200)
    dst.copy_(src, non_blocking=True)
    assert time.perf_counter() - t0 >= 0.19
    assert torch.openreg.current_stream().query()


def test_non_blocking_d2h_into_pinned():
    x = torch.full((1000,), 5.0, device="openreg")
    out = torch.empty(1000).pin_memory()
    torch.openreg._sleep(150)
    out.copy_(x, non_blocking=True)
    torch.openreg.current_stream().synchronize()
    assert torch.equal(out, torch.full((1000,), 5.0))


def test_pinned_source_freed_before_the_copy_runs():
    dst = torch.empty(1 << 16, device="openreg")
    torch.openreg._sleep(200)
    src = torch.full((1 << 16,), 3.0).pin_memory()
    dst.copy_(src, non_blocking=True)
    del src  # the block must survive until the queued copy has read it
    for _ in range(3):  # churn the pinned allocator meanwhile
        torch.full((1 << 16,), 9.0).pin_memory()
    assert torch.equal(dst.cpu(), torch.full((1 << 16,), 3.0))


def test_pinned_block_outlives_a_long_copy_that_reads_it(python):
    # The block's event must be recorded behind the copy, not before it: then
    # a pinned allocation made while the copy still runs frees (unmaps) the
    # block under it (a crash, or the copy reads another buffer's values).
    r = python("""
        import time, torch
        n = 32 << 20  # 128 MiB: the copy takes a while
        src = torch.full((n,), 3.0).pin_memory()
        dst = torch.empty(n, device="openreg")
        torch.openreg.synchronize()
        torch.openreg._sleep(100)
        dst.copy_(src, non_blocking=True)
        del src
        end = time.monotonic() + 1.0
        while time.monotonic() < end:  # pinned allocations release completed blocks
            torch.zeros(1 << 10).pin_memory()
        torch.openreg.synchronize()
        print(torch.equal(dst.cpu(), torch.full((n,), 3.0)))
    """)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert r.stdout.split() == ["True"], r.stdout


def test_pinned_blocks_are_cached_and_reused_after_their_copies(python):
    # PyTorch's caching host allocator (CUDA's): a freed block is kept and
    # handed out again, but not while a queued copy still reads it.
    r = python("""
        import torch
        torch.openreg.reset_accumulated_host_memory_stats()
        a = torch.empty(1000).pin_memory()
        base = a.data_ptr()
        del a
        b = torch.empty(900).pin_memory()  # same power-of-two block
        print(b.data_ptr() == base)
        dst = torch.empty(900, device="openreg")
        torch.openreg._sleep(300)
        dst.copy_(b.fill_(7.0), non_blocking=True)
        del b
        c = torch.empty(900).pin_memory()
        print(c.data_ptr() != base)  # the copy has not read the block yet
        cached = {base, c.data_ptr()}
        torch.openreg.synchronize()
        del c
        d = torch.empty(900).pin_memory()
        print(d.data_ptr() in cached)  # both blocks free again: one of them, no new one
        s = torch.openreg.host_memory_stats()
        print(s["num_host_alloc"], s["allocations.current"], s["active_requests.current"],
              s["allocated_bytes.current"], s["host_alloc_time.count"])
        torch.openreg._C._host_empty_cache()
        del d
        torch.openreg._C._host_empty_cache()
        print(torch.openreg.host_memory_stats()["allocations.current"],
              torch.equal(dst.cpu(), torch.full((900,), 7.0)))
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.split("\n")
    assert lines[:3] == ["True", "True", "True"], r.stdout
    # Two blocks of 4 KiB (4000 and 3600 bytes round up to 4096), one in use.
    assert lines[3].split() == ["2", "2", "1", "8192", "2"], r.stdout
    assert lines[4].split() == ["0", "True"], r.stdout
