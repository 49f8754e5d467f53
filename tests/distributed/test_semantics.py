"""NCCL-style semantics of oreg_ccl on openreg streams, async work, futures."""
import time

import pytest
import torch
import torch.distributed as dist

from _harness import info_of, spawn



def rank_device(rank):
    """This rank's openreg device, made current."""
    dev = torch.device("openreg", rank)
    torch.openreg.set_device(dev)
    return dev


def all_reduce_joined_late(x, rank, seconds):
    """An async all_reduce that rank 1 joins `seconds` late: rank 0's stays pending meanwhile."""
    if rank == 1:
        time.sleep(seconds)
    return dist.all_reduce(x, async_op=True)

def stream_order(rank, n):
    dev = rank_device(rank)
    # The collective is ordered after work queued on the current stream, and
    # issuing it does not block the host.
    t = torch.zeros(1000, device=dev)
    torch.openreg._sleep(1000)
    t.fill_(rank + 1.0)
    start = time.monotonic()
    work = dist.all_reduce(t, async_op=True)
    work.wait()  # makes the stream wait; the host goes on
    issued = time.monotonic() - start
    assert issued < 0.5, f"issuing and waiting blocked the host for {issued:.3f}s"
    u = t * 2  # queued after the collective on the same stream
    expect = sum(range(1, n + 1))
    assert torch.equal(u.cpu(), torch.full((1000,), 2.0 * expect))
    assert work.is_completed() and work.is_success() and work.exception() is None
    fut = work.get_future()
    assert torch.equal(fut.wait()[0].cpu(), torch.full((1000,), float(expect)))

    # wait() returns before the peer even joined; the stream, not the host, waits.
    store = dist.distributed_c10d._get_default_store()
    t = torch.ones(10, device=dev)
    if rank == 1:
        store.wait(["rank 0 checked"])  # joins only once rank 0 saw its work pending
    start = time.monotonic()
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    if rank == 0:
        # (Were the host to wait here, it would wait for good: rank 1 waits for it.)
        assert time.monotonic() - start < 5
        assert not work.is_completed()
        store.set("rank 0 checked", "")
    assert torch.equal((t + 0).cpu(), torch.full((10,), float(n)))

    # Futures chain; CPU work blocks in wait() and completes there.
    c = torch.full((4,), float(rank))
    work = dist.all_reduce(c, async_op=True)
    doubled = work.get_future().then(lambda f: f.value()[0] * 2)
    work.wait()
    assert work.is_completed()
    assert torch.equal(doubled.wait(), torch.full((4,), 2.0 * sum(range(n))))

    # Many async ops in flight at once, completed in order.
    ts = [torch.full((100,), float(i + rank), device=dev) for i in range(20)]
    works = [dist.all_reduce(x, async_op=True) for x in ts]
    for w in works:
        w.wait()
    for i, x in enumerate(ts):
        assert torch.equal(x.cpu(), torch.full((100,), float(n * i + sum(range(n)))))
    # barrier blocks the host until everyone arrived. (CLOCK_MONOTONIC is one
    # clock for all processes of the machine.)
    if rank == 0:
        time.sleep(0.3)
        store.set("rank 0 arrives", repr(time.monotonic()))
    dist.barrier()
    returned = time.monotonic()
    if rank == 1:
        assert returned >= float(store.get("rank 0 arrives"))


def test_stream_ordering_async_and_futures(tmp_path):
    spawn(stream_order, 2, tmp_path)


def back_to_back(rank, n):
    dev = rank_device(rank)
    info = lambda: dist.group.WORLD._get_backend(dev)._network_info()  # noqa: E731
    # Each collective reads what the one before wrote; with nothing else
    # queued between them, only the first needs a marker kernel.
    x = torch.ones(64, device=dev)
    dist.all_reduce(x)
    before = info()
    for _ in range(9):
        dist.all_reduce(x)
    after = info()
    assert torch.equal(x.cpu(), torch.full((64,), float(n ** 10)))
    assert after["stream_markers"] == before["stream_markers"]
    assert after["stream_markers_skipped"] - before["stream_markers_skipped"] == 9

    # Work queued on the stream after a collective was issued (and before its
    # wait) is not covered by that wait: the next collective must see it.
    a = torch.ones(8, device=dev)
    b = torch.zeros(8, device=dev)
    work = dist.all_reduce(a, async_op=True)
    torch.openreg._sleep(300)  # the worker would be done long before the fill
    b.fill_(rank + 1.0)
    work.wait()
    dist.all_reduce(b)
    assert torch.equal(b.cpu(), torch.full((8,), float(sum(range(1, n + 1)))))
    # Nor is work queued after the wait.
    c = torch.zeros(8, device=dev)
    torch.openreg._sleep(300)
    c.fill_(rank + 2.0)
    dist.all_reduce(c)
    assert torch.equal(c.cpu(), torch.full((8,), float(sum(range(2, n + 2)))))
    # Nor work on another stream: coverage is per stream.
    side = torch.openreg.Stream()
    with torch.openreg.stream(side):
        d = torch.zeros(8, device=dev)
        torch.openreg._sleep(300)
        d.fill_(rank + 3.0)
        dist.all_reduce(d)
    side.synchronize()
    assert torch.equal(d.cpu(), torch.full((8,), float(sum(range(3, n + 3)))))
    # Waiting for a send covers nothing: it may complete after the next
    # collective started, and the next collective would read too early.
    e = torch.full((8,), float(rank), device=dev)
    if n > 1:
        if rank == 0:
            dist.send(e, 1)
        elif rank == 1:
            dist.recv(e, 0)
    dist.all_reduce(e)
    expect = 0.0 if n == 1 else float(sum(range(2, n)))  # rank 1 holds 0 after the receive
    assert torch.equal(e.cpu(), torch.full((8,), expect)), (rank, e.cpu())


def test_back_to_back_collectives_skip_stream_markers_only_when_safe(tmp_path):
    spawn(back_to_back, 3, tmp_path)


def device_and_baseline(rank):
    """This rank's device and its allocated bytes once the group's own buffers exist."""
    dev = rank_device(rank)
    dist.all_reduce(torch.ones(1, device=dev))
    torch.openreg.synchronize()
    return dev, torch.openreg.memory_allocated(dev)


def released_on_completion(rank, n):
    dev, before = device_and_baseline(rank)
    # FSDP2's pattern: collectives on buffers that Python drops at once, and no
    # further call on the group. Their memory goes back to the allocator once
    # the collectives finish, not at the group's next call.
    for _ in range(3):
        t = torch.ones(1 << 20, device=dev)
        out = torch.empty(n << 20, device=dev)
        dist.all_gather_into_tensor(out, t, async_op=True).wait()
        dist.all_reduce(t, async_op=True).wait()
        del t, out
    torch.openreg.synchronize()
    deadline = time.monotonic() + 5
    while torch.openreg.memory_allocated(dev) > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert torch.openreg.memory_allocated(dev) == before, (before, torch.openreg.memory_allocated(dev))
    dist.barrier()


def test_finished_collectives_release_their_device_memory(tmp_path):
    spawn(released_on_completion, 2, tmp_path)


def released_at_wait(rank, n):
    dev, before = device_and_baseline(rank)
    if rank == 1:
        time.sleep(1.0)  # rank 0's all-gather stays pending meanwhile
    t = torch.full((1 << 20,), float(rank + 1), device=dev)
    out = torch.empty(n << 20, device=dev)
    dist.all_gather_into_tensor(out, t)  # sync: wait() queues the stream hold
    del t, out
    if rank == 0:
        # As with NCCL, the backend holds nothing after wait(): the memory is
        # back in the allocator although the collective has not run yet ...
        assert torch.openreg.memory_allocated(dev) == before
        # ... and stream order keeps reuse safe: this fill is queued after the
        # hold, so the late all-gather cannot overwrite it.
        reuse = torch.empty(n << 20, device=dev)
        reuse.fill_(7.0)
        assert torch.equal(reuse.cpu(), torch.full((n << 20,), 7.0))
    dist.barrier()
    # A future requested after wait() still completes once the work is gone:
    # the worker's reference turns strong again.
    t = torch.ones(8, device=dev)
    work = all_reduce_joined_late(t, rank, 0.3)
    work.wait()
    fut = work.get_future()
    del work
    assert torch.equal(fut.wait()[0].cpu(), torch.full((8,), float(n)))
    # So does the future of a coalesced group whose work the caller dropped.
    outs = [torch.empty(n * 4, device=dev), torch.empty(n * 2, device=dev)]
    if rank == 1:
        time.sleep(0.3)
    with dist._coalescing_manager(device=dev, async_ops=True) as cm:
        for o in outs:
            dist.all_gather_into_tensor(o, torch.full((o.numel() // n,), float(rank), device=dev))
    fut = cm.works[0].get_future()
    del cm
    gathered = [v.cpu() for v in fut.wait()]
    assert [torch.equal(g, torch.arange(n).float().repeat_interleave(g.numel() // n)) for g in gathered] \
        == [True, True], gathered


def test_wait_releases_the_callers_tensors_before_completion(tmp_path):
    spawn(released_at_wait, 2, tmp_path)


def host_tensor_calls(rank, n):
    # async_op=True on CPU tensors returns before the peer joined, as gloo does.
    if rank == 1:
        time.sleep(0.5)
    t = torch.full((8,), float(rank))
    start = time.monotonic()
    work = dist.all_reduce(t, async_op=True)
    if rank == 0:
        assert time.monotonic() - start < 0.3, "async_op=True blocked the caller"
        assert not work.is_completed()
    work.wait()
    assert torch.equal(t, torch.full((8,), float(sum(range(n)))))
    # Synchronous calls on an idle group run on the caller's thread (no
    # hand-off to the worker); mixed with async and p2p work they still run
    # in issue order and give the right values.
    for i in range(50):
        a = torch.full((64,), float(i + rank))
        pending = dist.all_reduce(torch.full((4,), 1.0), async_op=True) if i % 3 == 0 else None
        dist.all_reduce(a)
        assert torch.equal(a, torch.full((64,), float(n * i + sum(range(n))))), i
        if pending is not None:
            pending.wait()
        if i % 7 == 0:
            peer = (rank + 1) % n
            buf = torch.empty(16)
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.full((16,), float(rank)), peer),
                                           dist.P2POp(dist.irecv, buf, (rank - 1) % n)])
            out = [torch.empty(2) for _ in range(n)]
            dist.all_gather(out, torch.full((2,), float(rank)))  # while the p2p is in flight
            for r in reqs:
                r.wait()
            assert torch.equal(buf, torch.full((16,), float((rank - 1) % n)))
            assert all(torch.equal(o, torch.full((2,), float(q))) for q, o in enumerate(out))


def test_host_tensor_sync_calls_inline_async_calls_stay_async(tmp_path):
    spawn(host_tensor_calls, 3, tmp_path)


def busy_time_of_two_groups(rank, n):
    # Two groups' collectives at once (as HSDP's shard and replicate groups):
    # the reported busy time is the wall time during which a collective ran,
    # not the sum of both groups' times.
    from openreg import _C

    other = dist.new_group(list(range(n)))
    a, b = torch.ones(8 << 20), torch.ones(8 << 20)  # 32 MiB each: milliseconds per call
    dist.barrier()
    before, start = _C._ccl_busy_seconds(), time.perf_counter()
    for _ in range(5):
        works = [dist.all_reduce(a, async_op=True), dist.all_reduce(b, group=other, async_op=True)]
        for w in works:
            w.wait()
    wall = time.perf_counter() - start
    busy = _C._ccl_busy_seconds() - before
    assert 0 < busy <= wall + 1e-3, (busy, wall)
    assert a[0].item() == b[0].item() == n**5


def test_busy_time_counts_overlapping_groups_once(tmp_path):
    spawn(busy_time_of_two_groups, 2, tmp_path)


def groups(rank, n):
    dev = torch.device("openreg", rank)
    # new_subgroups: [0, 1], [2, 3].
    sub, _ = dist.new_subgroups(group_size=2)
    t = torch.full((3,), float(rank), device=dev)
    dist.all_reduce(t, group=sub)
    base = rank - rank % 2
    assert torch.equal(t.cpu(), torch.full((3,), float(2 * base + 1)))
    # split_group (needs supportsSplitting, split() and .options). c10d asks
    # for one split per device type; one backend serves both, as the parent.
    splits = info_of()["splits"]
    sg = dist.split_group(split_ranks=[[0, 3], [1, 2]])
    assert info_of()["splits"] == splits + 1
    assert sg._get_backend(torch.device("cpu")) is sg._get_backend(dev)
    for t in (torch.ones(2, device=dev), torch.ones(2)):
        dist.all_reduce(t, group=sg)
        assert torch.equal(t.cpu(), torch.full((2,), 2.0))
    # The same ranks again after destroying their group, while the old
    # object is still referenced: a new backend, not the shut-down one.
    old = dist.split_group(split_ranks=[[0, 1], [2, 3]])
    dist.destroy_process_group(old)
    again = dist.split_group(split_ranks=[[0, 1], [2, 3]])
    t = torch.ones(2, device=dev)
    dist.all_reduce(t, group=again)
    assert torch.equal(t.cpu(), torch.full((2,), 2.0))
    # A 2 x 2 DeviceMesh splits the default group.
    from torch.distributed.device_mesh import init_device_mesh

    splits = info_of()["splits"]
    mesh = init_device_mesh("openreg", (2, 2), mesh_dim_names=("dp", "tp"))
    assert info_of()["splits"] == splits + 2  # one group per mesh dimension
    for dim in ("dp", "tp"):
        t = torch.full((2,), float(rank), device=dev)
        dist.all_reduce(t, group=mesh.get_group(dim))
        peers = mesh[dim].mesh.tolist()
        assert torch.equal(t.cpu(), torch.full((2,), float(sum(peers)))), (dim, peers)
    # new_group with a subset; non-members do not take part. Last: it leaves
    # the ranks with different group counts, which split_group's names hash.
    g = dist.new_group([0, 2])
    t = torch.full((3,), float(rank), device=dev)
    if rank in (0, 2):
        dist.all_reduce(t, group=g)
        assert torch.equal(t.cpu(), torch.full((3,), 2.0))
    # The groups are independent: interleaved use stays correct.
    a, b = torch.ones(1, device=dev), torch.ones(1, device=dev)
    w1 = dist.all_reduce(a, group=sub, async_op=True)
    w2 = dist.all_reduce(b, async_op=True)
    w1.wait()
    w2.wait()
    assert a.item() == 2 and b.item() == n


def test_subgroups_split_and_device_mesh(tmp_path):
    spawn(groups, 4, tmp_path, init={"device_id": True})


def callback_waits_on_collective(rank, n, device_type):
    # A future callback runs on the thread that completed the collective (the
    # group's worker, or the caller for a host collective run inline); one that
    # issues another collective and waits for it must not wait for itself.
    dev = torch.device("openreg", rank) if device_type == "openreg" else torch.device("cpu")
    if device_type == "openreg":
        torch.openreg.set_device(dev)
    expect = float(sum(range(1, n + 1)))
    t = torch.full((4,), rank + 1.0, device=dev)
    seen = []

    def nested(fut):
        u = fut.value()[0].clone() * (rank + 1)
        dist.all_reduce(u)  # synchronous
        v = torch.full((2,), 1.0, device=dev)
        w = dist.all_reduce(v, async_op=True).get_future().wait()[0]
        seen.append((u.cpu(), w.cpu()))
        return u

    start = time.monotonic()
    out = dist.all_reduce(t, async_op=True).get_future().then(nested).wait()
    assert time.monotonic() - start < 10, "the callback's collectives waited for a timeout"
    assert torch.equal(out.cpu(), torch.full((4,), expect * expect))
    assert torch.equal(seen[0][1], torch.full((2,), float(n)))
    # The group still works and keeps its order afterwards.
    x = torch.ones(3, device=dev)
    dist.all_reduce(x)
    assert torch.equal(x.cpu(), torch.full((3,), float(n)))


def test_future_callback_that_waits_on_a_collective(tmp_path):
    for device_type in ("openreg", "cpu"):
        spawn(callback_waits_on_collective, 3, tmp_path, device_type, timeout=90, pg_timeout=20)


def callbacks_in_program_order(rank, n, late_then):
    # Host tensors. A callback chained on w0 issues a collective of w0's size.
    # Rank 0 chains while w0 is pending (the callback runs on the group's
    # worker); rank 1 once w0 and w1 are done (it runs at then(), on this
    # thread). Either way its collective must take the place of then() in
    # program order (oreg_ccl notes it at get_future()): right after w0 if
    # chained at once (a DDP comm hook), after w1 if chained after w1 was
    # issued. Same sizes everywhere, so a wrong pairing would show only in
    # the sums.
    a, b = torch.full((4,), rank + 1.0), torch.full((4,), 10.0 * (rank + 1))
    c = torch.full((4,), 100.0 * (rank + 1))

    def chained(fut):
        dist.all_reduce(c)
        return fut.value()

    dist.barrier()  # aligned, so the sleep decides who waits for whom
    if rank == 1:
        time.sleep(0.5)
    w0 = dist.all_reduce(a, async_op=True)
    if not late_then:
        if rank == 1:
            w0.wait()  # done: the callback runs at then()
        fut = w0.get_future().then(chained)
    w1 = dist.all_reduce(b, async_op=True)
    if late_then:
        if rank == 1:
            w1.wait()  # so w0 is done too
        fut = w0.get_future().then(chained)
    fut.wait()
    w1.wait()
    assert a.tolist() == [3.0] * 4 and b.tolist() == [30.0] * 4 and c.tolist() == [300.0] * 4, (a, b, c)


@pytest.mark.parametrize("late_then", [False, True], ids=["chained_at_issue", "chained_later"])
def test_callback_collectives_take_the_place_of_get_future(tmp_path, late_then):
    spawn(callbacks_in_program_order, 2, tmp_path, late_then, timeout=90, pg_timeout=20)


def callback_during_coalescing(rank, n):
    # Host tensors. On rank 0 w0's callback runs on the group's worker while
    # the caller is inside a coalescing block: the callback's collective is
    # not part of the block (coalescing is the caller's), and it runs right
    # after w0, as on rank 1 where it runs at then(), before the block.
    a, c = torch.full((4,), rank + 1.0), torch.full((4,), 100.0 * (rank + 1))
    x, y = torch.full((4,), 10.0 * (rank + 1)), torch.full((4,), 1000.0 * (rank + 1))

    def chained(fut):
        # Not all_reduce: c10d's own coalescing manager takes every thread's
        # all_reduce into its block (a process-wide list), before the backend.
        dist.broadcast(c, src=1)
        return fut.value()

    dist.barrier()  # aligned, so the sleep decides who waits for whom
    if rank == 1:
        time.sleep(0.5)
    w0 = dist.all_reduce(a, async_op=True)
    if rank == 1:
        w0.wait()
    fut = w0.get_future().then(chained)
    with dist._coalescing_manager(device=torch.device("cpu"), async_ops=True) as cm:
        dist.broadcast(x, src=0)
        if rank == 0:
            time.sleep(1.0)  # rank 1 joins w0 meanwhile: the callback runs now
        dist.broadcast(y, src=1)
    cm.wait()
    fut.wait()
    assert a.tolist() == [3.0] * 4 and c.tolist() == [200.0] * 4, (a, c)
    assert x.tolist() == [10.0] * 4 and y.tolist() == [2000.0] * 4, (x, y)


def test_callback_collective_during_a_coalescing_block_is_not_part_of_it(tmp_path):
    spawn(callback_during_coalescing, 2, tmp_path, timeout=90, pg_timeout=20)


def rng_state_with_future_pending(rank, n):
    # get_rng_state and empty_cache wait for the streams kernels run on, not for a
    # collective whose device future was taken (its future stream holds until
    # the peer joins): rank 1 joins g1 only after a barrier on g2 that rank 0
    # reaches after get_rng_state, an order NCCL allows.
    dev = rank_device(rank)
    g1, g2 = dist.new_group([0, 1]), dist.new_group([0, 1])
    x = torch.ones(4, device=dev)
    if rank == 0:
        fut = dist.all_reduce(x, group=g1, async_op=True).get_future()
        torch.rand(3, device=dev)  # a random kernel queued before the state is read
        start = time.monotonic()
        state = torch.openreg.get_rng_state()
        assert time.monotonic() - start < 5, "get_rng_state waited for the collective"
        torch.openreg.empty_cache()  # waits for the streams kernels run on (as an OOM retry)
        assert time.monotonic() - start < 5, "empty_cache waited for the collective"
        dist.barrier(group=g2)
        assert torch.equal(fut.wait()[0].cpu(), torch.full((4,), 2.0))
        torch.openreg.set_rng_state(state)
    else:
        dist.barrier(group=g2)
        dist.all_reduce(x, group=g1)
    torch.openreg.synchronize()


def test_rng_state_does_not_wait_for_a_pending_collective(tmp_path):
    spawn(rng_state_with_future_pending, 2, tmp_path, pg_timeout=15)


def alltoall_in_place(rank, n, device_type):
    # all_to_all_single(x, x): every block arrives intact, small or large
    # (large ones go straight between the ranks' buffers).
    dev = torch.device("openreg", rank) if device_type == "openreg" else torch.device("cpu")
    for rows in (4, 1 << 20):
        x = (torch.arange(rows * n, dtype=torch.float32) + 1e7 * rank).to(dev)
        expect = torch.cat([torch.arange(rank * rows, (rank + 1) * rows, dtype=torch.float32) + 1e7 * p
                            for p in range(n)])
        dist.all_to_all_single(x, x)
        assert torch.equal(x.cpu(), expect), rows


@pytest.mark.parametrize("device_type", ["openreg", "cpu"])
def test_all_to_all_single_in_place(tmp_path, device_type):
    spawn(alltoall_in_place, 3, tmp_path, device_type)


def device_synchronize_waits_for_collectives(rank, n):
    dev = rank_device(rank)
    torch.openreg.sanitizer.enable()  # and the race checker takes it as a wait
    x = torch.ones(1000, device=dev)
    work = all_reduce_joined_late(x, rank, 0.5)
    # As cudaDeviceSynchronize waits for NCCL's kernels: no wait() needed.
    torch.openreg.synchronize()
    assert work.is_completed()
    assert torch.equal(x.cpu(), torch.full((1000,), float(n)))


def test_device_synchronize_waits_for_collectives(tmp_path):
    spawn(device_synchronize_waits_for_collectives, 2, tmp_path)


def device_synchronize_reports_unwaited_failures(rank, n):
    dev = rank_device(rank)
    x = torch.ones(1000 + rank, device=dev)  # sizes differ: the collective fails
    work = dist.all_reduce(x, async_op=True)
    # Nobody waited for it: the synchronisation that covers it raises rather
    # than let the caller read an output that was never written ...
    with pytest.raises(dist.DistBackendError, match="all_?reduce"):
        torch.openreg.synchronize()
    # ... once: the failure has been reported.
    torch.openreg.synchronize()
    with pytest.raises(dist.DistBackendError):
        work.wait()


def test_device_synchronize_raises_for_a_failed_collective_nobody_waited_for(tmp_path):
    spawn(device_synchronize_reports_unwaited_failures, 2, tmp_path, pg_timeout=20)


def synchronize_in_worker_callbacks(rank, n):
    # Callbacks of host-tensor futures run on the groups' workers; a device
    # synchronisation there must not wait for operations queued behind them
    # (here each group's device collective waits for the other group's
    # callback): it waits for the streams only.
    dev = rank_device(rank)
    other = dist.new_group([0, 1])
    if rank == 1:
        time.sleep(1.0)

    def callback(fut):
        torch.openreg.synchronize()
        return fut.value()

    chained = [dist.all_reduce(torch.ones(4), group=g, async_op=True).get_future().then(callback)
               for g in (dist.group.WORLD, other)]
    x, y = torch.ones(4, device=dev), torch.ones(4, device=dev)
    works = [dist.all_reduce(x, async_op=True), dist.all_reduce(y, group=other, async_op=True)]
    for f in chained:
        assert torch.equal(f.wait()[0], torch.full((4,), float(n)))
    for w in works:
        w.wait()
    assert torch.equal(x.cpu(), torch.full((4,), float(n))) and torch.equal(y.cpu(), x.cpu())


def test_device_synchronize_in_worker_callbacks_does_not_deadlock(tmp_path):
    spawn(synchronize_in_worker_callbacks, 2, tmp_path, timeout=60, pg_timeout=20)


def synchronize_in_forked_child(rank, n):
    import os
    dev = rank_device(rank)
    if rank == 1:
        time.sleep(3.0)
    x = torch.ones(4, device=dev)
    work = dist.all_reduce(x, async_op=True)  # rank 0: pending at the fork
    if rank == 0:
        pid = os.fork()
        if pid == 0:  # no worker here to finish it: raise, as CUDA's forked child does
            try:
                torch.accelerator.synchronize()
            except RuntimeError as e:
                os._exit(0 if "forked subprocess" in str(e) else 2)
            os._exit(1)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError("device synchronisation in a forked child hung")
        assert os.waitstatus_to_exitcode(status) == 0, status
    work.wait()
    assert torch.equal(x.cpu(), torch.full((4,), float(n)))


def test_device_synchronize_in_a_forked_child_raises(tmp_path):
    spawn(synchronize_in_forked_child, 2, tmp_path, timeout=60, pg_timeout=30)


def coalesced_premul_factor_outlives_the_caller(rank, n):
    dev = rank_device(rank)
    a, b = torch.ones(4, device=dev), torch.ones(3, device=dev)
    if rank == 1:
        time.sleep(0.5)  # rank 0's operation stays pending
    op = dist._make_nccl_premul_sum(torch.full((1,), 2.0, device=dev))
    work = dist.all_reduce_coalesced([a, b], op=op, async_op=True)
    del op  # the backend keeps the factor tensor, as it keeps the reduced ones
    junk = [torch.full((1,), 1000.0, device=dev) for _ in range(4)]  # would reuse its block
    work.wait()
    assert torch.equal(a.cpu(), torch.full((4,), 2.0 * n)) and torch.equal(b.cpu(), torch.full((3,), 2.0 * n))
    del junk


def test_all_reduce_coalesced_keeps_its_premul_factor_tensor(tmp_path):
    spawn(coalesced_premul_factor_outlives_the_caller, 2, tmp_path)


def coalesced_tensors_on_several_devices(rank, n):
    dev, other = torch.device("openreg", 2 * rank), torch.device("openreg", 2 * rank + 1)
    torch.openreg.set_device(dev)
    for second in (other, torch.device("cpu")):
        outs = [torch.zeros(2 * n, device=dev), torch.zeros(2 * n, device=second)]
        # One operation is ordered on, and waited for by, one device's stream:
        # rejected at the call, as oreg_ccl's other multi-tensor collectives.
        with pytest.raises(ValueError, match="all tensors must be on one device"):
            with dist._coalescing_manager(async_ops=True):
                for o in outs:
                    dist.all_gather_into_tensor(o, torch.ones(2, device=o.device))
        with pytest.raises(ValueError, match="all tensors must be on one device"):
            with dist._coalescing_manager(async_ops=True):
                for o in outs:
                    dist.reduce_scatter_tensor(o[:2], torch.ones(2 * n, device=o.device))
    # The group is still usable.
    x = torch.ones(3, device=dev)
    dist.all_reduce(x)
    assert torch.equal(x.cpu(), torch.full((3,), float(n)))


def test_coalesced_collectives_reject_tensors_on_several_devices(tmp_path):
    spawn(coalesced_tensors_on_several_devices, 2, tmp_path)


def wait_with_a_timeout(rank, n):
    from datetime import timedelta
    dev = rank_device(rank)
    x = torch.ones(4, device=dev)
    work = all_reduce_joined_late(x, rank, 3.0)
    if rank == 0:
        # As NCCL's: with a timeout the host waits, up to it, and raises.
        start = time.monotonic()
        with pytest.raises(dist.DistBackendError, match="did not complete within"):
            work.wait(timeout=timedelta(seconds=0.5))
        assert 0.4 < time.monotonic() - start < 2.5
    work.wait(timeout=timedelta(seconds=20))
    assert work.is_completed()  # the host waited: done on return
    assert torch.equal(x.cpu(), torch.full((4,), float(n)))


def test_wait_with_a_timeout_blocks_the_host_up_to_it(tmp_path):
    spawn(wait_with_a_timeout, 2, tmp_path)


def collectives_in_the_profile(rank, n):
    # torch.profiler with PrivateUse1 shows each collective on openreg tensors
    # as device work of its rank's device, on an "oreg_ccl" row (NCCL's kernels
    # run on a stream of their own), linked to the c10d operator that issued it.
    import json, os, tempfile
    from torch.profiler import profile, ProfilerActivity
    dev = rank_device(rank)
    x = torch.ones(1 << 16, device=dev)
    dist.all_reduce(x)
    torch.openreg.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as p:
        for _ in range(3):
            dist.all_reduce(x)
        # Sends and receives too, from their post to their completion.
        p2p = dist.send if rank == 0 else dist.recv
        p2p(x, 1 - rank)
        torch.openreg.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    p.export_chrome_trace(path)
    events = json.load(open(path))["traceEvents"]
    ops = {e["args"]["External id"]: e["name"] for e in events if e.get("cat") == "cpu_op"}
    kernels = [e for e in events if e.get("cat") == "kernel"]
    runs = [e for e in kernels if e["name"].startswith("oreg_ccl all")]
    assert len(runs) == 3, [e["name"] for e in kernels]
    for e in runs:
        assert e["name"] == "oreg_ccl allreduce 65536 x Float SUM" and e["pid"] == rank, e
        assert ops[e["args"]["External id"]] == "c10d::allreduce_", e
    p2p_runs = [e for e in kernels if e not in runs]
    # The stream's marker and wait for each are no device work, as CUDA's events: the
    # collectives and the send or receive are the only kernels here.
    assert len(p2p_runs) == 1, [e["name"] for e in kernels]
    kind = "send" if rank == 0 else "recv"
    assert p2p_runs[0]["name"].startswith(f"oreg_ccl {kind}"), p2p_runs[0]
    assert ops[p2p_runs[0]["args"]["External id"]].startswith(f"c10d::{kind}"), p2p_runs[0]
    assert torch.equal(x.cpu(), torch.full((1 << 16,), float(n) ** 4))


def test_collectives_show_in_the_profile_as_device_work(tmp_path):
    spawn(collectives_in_the_profile, 2, tmp_path)


def sparse_all_reduce(rank, n):
    def make(r=rank):  # 1 at index 0 and r + 1 at index r: rank 0's two entries coalesce
        return torch.sparse_coo_tensor(torch.tensor([[0, r]]), torch.tensor([1.0, r + 1.0]), (4,))
    expected = sum(make(r).to_dense() for r in range(n)).tolist()
    t = make()
    dist.all_reduce(t)
    assert t.to_dense().tolist() == expected, t
    # Written below autograd, as dense results are: a leaf that requires grad,
    # an inference tensor outside inference mode, and an asynchronous call in
    # inference mode (finished on the group's worker) take the result too.
    leaf = make().requires_grad_()
    dist.all_reduce(leaf)
    assert leaf.detach().to_dense().tolist() == expected
    with torch.inference_mode():
        inference = make()
        work = dist.all_reduce(make(), async_op=True)
        work.wait()
        async_in_mode = make()
        dist.all_reduce(async_in_mode, async_op=True).wait()
    dist.all_reduce(inference)
    assert inference.to_dense().tolist() == async_in_mode.to_dense().tolist() == expected
    dense = torch.ones(2)
    dist.all_reduce(dense)  # the group is still healthy
    assert dense.tolist() == [float(n)] * 2


def test_sparse_all_reduce_sums_and_writes_any_tensor(tmp_path):
    spawn(sparse_all_reduce, 2, tmp_path)
