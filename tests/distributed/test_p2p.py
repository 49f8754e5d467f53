"""send / recv / recv from any source, tags, batch_isend_irecv."""
import os
import time

import pytest
import torch
import torch.distributed as dist

from _harness import spawn

BIG = 1 << 20  # 4 MiB of float32: far larger than a send/recv ring


def p2p(rank, n, any_source=True):
    for device in [torch.device("cpu"), torch.device("openreg", rank)]:
        nxt, prv = (rank + 1) % n, (rank - 1) % n
        # A ring where every rank sends first: sends must not wait for their receive.
        out = torch.full((BIG,), float(rank), device=device)
        inp = torch.empty(BIG, device=device)
        s = dist.isend(out, nxt)
        r = dist.irecv(inp, prv)
        s.wait()
        r.wait()
        assert torch.equal(inp.cpu(), torch.full((BIG,), float(prv)))
        # batch_isend_irecv in both directions at once, non-contiguous receive.
        to_next = torch.arange(12, dtype=torch.int64, device=device).view(3, 4) + 100 * rank
        from_prev = torch.empty(4, 3, dtype=torch.int64, device=device).t()
        ops = [dist.P2POp(dist.isend, to_next, nxt), dist.P2POp(dist.irecv, from_prev, prv)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        assert torch.equal(from_prev.cpu(), torch.arange(12).view(3, 4) + 100 * prv)
        # Tags matched out of order.
        if rank == 0:
            dist.send(torch.full((3,), 1.0, device=device), 1, tag=1)
            dist.send(torch.full((3,), 2.0, device=device), 1, tag=2)
        elif rank == 1:
            b, a = torch.empty(3, device=device), torch.empty(3, device=device)
            wb = dist.irecv(b, 0, tag=2)
            wa = dist.irecv(a, 0, tag=1)
            wb.wait()
            wa.wait()
            assert b.cpu().tolist() == [2.0] * 3 and a.cpu().tolist() == [1.0] * 3
        # The same with messages larger than the p2p ring (single copy between
        # ranks of a host): the first is read into host memory until its
        # receive is posted.
        if rank == 0:
            w1 = dist.isend(torch.full((BIG,), 1.0, device=device), 1, tag=1)
            w2 = dist.isend(torch.arange(BIG, dtype=torch.float32, device=device), 1, tag=2)
            w1.wait()
            w2.wait()
        elif rank == 1:
            b, a = torch.empty(BIG, device=device), torch.empty(BIG, device=device)
            dist.recv(b, 0, tag=2)
            dist.recv(a, 0, tag=1)
            assert torch.equal(b.cpu(), torch.arange(BIG, dtype=torch.float32))
            assert torch.equal(a.cpu(), torch.full((BIG,), 1.0))
        # recv from any source reports the sender.
        if rank == 0 and any_source:
            seen = set()
            for _ in range(n - 1):
                t = torch.empty(2, device=device)
                src = dist.recv(t)
                assert t.cpu().tolist() == [float(src)] * 2
                seen.add(src)
            assert seen == set(range(1, n))
        elif any_source:
            dist.send(torch.full((2,), float(rank), device=device), 0)
        # Empty messages and bfloat16.
        if n > 1:
            e = torch.empty(0, dtype=torch.bfloat16, device=device)
            if rank == 0:
                dist.send(torch.ones(5, dtype=torch.bfloat16, device=device), 1)
                dist.send(e, 1)
            elif rank == 1:
                x = torch.empty(5, dtype=torch.bfloat16, device=device)
                dist.recv(x, 0)
                dist.recv(e, 0)
                assert x.cpu().tolist() == [1.0] * 5
        dist.barrier()


def test_send_recv(tmp_path):
    spawn(p2p, 3, tmp_path)


def host_p2p_inline(rank, n):
    peer = 1 - rank
    dist.barrier()
    if rank == 0:
        w = dist.isend(torch.arange(8.0), 1)
        # An idle group posts a host-tensor send on the caller's thread: one
        # that fits the ring is complete before isend returns.
        assert w.is_completed()
        w.wait()
    else:
        got = torch.empty(8)
        dist.recv(got, 0)
        assert torch.equal(got, torch.arange(8.0))
    # Receives in flight (driven by the worker) while more sends are posted,
    # matched by tag in reverse order, and a collective queued behind them.
    bufs = [torch.empty(4) for _ in range(20)]
    recvs = [dist.irecv(bufs[k], peer, tag=k) for k in range(20)]
    sends = [dist.isend(torch.full((4,), 100.0 * rank + k), peer, tag=k) for k in reversed(range(20))]
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    assert total.item() == 3.0
    for w in sends + recvs:
        w.wait()
    for k in range(20):
        assert bufs[k].tolist() == [100.0 * peer + k] * 4


def test_host_p2p_inline_and_in_flight(tmp_path):
    spawn(host_p2p_inline, 2, tmp_path)


def mixed_device_batch(rank, n):
    # One batch with a CPU and an openreg receive: wait() must cover the CPU
    # one on the host (the openreg one alone would only hold the stream).
    import time

    dev = torch.device("openreg", rank)
    torch.openreg.set_device(dev)
    peer = 1 - rank
    if rank == 0:
        time.sleep(0.5)  # the receiver waits before anything was sent
        ops = [dist.P2POp(dist.isend, torch.full((3,), 7.0), peer),
               dist.P2POp(dist.isend, torch.full((3,), 8.0, device=dev), peer)]
    else:
        cpu, on_dev = torch.zeros(3), torch.zeros(3, device=dev)
        ops = [dist.P2POp(dist.irecv, cpu, peer), dist.P2POp(dist.irecv, on_dev, peer)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    if rank == 1:
        assert torch.equal(cpu, torch.full((3,), 7.0)), cpu  # read at once, no sync
        assert torch.equal(on_dev.cpu(), torch.full((3,), 8.0))


def test_batch_mixing_cpu_and_openreg_tensors(tmp_path):
    spawn(mixed_device_batch, 2, tmp_path, timeout=60)


def raises_at_wait(works, what, *fragments):
    """Waiting for `works` raises (ValueError or RuntimeError, as the op's check
    raises at the call outside a batch) with every fragment in its message."""
    try:
        for w in works:
            w.wait()
    except (ValueError, RuntimeError) as e:
        assert all(f in str(e) for f in fragments), e
    else:
        raise AssertionError(f"{what} did not raise")


def bad_op_in_batch(rank, n):
    # An invalid op inside batch_isend_irecv (here: a negative tag) raises at
    # wait(), after c10d's coalescing block closed: raised inside it, the error
    # would leave the process group coalescing and later collectives no-ops.
    peer = 1 - rank
    ops = [dist.P2POp(dist.isend, torch.ones(2), peer, tag=-1),
           dist.P2POp(dist.isend, torch.ones(2), peer),
           dist.P2POp(dist.irecv, torch.zeros(2), peer)]
    raises_at_wait(dist.batch_isend_irecv(ops), "a negative tag", "Tag must be nonnegative")
    t = torch.ones(3)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((3,), 2.0)), t
    got = torch.zeros(2)
    for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.full((2,), 5.0), peer),
                                     dist.P2POp(dist.irecv, got, peer)]):
        w.wait()
    assert torch.equal(got, torch.full((2,), 5.0))


def test_invalid_op_in_a_batch_raises_at_wait(tmp_path):
    spawn(bad_op_in_batch, 2, tmp_path, timeout=60, pg_timeout=15)


def batch_over_two_devices(rank, n):
    # One batch whose tensors sit on two openreg devices: its wait() can order
    # only one device's stream, so (as NCCL) such a batch is refused; raised at
    # wait(), after c10d's coalescing block closed (see bad_op_in_batch).
    peer = 1 - rank
    send_dev, recv_dev = torch.device("openreg", 2 * rank + 1), torch.device("openreg", 2 * rank)
    ops = [dist.P2POp(dist.isend, torch.full((16,), rank + 1.0, device=send_dev), peer),
           dist.P2POp(dist.irecv, torch.zeros(16, device=recv_dev), peer)]
    raises_at_wait(dist.batch_isend_irecv(ops), "a batch over two devices",
                   "all tensors must be on one device", f"openreg:{2 * rank + 1} and openreg:{2 * rank}")
    t = torch.ones(3, device=recv_dev)
    dist.all_reduce(t)
    assert torch.equal(t.cpu(), torch.full((3,), 2.0)), t


def test_a_batch_over_two_devices_raises_at_wait(tmp_path):
    spawn(batch_over_two_devices, 2, tmp_path, timeout=60, pg_timeout=15)


def collective_waited_in_p2p_callback(rank, n):
    # A send's or receive's future callback runs on the worker thread that
    # completes it (the caller's, for a send posted inline); one that waits
    # there for a collective the same worker has yet to run raises at once
    # instead of hanging, and the collective still runs after the callback.
    t = torch.ones(4)
    work = dist.isend(t, 1) if rank == 0 else dist.irecv(t, 0)
    results = []

    def callback(fut):
        x = torch.ones(2)
        dist.all_reduce(x)
        results.append(x)
        return x

    chained = work.get_future().then(callback)
    try:
        chained.wait()
    except RuntimeError as e:
        assert "waited for inside a callback that the process group's worker thread runs" in str(e), e
    if results:
        assert torch.equal(results[0], torch.full((2,), 2.0))
    dist.barrier()  # both ranks' all_reduce ran: the group is in step


def test_waiting_for_a_collective_in_a_p2p_callback_does_not_hang(tmp_path):
    spawn(collective_waited_in_p2p_callback, 2, tmp_path, timeout=60, pg_timeout=10)


def send_then_destroy(rank, n, device, numel):
    # NCCL's pattern: send a final result, wait for the send (on an openreg
    # stream that does not block the host), destroy the group. The send must
    # still reach a receiver that posts later (shutdown() waits for it, bounded),
    # from the ring or, above the single-copy size, out of the sender's tensor.
    dev = torch.device(device, rank) if device == "openreg" else torch.device("cpu")
    g = dist.new_group(list(range(n)))
    if rank == 0:
        x = torch.arange(numel, dtype=torch.float32, device=dev)
        dist.isend(x, 1, group=g).wait()
        dist.destroy_process_group(g)
        x.fill_(-1)  # the tensor is the sender's again
    else:
        time.sleep(0.5)
        r = torch.zeros(numel, device=dev)
        dist.recv(r, 0, group=g)
        assert torch.equal(r.cpu(), torch.arange(numel, dtype=torch.float32))
        dist.destroy_process_group(g)


@pytest.mark.parametrize("numel", [1000, 1 << 20], ids=["ring", "single-copy"])
@pytest.mark.parametrize("device", ["cpu", "openreg"])
def test_send_reaches_a_receiver_after_the_sender_destroyed_its_group(tmp_path, device, numel):
    spawn(send_then_destroy, 2, tmp_path, device, numel)


def sends_to_itself(rank, n, device):
    # NCCL allows a rank to send to itself (gloo refuses): an all-to-all
    # written as send/recv pairs over every rank, self included.
    dev = torch.device(device, rank) if device == "openreg" else torch.device("cpu")
    ins = [torch.full((100 * (p + 1),), float(rank * 10 + p), device=dev) for p in range(n)]
    outs = [torch.zeros(100 * (rank + 1), device=dev) for _ in range(n)]
    ops = []
    for p in range(n):
        ops.append(dist.P2POp(dist.isend, ins[p], p))
        ops.append(dist.P2POp(dist.irecv, outs[p], p))
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    for p in range(n):
        assert outs[p].cpu().eq(p * 10 + rank).all(), (p, outs[p][:4])
    # The receive first, and a message larger than any ring; tags keep pairs apart.
    x = torch.arange(BIG, dtype=torch.float32, device=dev)
    r, small = torch.zeros(BIG, device=dev), torch.zeros(2, device=dev)
    works = [dist.irecv(r, rank, tag=5), dist.irecv(small, rank, tag=6),
             dist.isend(torch.ones(2, device=dev), rank, tag=6), dist.isend(x, rank, tag=5)]
    for work in works:
        work.wait()
    assert torch.equal(r.cpu(), x.cpu()) and small.cpu().tolist() == [1.0, 1.0]
    dist.barrier()
    # An unmatched send to itself does not hold up a shutdown (nothing can
    # receive it once the group shuts down).
    g = dist.new_group(list(range(n)))
    pending = dist.isend(torch.ones(2, device=dev), rank, group=g)
    start = time.monotonic()
    dist.destroy_process_group(g)
    assert time.monotonic() - start < 5
    with pytest.raises(dist.DistBackendError, match="shut down"):
        pending.wait()
        torch.openreg.synchronize()
    # Sizes that differ fail the group, as between ranks.
    if n == 1:
        with pytest.raises(dist.DistBackendError, match="posted a recv of 16 bytes .* sent 12 bytes"):
            works = [dist.isend(torch.ones(3, device=dev), rank, tag=9),
                     dist.irecv(torch.ones(4, device=dev), rank, tag=9)]
            for work in works:
                work.wait()
            torch.openreg.synchronize()
        os._exit(0)  # skip destroy: the group is broken


@pytest.mark.parametrize("n,hosts", [(1, None), (2, None), (2, (0, 1))],
                         ids=["one-rank", "two-ranks", "two-hosts"])
@pytest.mark.parametrize("device", ["cpu", "openreg"])
def test_a_rank_sends_to_itself(tmp_path, device, n, hosts):
    spawn(sends_to_itself, n, tmp_path, device, host_of=hosts)
