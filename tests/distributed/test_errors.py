"""Mismatched calls, timeouts, bad input, dead peers, shutdown and abort."""
import datetime
import gc
import os
import signal
import tempfile
import threading
import time

import pytest
import torch
import torch.distributed as dist

from _harness import info_of, shm_objects, single_copy_allowed, spawn


def expect_dist_error(fn, *needles):
    try:
        fn()
    except dist.DistBackendError as e:
        msg = str(e)
        for needle in needles:
            assert needle in msg, f"{needle!r} not in {msg!r}"
        return msg
    raise AssertionError(f"no DistBackendError (expected one mentioning {needles})")


def coalesced_all_reduce(tensors, group):
    # One allreduce_coalesced of the backend; unlike dist.all_reduce_coalesced, mixed dtypes.
    with dist._coalescing_manager(group=group):
        for t in tensors:
            dist.all_reduce(t, group=group)


def mismatches(rank, n):
    # Each case on a fresh group: a failed group stays failed.
    cases = [
        lambda: dist.all_reduce(torch.ones(10 if rank == 0 else 20), group=g),  # sizes
        lambda: dist.all_reduce(torch.ones(4, dtype=torch.float32 if rank == 0 else torch.int32), group=g),
        lambda: (dist.all_reduce(torch.ones(4), group=g) if rank == 0
                 else dist.broadcast(torch.ones(4), src=0, group=g)),  # op types
        # A long description (a coalesced list): the difference is at its end.
        lambda: dist.all_reduce_coalesced([torch.ones(1000) for _ in range(4)], group=g,
                                          op=dist.ReduceOp.SUM if rank == 0 else dist.ReduceOp.MAX),
        # ... longer than a message header holds (it travels cut short, with a digest).
        lambda: dist.all_reduce_coalesced([torch.ones(1) for _ in range(16)], group=g,
                                          op=dist.ReduceOp.SUM if rank == 0 else dist.ReduceOp.MAX),
        lambda: coalesced_all_reduce([torch.ones(1) for _ in range(15)] + [
            torch.ones(1, dtype=torch.float32 if rank == 0 else torch.int32)], g),
    ]
    for case in cases:
        g = dist.new_group(list(range(n)))
        expect_dist_error(case, "mismatched collectives")
        # Later calls on the failed group raise at once.
        expect_dist_error(lambda: dist.all_reduce(torch.ones(1), group=g), "already failed")
    # Bad arguments raise on the caller, before anything is sent.
    t = torch.ones(4)
    with pytest.raises(ValueError, match="send to invalid rank 5"):
        dist.send(t, 5)
    with pytest.raises((ValueError, RuntimeError)):
        dist.all_to_all_single(torch.empty(4), t, [1] * n, [3] * n)  # splits do not add up
    with pytest.raises((ValueError, RuntimeError)):
        dist.all_reduce(torch.ones(2, dtype=torch.float32), op=dist.ReduceOp.BAND)
    with pytest.raises((ValueError, RuntimeError)):
        dist.all_gather_into_tensor(torch.empty(3), torch.ones(2))
    # Splits whose int64 sum wraps around to dim 0 (the copies went past the
    # tensors: a segfault).
    big = 2**63 - 1
    with pytest.raises(ValueError, match="split size 9223372036854775807 is larger than dim 0"):
        dist.all_to_all_single(torch.empty(n), torch.ones(n), [big, big] + [2] * (n - 2),
                               [1] * n)
    # Negative tags are the backend's own (the monitored barrier's): a user's
    # send with one took the barrier's token, and the barrier its tensor.
    with pytest.raises(RuntimeError, match="Tag must be nonnegative, got -28002"):
        dist.send(t, (rank + 1) % n, tag=-0x6D62)
    with pytest.raises(RuntimeError, match="Tag must be nonnegative"):
        dist.recv(t, (rank + 1) % n, tag=-1)
    with pytest.raises(ValueError, match="sends itself"):  # own block: 2 out, 3 expected
        dist.all_to_all([torch.empty(3 if p == rank else 2) for p in range(n)],
                        [torch.ones(2) for _ in range(n)])
    # A written-to tensor with internal overlap (several elements, one memory
    # location) is refused at the call, like ATen's in-place ops refuse it.
    with pytest.raises(RuntimeError, match=r"oreg_ccl: \w+: unsupported operation"):
        dist.all_reduce(torch.ones(1).expand(4))
    with pytest.raises(RuntimeError, match=r"oreg_ccl: \w+: unsupported operation"):
        dist.all_gather_into_tensor(torch.zeros(1).expand(2 * n), torch.ones(2))
    # broadcast / reduce: refused on every rank, the root (which only reads)
    # included, so that no rank goes on alone (NCCL refuses them everywhere).
    with pytest.raises(RuntimeError, match=r"oreg_ccl: \w+: unsupported operation"):
        dist.broadcast(torch.zeros(1).expand(3), src=0)
    with pytest.raises(RuntimeError, match=r"oreg_ccl: \w+: unsupported operation"):
        dist.reduce(torch.ones(1).expand(3), dst=0)
    # A PREMUL_SUM factor on another device than the reduced tensor.
    factor = torch.tensor([2.0], device=torch.device("openreg", rank))
    with pytest.raises(ValueError, match="factor is on openreg"):
        dist.all_reduce(torch.ones(2), op=dist._make_nccl_premul_sum(factor))
    # A complex (or integer) PREMUL_SUM factor: the worker reads it as a double.
    for factor in (torch.tensor(1j), torch.tensor(2)):
        with pytest.raises(ValueError, match="factor must be a floating tensor"):
            dist.all_reduce(torch.ones(2, dtype=torch.complex64),
                            op=dist._make_nccl_premul_sum(factor))
    # all_to_all_single's own block: 2 elements sent to itself, 1 expected.
    with pytest.raises(ValueError, match="sends itself"):
        dist.all_to_all_single(torch.empty(n + 1), torch.ones(n + 1),
                               [1 if p == rank else 2 if p == (rank + 1) % n else 1 for p in range(n)],
                               [2 if p == rank else 1 for p in range(n)])
    # In-place all-gather / reduce-scatter alias only this rank's block (NCCL's
    # in-place form, which works); another overlap is refused at the call (a
    # peer could read the block after it was overwritten).
    buf = torch.zeros(4 * n)
    buf[4 * rank:4 * rank + 4] = rank + 1.0
    dist.all_gather_into_tensor(buf, buf[4 * rank:4 * rank + 4])
    assert buf.tolist() == [float(r + 1) for r in range(n) for _ in range(4)]
    dist.reduce_scatter_tensor(buf[4 * rank:4 * rank + 4], buf)
    assert buf[4 * rank:4 * rank + 4].tolist() == [float(n * (rank + 1))] * 4
    other = (rank + 1) % n
    with pytest.raises(ValueError, match="overlaps the output other than as block"):
        dist.all_gather_into_tensor(buf, buf[4 * other:4 * other + 4])
    with pytest.raises(ValueError, match="overlaps the input other than as block"):
        dist.reduce_scatter_tensor(buf[4 * other:4 * other + 4], buf)
    # The default group is still healthy.
    t = torch.ones(3)
    dist.all_reduce(t)
    assert t.tolist() == [float(n)] * 3
    # Shapes may differ where element counts and dtypes agree (NCCL and gloo allow it).
    t = torch.ones((2, 3) if rank == 0 else (6,))
    dist.all_reduce(t)
    assert t.flatten().tolist() == [float(n)] * 6


def test_mismatched_calls_and_bad_input(tmp_path):
    spawn(mismatches, 2, tmp_path)


def device_collective_failure(rank, n):
    # A collective on openreg tensors that fails on the worker fails the
    # caller's stream (its wait for the collective): the later call that
    # reports it raises DistBackendError, as c10d reports a failed collective,
    # with the message and without a C++ backtrace.
    dev = torch.device("openreg", rank)
    torch.openreg.set_device(dev)
    t = torch.ones(4 + rank, device=dev)  # sizes differ across ranks
    with pytest.raises(dist.DistBackendError, match="mismatched collectives") as caught:
        dist.all_reduce(t)  # raises here if it failed before wait(), else below
        torch.openreg.synchronize()
    assert "frame #" not in str(caught.value), str(caught.value)
    os._exit(0)  # skip destroy: the group is broken


def test_failed_device_collective_raises_dist_backend_error(tmp_path):
    spawn(device_collective_failure, 2, tmp_path)


def device_future_failure(rank, n, chained):
    # A collective's future on openreg tensors is complete at get_future(), as
    # NCCL's, and carries no error: a later failure of the collective raises
    # from the work and from the group's next call, and spills onto no stream
    # (the future's consumers run on the shared pool streams).
    dev = torch.device("openreg", rank)
    torch.openreg.set_device(dev)
    t = torch.ones(4 + rank, device=dev)  # sizes differ across ranks
    if rank == 1:
        time.sleep(0.3)  # rank 0 takes its future before the collective fails
    try:
        work = dist.all_reduce(t, async_op=True)
        fut = work.get_future()
    except dist.DistBackendError as e:  # rank 1 may see the mismatch at issue
        assert "mismatched collectives" in str(e), str(e)
    else:
        if chained:
            fut = fut.then(lambda f: f.value()[0] * 2)
        try:
            fut.wait()
        except Exception as e:  # only a work that failed before get_future()
            assert "mismatched collectives" in str(e), str(e)
        with pytest.raises(dist.DistBackendError, match="mismatched collectives"):
            while not work.is_completed():
                time.sleep(0.01)
            work.wait()
    with pytest.raises(dist.DistBackendError):
        dist.all_reduce(torch.ones(2, device=dev))
    for _ in range(2 * 4):  # every pool stream, of both priorities
        for priority in (0, -1):
            with torch.openreg.stream(torch.openreg.Stream(priority=priority)):
                assert torch.equal((torch.ones(3, device=dev) + 1).cpu(), torch.full((3,), 2.0))
    torch.openreg.synchronize()
    os._exit(0)  # skip destroy: the group is broken


@pytest.mark.parametrize("chained", [False, True])
def test_failed_collective_behind_a_device_future(tmp_path, chained):
    spawn(device_future_failure, 2, tmp_path, chained)


def bound_device_mixup(rank, n):
    # Bound to openreg:rank (device_id), a tensor on another device is a
    # mix-up: DistBackendError at the call, as NCCL raises; nothing is sent,
    # so the group goes on.
    other = torch.device("openreg", (rank + 2) % 4)
    with pytest.raises(dist.DistBackendError, match="not on device passed to init_process_group"):
        dist.all_reduce(torch.ones(4, device=other))
    out = [torch.empty(2, device=other) for _ in range(n)]
    with pytest.raises(dist.DistBackendError, match="not on device passed to init_process_group"):
        dist.all_gather(out, torch.ones(2, device=other))
    t = torch.ones(4, device=torch.device("openreg", rank))
    dist.all_reduce(t)
    assert t.cpu().tolist() == [float(n)] * 4
    dist.all_reduce(torch.ones(2))  # CPU tensors are not bound


def test_tensor_on_another_device_than_device_id(tmp_path):
    spawn(bound_device_mixup, 2, tmp_path, init={"device_id": True})


def all_reduce_until_the_clash(t):
    # The rank that publishes its device last finds the clash; the other learns of it later.
    for _ in range(3):
        dist.all_reduce(t)
    torch.openreg.synchronize()


def shared_device(rank, n, hosts):
    # No set_device: every rank's "openreg" is openreg:0. On one host that is
    # two ranks on one GPU, which NCCL refuses; on two hosts it is fine.
    t = torch.ones(4, device="openreg")
    if hosts == 2 or os.environ.get("OREG_CCL_DEVICE_CHECK") == "0":
        dist.all_reduce(t)
        assert t.cpu().tolist() == [2.0] * 4
        return

    start = time.monotonic()
    expect_dist_error(lambda: all_reduce_until_the_clash(t), "Duplicate device detected",
                      "both on openreg:0", "set_device(local_rank)")
    assert time.monotonic() - start < 10  # not the 30 s timeout
    os._exit(0)  # skip destroy: the group is broken


@pytest.mark.parametrize("hosts,check", [(1, "1"), (2, "1"), (1, "0")],
                         ids=["one-host", "two-hosts", "check-off"])
def test_two_ranks_of_a_host_on_one_device(tmp_path, hosts, check):
    spawn(shared_device, 2, tmp_path, hosts, host_of=(0, 1) if hosts == 2 else None,
          env={"OREG_CCL_DEVICE_CHECK": check})


def device_zero_of_its_own(rank, n, same):
    # Each rank's openreg:0 (OPENREG_VISIBLE_DEVICES, as CUDA_VISIBLE_DEVICES=$LOCAL_RANK setups
    # give each rank cuda:0): distinct physical devices are no clash; the same one is.
    assert torch.openreg.device_count() == 1
    t = torch.ones(4, device="openreg:0")
    if not same:
        dist.all_reduce(t)
        assert t.cpu().tolist() == [2.0] * 4
        return
    expect_dist_error(lambda: all_reduce_until_the_clash(t), "Duplicate device detected",
                      "both on openreg:0 (physical device 3)")
    os._exit(0)  # skip destroy: the group is broken


@pytest.mark.parametrize("visible", ["{rank}", "3"], ids=["distinct", "same"])
def test_ranks_told_apart_by_physical_device(tmp_path, visible):
    spawn(device_zero_of_its_own, 2, tmp_path, visible == "3",
          env={"OPENREG_VISIBLE_DEVICES": visible})


def timeouts(rank, n):
    g = dist.new_group(list(range(n)), timeout=datetime.timedelta(seconds=2))
    if rank == 0:
        start = time.monotonic()
        expect_dist_error(lambda: dist.all_reduce(torch.ones(3), group=g), "Timed out")
        assert 1.5 < time.monotonic() - start < 10
        dist.distributed_c10d._get_default_store().set("rank 0 timed out", "")
    else:
        # Never joins that collective (a sleep could end before rank 0's
        # timeout on a busy runner); learns about the failure.
        dist.distributed_c10d._get_default_store().wait(["rank 0 timed out"])
        expect_dist_error(lambda: dist.all_reduce(torch.ones(3), group=g), "Timed out")
    # A per-call timeout (barrier's option) is honoured as well.
    g2 = dist.new_group(list(range(n)))
    if rank == 0:
        start = time.monotonic()
        w = dist.all_reduce(torch.ones(3), group=g2, async_op=True)
        expect_dist_error(lambda: w.wait(datetime.timedelta(seconds=1)), "did not complete")
        assert time.monotonic() - start < 5
    dist.barrier()
    if rank == 1:
        dist.all_reduce(torch.ones(3), group=g2)  # the late peer completes it


def test_timeouts(tmp_path):
    spawn(timeouts, 2, tmp_path)


def bad_setting(rank, n, tmp, name):
    with pytest.raises(ValueError, match=f"{name} must be a non-negative integer, got 'x1'"):
        dist.init_process_group("oreg_ccl", init_method=f"file://{tmp}/store", rank=rank,
                                world_size=n, timeout=datetime.timedelta(seconds=30))


@pytest.mark.parametrize("name", ["OREG_CCL_RING_BYTES", "OREG_CCL_SPIN_US"])
def test_malformed_setting_is_a_value_error_naming_it(tmp_path, name):
    spawn(bad_setting, 2, tmp_path, str(tmp_path), name, init=False, env={name: "x1"})


def killed(rank, n):
    t = torch.ones(2)
    dist.all_reduce(t)
    if rank == n - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    expect_dist_error(lambda: dist.all_reduce(torch.ones(2)), "exited")
    assert time.monotonic() - start < 10
    # Segments were unlinked at connect time: nothing of this job in /dev/shm.
    assert not shm_objects([os.getpid()])
    os._exit(0)  # skip destroy: the group is broken


def test_dead_peer_is_detected_and_shm_is_clean(tmp_path):
    spawn(killed, 3, tmp_path, expect_exit={2: -signal.SIGKILL})


def killed_mid_transfer(rank, n, victim, how):
    # 64 MiB broadcasts (or sends) from rank 1 travel single-copy where the
    # kernel allows it: rank 0 reads them out of rank 1's memory. The victim
    # dies (timer thread) while that is going on.
    info = info_of()
    assert info["single_copy"] == single_copy_allowed()
    t = torch.ones(16 << 20)

    def transfer():
        if how == "broadcast":
            dist.broadcast(t, src=1)
        elif rank == 1:
            dist.send(t, 0)
        else:
            dist.recv(t, 1)
    transfer()
    if rank == victim:
        threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    start = time.monotonic()

    def loop():
        while time.monotonic() - start < 30:
            transfer()
    msg = expect_dist_error(loop, f"rank {victim}")
    assert "exited" in msg or "cannot read" in msg, msg
    assert time.monotonic() - start < 10
    assert not shm_objects([os.getpid()])
    os._exit(0)


@pytest.mark.parametrize("how", ["broadcast", "send_recv"])
@pytest.mark.parametrize("victim", [0, 1], ids=["receiver", "sender"])
def test_peer_killed_during_single_copy_transfer(tmp_path, victim, how):
    spawn(killed_mid_transfer, 2, tmp_path, victim, how, expect_exit={victim: -signal.SIGKILL})


def lifecycle(rank, n):
    g = dist.new_group(list(range(n)))
    t = torch.ones(2, device=torch.device("openreg", rank))
    dist.all_reduce(t, group=g)
    backend = g._get_backend(torch.device("openreg"))
    assert backend.supports_splitting and backend.supports_coalescing
    backend.shutdown()
    backend.shutdown()  # idempotent
    backend.abort()
    expect_dist_error(lambda: dist.all_reduce(t, group=g), "shut down")
    dist.destroy_process_group(g)
    # abort a group with an operation stuck waiting for a peer: returns promptly.
    g = dist.new_group(list(range(n)))
    if rank == 0:
        w = dist.all_reduce(torch.ones(2), group=g, async_op=True)
        start = time.monotonic()
        dist.distributed_c10d._abort_process_group(g)
        assert time.monotonic() - start < 5
        expect_dist_error(w.wait)
    dist.barrier()


def test_shutdown_and_abort(tmp_path):
    spawn(lifecycle, 2, tmp_path)


def destroy_from_own_callback(rank, n, kind, keep_backend):
    # A future callback that rank 0's worker runs (its peer comes late, so the
    # operation is still running when then() is attached) destroys the group,
    # which must neither stall (the worker cannot join itself) nor fail the
    # callback, nor crash when the group's last reference goes in there. An
    # operation queued behind it still completes, as at any shutdown().
    box = [dist.new_group(list(range(n)))]
    backend = box[0]._get_backend(torch.device("cpu")) if keep_backend else None
    if rank == 1:
        time.sleep(0.5)
    if kind == "collective":
        first, second = torch.full((4,), rank + 1.0), torch.full((4,), 10.0 * (rank + 1))
        w1 = dist.all_reduce(first, group=box[0], async_op=True)
        w2 = dist.all_reduce(second, group=box[0], async_op=True)
    else:
        first = torch.full((4,), float(rank))
        peer = 1 - rank
        w1 = (dist.irecv(first, src=peer, group=box[0]) if rank == 0
              else dist.isend(first, dst=peer, group=box[0]))
        w2 = None
    ran_on = []

    def callback(fut):
        ran_on.append(threading.get_ident())
        dist.destroy_process_group(box.pop())
        return fut.value()

    start = time.monotonic()
    w1.get_future().then(callback).wait()
    if w2 is not None:
        w2.wait()
        assert second.tolist() == [30.0] * 4, second
    assert time.monotonic() - start < 5, time.monotonic() - start
    # all_reduce: 1 + 2; p2p: rank 0 received rank 1's ones, rank 1 sent them
    assert first.tolist() == ([3.0] * 4 if kind == "collective" else [1.0] * 4), first
    if rank == 0:  # its peer came late: the worker ran the callback
        assert ran_on and ran_on[0] != threading.get_ident(), ran_on
    if backend is not None:
        expect_dist_error(lambda: backend.allreduce([torch.ones(1)]).wait(), "shut down")
    gc.collect()  # the group's last references, if not kept
    dist.barrier()


@pytest.mark.parametrize("kind", ["collective", "p2p"])
@pytest.mark.parametrize("keep_backend", [False, True], ids=["dropped", "kept"])
def test_destroy_from_a_callback_of_the_groups_own_operation(tmp_path, kind, keep_backend):
    spawn(destroy_from_own_callback, 2, tmp_path, kind, keep_backend)


def shutdown_during_p2p(rank, n):
    g = dist.new_group(list(range(n)))
    backend = g._get_backend(torch.device("cpu"))
    outcome = []

    def pump():
        # Host-tensor sends and receives, posted on this thread while the
        # group is idle, racing shutdown() on the main thread.
        t, r = torch.ones(64), torch.empty(64)
        try:
            for _ in range(1_000_000):
                s, v = backend.send([t], 1 - rank, 7), backend.recv([r], 1 - rank, 7)
                s.wait()
                v.wait()
            outcome.append("finished")
        except dist.DistBackendError as e:
            outcome.append(e)

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    time.sleep(0.3)
    backend.shutdown()
    thread.join(timeout=15)
    assert not thread.is_alive(), "send/recv still blocked 15 s after shutdown()"
    assert len(outcome) == 1 and isinstance(outcome[0], dist.DistBackendError), outcome
    assert "shut down" in str(outcome[0]) or "failed" in str(outcome[0]), str(outcome[0])
    dist.destroy_process_group(g)
    dist.barrier()


def test_shutdown_while_another_thread_sends(tmp_path):
    spawn(shutdown_during_p2p, 2, tmp_path)


def shutdown_before_large_send_is_read(rank, n):
    # A send too large for the p2p ring is read by the receiver straight out
    # of the sender's tensor (single copy), once the receiver posts its recv.
    # The sender shuts its group down first and reuses the tensor: the late
    # receive must fail, not deliver what the tensor holds by then.
    assert info_of()["single_copy"] == single_copy_allowed()
    g = dist.new_group(list(range(n)))
    backend = g._get_backend(torch.device("cpu"))
    t = torch.ones(1 << 20)  # 4 MiB
    if rank == 0:
        work = backend.send([t], 1, 3)
        backend.shutdown()
        t.fill_(7)
        expect_dist_error(work.wait, "shut down")
    dist.barrier()  # on the default group: the receiver starts only now
    if rank == 1:
        r = torch.zeros(1 << 20)
        expect_dist_error(lambda: backend.recv([r], 0, 3).wait(), "rank 0")
        assert not r.eq(7).any(), "the receive read the sender's reused tensor"
    dist.barrier()


def test_shutdown_before_a_large_send_was_read(tmp_path):
    spawn(shutdown_before_large_send_is_read, 2, tmp_path)


def kernel_failed_before_collective(rank, n, tmp):
    # An out-of-range index fails its kernel asynchronously on rank 0's stream;
    # the stream then skips everything after it (sticky, as CUDA's errors), so
    # the all_reduce queued behind it can never start. Every rank must learn
    # that quickly, not after the 60 s group timeout.
    dev = torch.device("openreg", rank)
    torch.openreg.set_device(rank)
    x = torch.ones(4, device=dev)
    if rank == 0:
        x[torch.tensor([10], device=dev)]  # raises later, on the stream
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="launch failure|failed asynchronously|cannot start"):
        # Rank 0: raises here if its stream failed before the launch, or if the
        # worker already failed the all_reduce for it ("cannot start") when
        # wait() ran, else at synchronize(); rank 1: its stream's hold on the
        # failed all_reduce.
        dist.all_reduce(x)
        torch.openreg.synchronize()
    assert time.monotonic() - start < 15, time.monotonic() - start
    done = os.path.join(tmp, "rank1-done")
    if rank == 1:
        expect_dist_error(lambda: dist.all_reduce(torch.ones(2)), "rank 0", "cannot start")
        open(done, "w").close()
    else:  # alive until rank 1 is done: its exit must not be what rank 1 notices
        deadline = time.monotonic() + 90
        while not os.path.exists(done) and time.monotonic() < deadline:
            time.sleep(0.05)
    os._exit(0)  # skip destroy: the group is broken


def test_kernel_failure_before_a_collective_fails_the_group(tmp_path):
    spawn(kernel_failed_before_collective, 2, tmp_path, str(tmp_path), pg_timeout=60)


def aliased_tensors(rank, n):
    # A tensor that is both an output of this rank and an input of the call
    # for another rank: the result is as if the inputs were read at the call.
    dev = torch.device("openreg", rank)
    for device, numel in (("cpu", 1 << 10), ("cpu", 1 << 16), ("cpu", 1 << 20), (dev, 1 << 20)):
        # scatter(t, [x, t]) on root 0: rank 1 gets t as it was at the call
        # (from 256 KiB the peer reads its block straight from the root's memory).
        t = torch.full((numel,), 10.0 + rank, device=device)
        x = torch.full((numel,), 1.0, device=device)
        dist.scatter(t, scatter_list=[x, t] if rank == 0 else None, src=0)
        assert t.unique().tolist() == [1.0 if rank == 0 else 10.0], (device, numel, t.unique())
    # Uneven all_gather whose input lies in another rank's output.
    big = torch.zeros(8)
    outs = [big[0:3], big[3:8]]
    inp = torch.full((3,), 1.0) if rank == 0 else big[0:5].fill_(2.0)
    dist.all_gather(outs, inp)
    assert [o.tolist() for o in outs] == [[1.0] * 3, [2.0] * 5], outs


def test_outputs_that_are_inputs_of_another_rank(tmp_path):
    spawn(aliased_tensors, 2, tmp_path)


def abandoned_coalescing_block(rank, n):
    # An error inside c10d's coalescing manager: raised when the block ends
    # (c10d's manager is not exception-safe, see send()); the group stays
    # usable, and a block abandoned by an exception does not spoil the next.
    dev = torch.device("openreg", rank)
    torch.openreg.set_device(dev)
    with pytest.raises(RuntimeError, match=r"oreg_ccl: \w+: unsupported operation"):
        with dist._coalescing_manager(device=dev):
            dist.all_reduce(torch.ones(1, device=dev).expand(4))  # internal overlap: refused
    t = torch.ones(3, device=dev)
    dist.all_reduce(t)
    assert t.cpu().tolist() == [float(n)] * 3
    # A block left by an exception never ends in the backend. (c10d's own state
    # then queues a plain collective into the block until the next block: only
    # a block follows here.)
    with pytest.raises(ValueError, match="abandoned"):
        with dist._coalescing_manager(device=dev):
            raise ValueError("abandoned")
    a, b = torch.ones(2, device=dev), torch.full((2,), 2.0, device=dev)
    with dist._coalescing_manager(device=dev):
        dist.all_reduce(a)
        dist.all_reduce(b)
    assert a.cpu().tolist() == [float(n)] * 2 and b.cpu().tolist() == [2.0 * n] * 2


def test_error_inside_a_coalescing_block(tmp_path):
    spawn(abandoned_coalescing_block, 2, tmp_path)


def stderr_of(fn):
    # C++ warnings (TORCH_WARN outside a Python call's warning handler) go to fd 2.
    with tempfile.TemporaryFile() as log:
        saved = os.dup(2)
        os.dup2(log.fileno(), 2)
        try:
            fn()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        log.seek(0)
        return log.read().decode()


def roots_named_apart(rank, n, collective, hosts):
    # Every rank names itself the root of a small broadcast (scatter): nothing
    # waits for the root, so each returns at once, keeping its own data (NCCL
    # hangs, gloo times out). The stale messages mismatch at the group's next
    # collective; a group destroyed first says so in a warning at shutdown
    # (c10d's destroy_process_group cannot take an error from a backend).
    healthy = dist.new_group(list(range(n)))
    g = dist.new_group(list(range(n)))
    t = torch.full((256,), float(rank))
    if collective == "broadcast":
        dist.broadcast(t, src=rank, group=g)
    else:
        dist.scatter(t, [torch.full((256,), 10.0 + rank)] * n, src=rank, group=g)
    assert t[0].item() == (rank if collective == "broadcast" else 10.0 + rank)
    dist.all_reduce(torch.ones(1), group=healthy)
    dist.barrier()  # every rank has sent its part
    if hosts:
        time.sleep(1)  # over TCP, on another connection than the barrier's
    assert "without receiving" not in stderr_of(lambda: dist.destroy_process_group(healthy))
    log = stderr_of(lambda: dist.destroy_process_group(g))
    peer = 1 - rank
    assert (f"rank {rank}: the process group was shut down without receiving rank {peer}'s "
            f"{collective}#0 256 x Float root {peer} (1024 bytes)") in log, log


@pytest.mark.parametrize("hosts", [False, True], ids=["one-host", "two-hosts"])
@pytest.mark.parametrize("collective", ["broadcast", "scatter"])
def test_roots_named_apart_are_reported_at_shutdown(tmp_path, collective, hosts):
    spawn(roots_named_apart, 2, tmp_path, collective, hosts, host_of=(0, 1) if hosts else None)


def send_never_received(rank, n, hosts):
    # A small send completes before it is matched (batch_isend_irecv issues its
    # sends one after another), so rank 0's second send, which no receive
    # matches, returns at once: the receiver says so when its group shuts down
    # (gloo times out at the sender, NCCL hangs).
    g = dist.new_group(list(range(n)))
    x, y = torch.full((2,), 7.0), torch.zeros(2)
    if rank == 0:
        ops = [dist.P2POp(dist.isend, x, 1, g), dist.P2POp(dist.isend, x, 1, g)]
    else:
        ops = [dist.P2POp(dist.irecv, y, 0, g)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    assert rank == 0 or y.tolist() == [7.0, 7.0]
    dist.barrier()  # rank 0's sends were made
    if hosts:
        time.sleep(1)  # over TCP, on another connection than the barrier's
    log = stderr_of(lambda: dist.destroy_process_group(g))
    if rank == 0:
        assert "without receiving" not in log, log
    else:
        assert ("rank 1: the process group was shut down without receiving rank 0's send" in log
                and "(8 bytes): no receive matched that send" in log), log


@pytest.mark.parametrize("hosts", [False, True], ids=["one-host", "two-hosts"])
def test_a_send_never_received_is_reported_at_shutdown(tmp_path, hosts):
    spawn(send_never_received, 2, tmp_path, hosts, host_of=(0, 1) if hosts else None)


def bad_split_ranks(rank, n):
    for ranks, why in (([0, 5], "rank 5 is not in the parent group"),
                       ([-1, 0], "rank -1 is not in the parent group")):
        start = time.monotonic()
        with pytest.raises(ValueError, match=why):
            dist.split_group(split_ranks=[ranks], timeout=datetime.timedelta(seconds=20))
        assert time.monotonic() - start < 5
    sub = dist.split_group(split_ranks=[list(range(n))])
    t = torch.ones(2, device=torch.device("openreg", rank))
    dist.all_reduce(t, group=sub)
    assert t.cpu().tolist() == [float(n)] * 2


def test_split_group_with_ranks_outside_the_parent(tmp_path):
    spawn(bad_split_ranks, 2, tmp_path, init={"device_id": True})


def timeout_bounds(rank, n, tmp):
    with pytest.raises(ValueError, match="oreg_ccl: invalid timeout -5000 ms"):
        dist.init_process_group("oreg_ccl", init_method=f"file://{tmp}/store0", rank=rank,
                                world_size=n, timeout=datetime.timedelta(seconds=-5))
    # A timeout of a thousand years: no deadline wraps around into the past.
    dist.init_process_group("oreg_ccl", init_method=f"file://{tmp}/store1", rank=rank,
                            world_size=n, timeout=datetime.timedelta(days=365 * 1000))
    t = torch.ones(2)
    dist.all_reduce(t)
    assert t.tolist() == [float(n)] * 2


def test_negative_and_huge_group_timeouts(tmp_path):
    spawn(timeout_bounds, 2, tmp_path, str(tmp_path), init=False)


def options_timeout(rank, n):
    import warnings
    import openreg

    ranks = list(range(n))
    # As NCCL's: the timeout argument (which has a default) wins, with NCCL's warning.
    opts = openreg._C._OregCCLOptions(timeout=datetime.timedelta(seconds=9))
    with pytest.warns(UserWarning, match="timeout kwarg has a default value that will always override"):
        g = dist.new_group(ranks, pg_options=opts)
    t = torch.ones(2)
    dist.all_reduce(t, group=g)
    assert t.tolist() == [float(n)] * 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dist.new_group(ranks, timeout=datetime.timedelta(seconds=9), pg_options=opts)


def test_a_timeout_in_pg_options_gives_way_to_the_timeout_argument(tmp_path):
    spawn(options_timeout, 2, tmp_path)
