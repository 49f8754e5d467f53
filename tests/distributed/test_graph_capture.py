"""oreg_ccl operations captured in a graph (torch.openreg.graph), as NCCL's
kernels in a CUDA graph: each replay runs them again on the replayed data, in
stream order, with fresh sequence numbers (csrc/c10d/CapturedOperations.cpp)."""
import datetime
import time

import pytest
import torch
import torch.distributed as dist

from _harness import spawn


def _device(rank):
    dev = torch.device("openreg", rank)
    torch.openreg.set_device(dev)
    return dev


def _side_stream(dev):
    s = torch.openreg.Stream(dev)
    s.wait_stream(torch.openreg.current_stream(dev))
    return s


def replays(rank, n):
    dev = _device(rank)
    x = torch.zeros(1000, device=dev)
    gathered = torch.zeros(n * 300, device=dev)
    block = torch.zeros(300, device=dev)
    scattered = torch.zeros(7, device=dev)
    rows = torch.zeros(n * 7, device=dev)
    root_value = torch.zeros(5, device=dev)
    g = torch.openreg.Graph()
    s = _side_stream(dev)
    with torch.openreg.stream(s):
        dist.all_reduce(x)  # eager first: the group's own set-up is not captured
        with torch.openreg.graph(g, stream=s):
            x.add_(1)
            dist.all_reduce(x)
            doubled = x * 2
            dist.all_gather_into_tensor(gathered, block)
            dist.reduce_scatter_tensor(scattered, rows, op=dist.ReduceOp.MAX)
            dist.broadcast(root_value, src=n - 1)
            work = dist.all_reduce(doubled, async_op=True)
            work.wait()
            plus_one = doubled + 1
    torch.openreg.current_stream(dev).wait_stream(s)
    # Capturing ran nothing.
    assert torch.count_nonzero(x.cpu()) == 0 and torch.count_nonzero(gathered.cpu()) == 0
    eager = torch.zeros(3, device=dev)
    for it in range(4):
        x.fill_(rank + it)
        block.fill_(10 * rank + it)
        rows.copy_(torch.arange(n * 7, dtype=torch.float32) * (rank + 1) + it)
        root_value.fill_(100 * rank + it)
        g.replay()
        # An eager collective issued between replays takes the next sequence
        # number on every rank: the replayed ones joined the queue at replay().
        eager.fill_(rank + 1)
        dist.all_reduce(eager)
        torch.openreg.synchronize()
        total = sum(r + it + 1 for r in range(n))
        assert torch.all(x.cpu() == total), (it, x[:3])
        assert torch.all(plus_one.cpu() == n * 2 * total + 1), (it, plus_one[:3])
        expected_gather = torch.cat([torch.full((300,), 10.0 * r + it) for r in range(n)])
        assert torch.equal(gathered.cpu(), expected_gather), it
        row_max = torch.arange(n * 7, dtype=torch.float32) * n + it
        assert torch.equal(scattered.cpu(), row_max[rank * 7:(rank + 1) * 7]), (it, scattered)
        assert torch.all(root_value.cpu() == 100 * (n - 1) + it), (it, root_value)
        assert torch.all(eager.cpu() == n * (n + 1) / 2)


@pytest.mark.parametrize("world_size", [2, 3])
def test_captured_collectives_run_again_at_each_replay(tmp_path, world_size):
    spawn(replays, world_size, tmp_path)


def point_to_point(rank, n):
    dev = _device(rank)
    t = torch.zeros(64 << 10, device=dev)  # 256 KiB: the single-copy path too
    g = torch.openreg.Graph()
    s = _side_stream(dev)
    with torch.openreg.stream(s):
        with torch.openreg.graph(g, stream=s):
            if rank == 0:
                dist.send(t * 3, 1)
            else:
                dist.recv(t, 0)
                t.add_(1)
    torch.openreg.current_stream(dev).wait_stream(s)
    for it in range(3):
        t.fill_(it + 1)
        g.replay()
        torch.openreg.synchronize()
        if rank == 1:
            assert torch.all(t.cpu() == 3 * (it + 1) + 1), (it, t[:3])


def test_captured_send_and_recv_run_again_at_each_replay(tmp_path):
    spawn(point_to_point, 2, tmp_path)


def batched_ring(rank, n):
    # batch_isend_irecv is one coalesced group: its sends and receives start
    # together at each replay (256 KiB: a send completes only once received).
    dev = _device(rank)
    mine = torch.zeros(64 << 10, device=dev)
    theirs = torch.zeros(64 << 10, device=dev)
    g = torch.openreg.Graph()
    s = _side_stream(dev)
    with torch.openreg.stream(s):
        with torch.openreg.graph(g, stream=s):
            ops = [dist.P2POp(dist.isend, mine, (rank + 1) % n),
                   dist.P2POp(dist.irecv, theirs, (rank - 1) % n)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()
            theirs.add_(1)
    torch.openreg.current_stream(dev).wait_stream(s)
    for it in range(3):
        mine.fill_(10 * rank + it)
        g.replay()
        torch.openreg.synchronize()
        assert torch.all(theirs.cpu() == 10 * ((rank - 1) % n) + it + 1), (it, theirs[:3])


@pytest.mark.parametrize("world_size", [2, 3])
def test_a_captured_batch_isend_irecv_ring_runs_again_at_each_replay(tmp_path, world_size):
    spawn(batched_ring, world_size, tmp_path)


def wait_on_other_stream(rank, n):
    # A work waited for on another stream forks that stream into the capture,
    # which must then be joined (CUDA's rule).
    dev = _device(rank)
    x = torch.zeros(1 << 16, device=dev)
    g = torch.openreg.Graph()
    s = _side_stream(dev)
    other = torch.openreg.Stream(dev)
    with torch.openreg.stream(s):
        with torch.openreg.graph(g, stream=s):
            work = dist.all_reduce(x, async_op=True)
            with torch.openreg.stream(other):
                work.wait()
                y = x + 1
            s.wait_stream(other)
    torch.openreg.current_stream(dev).wait_stream(s)
    for it in range(3):
        x.fill_(rank + it)
        g.replay()
        torch.openreg.synchronize()
        assert torch.all(y.cpu() == sum(r + it for r in range(n)) + 1), (it, y[:3])


def test_wait_on_another_stream_in_a_capture_orders_it_after_the_replayed_collective(tmp_path):
    spawn(wait_on_other_stream, 2, tmp_path)


def refused_in_capture(rank, n):
    dev = _device(rank)
    x = torch.ones(4, device=dev)
    s = _side_stream(dev)
    g = torch.openreg.Graph()
    with torch.openreg.stream(s):
        with torch.openreg.graph(g, stream=s):
            with pytest.raises(dist.DistBackendError, match="barrier, which blocks the host, cannot be captured"):
                dist.barrier(device_ids=[rank])
            if rank == 1:
                with pytest.raises(dist.DistBackendError, match="receive from any source cannot be captured"):
                    dist.recv(x)
            x.mul_(2)
    g.replay()
    torch.openreg.synchronize()
    dist.all_reduce(x)  # refused calls issued nothing: the group is in step
    assert x.cpu().tolist() == [2.0 * n] * 4


def test_barrier_and_any_source_receive_are_refused_in_a_capture(tmp_path):
    spawn(refused_in_capture, 2, tmp_path)


def replay_without_peer(rank, n, tmp):
    dev = _device(rank)
    x = torch.ones(8, device=dev)
    # The short timeout on a group made once the ranks are in step: as the
    # default group's, it would also bound how far apart the two spawned ranks
    # reach init_process_group (over 2 s on a busy runner).
    group = dist.new_group(list(range(n)), timeout=datetime.timedelta(seconds=2))
    s = _side_stream(dev)
    g = torch.openreg.Graph()
    with torch.openreg.stream(s):
        with torch.openreg.graph(g, stream=s):
            dist.all_reduce(x, group=group)
    if rank == 0:
        start = time.monotonic()
        g.replay()  # the host does not wait for the peer
        assert time.monotonic() - start < 1
        with pytest.raises(dist.DistBackendError, match="Timed out in allreduce#[0-9]+ .*graph replay"):
            torch.openreg.synchronize()
        elapsed = time.monotonic() - start
        assert elapsed < 2 + 8, elapsed  # the group's 2 s timeout, plus a margin
        # The group failed: its next call raises at once.
        with pytest.raises(dist.DistBackendError, match="already failed"):
            dist.all_reduce(torch.ones(1), group=group)
        open(f"{tmp}/rank0.done", "w").close()
    else:
        # Never replays; stays until rank 0 has seen its error.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                open(f"{tmp}/rank0.done").close()
                break
            except FileNotFoundError:
                time.sleep(0.05)


def test_a_replayed_collective_whose_peer_never_replays_fails_the_stream_after_the_timeout(tmp_path):
    spawn(replay_without_peer, 2, tmp_path, str(tmp_path))


def destroyed_group(rank, n):
    dev = _device(rank)
    x = torch.ones(8, device=dev)
    group = dist.new_group(list(range(n)))
    s = _side_stream(dev)
    g = torch.openreg.Graph()
    with torch.openreg.stream(s):
        with torch.openreg.graph(g, stream=s):
            dist.all_reduce(x)  # on the default group, which lives on
            dist.all_reduce(x, group=group)
    dist.destroy_process_group(group)
    del group
    import gc
    gc.collect()
    # Or the peer's replay failed first and failed the default group already.
    with pytest.raises(RuntimeError, match="process group that was destroyed|not launched"):
        g.replay()
    # The default group's part was issued before the replay failed: it can never
    # start, so the group fails at once rather than at its timeout.
    start = time.monotonic()
    with pytest.raises(dist.DistBackendError, match="graph replay that was not launched"):
        dist.all_reduce(torch.ones(1, device=dev))
        torch.openreg.synchronize()
    assert time.monotonic() - start < 10


def test_replaying_a_collective_of_a_destroyed_group_raises_and_fails_the_rest_of_the_replay(tmp_path):
    spawn(destroyed_group, 2, tmp_path, pg_timeout=60)


def captured_step(rank, n, wrapper):
    # Whole-network capture, as torch's CUDA graph docs show it with DDP: the
    # model wrapped and warmed up on the side stream the capture then uses.
    # FSDP2's all-gather and reduce-scatter streams fork into the capture.
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = _device(rank)

    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))

    generator = torch.Generator().manual_seed(1)
    batches = [(torch.randn(8 * n, 16, generator=generator), torch.randn(8 * n, 4, generator=generator))
               for _ in range(12)]
    static_x = torch.zeros(8, 16, device=dev)
    static_y = torch.zeros(8, 4, device=dev)

    def feed(i):
        x, y = batches[i]
        static_x.copy_(x[rank * 8:(rank + 1) * 8])
        static_y.copy_(y[rank * 8:(rank + 1) * 8])

    s = _side_stream(dev)
    with torch.openreg.stream(s):
        if wrapper == "ddp":
            model = DDP(make().to(dev), device_ids=[rank])
        else:
            model = make().to(dev)
            for layer in model:
                if isinstance(layer, torch.nn.Linear):
                    fully_shard(layer)
            fully_shard(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(3):  # warm-up: the wrappers set up their buckets / buffers
            feed(i)
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(model(static_x), static_y).backward()
            opt.step()
    torch.openreg.current_stream(dev).wait_stream(s)
    # Checked: FSDP2's parameters are DTensors, and its unsharded parameters
    # get memory from the graph's pool by a storage resize no operator shows.
    g = torch.openreg.Graph(check_input_liveness=True)
    opt.zero_grad(set_to_none=True)
    with torch.openreg.graph(g, stream=s):
        static_loss = torch.nn.functional.mse_loss(model(static_x), static_y)
        static_loss.backward()
        opt.step()
    losses = []
    for i in range(3, len(batches)):
        feed(i)
        g.replay()
        losses.append(static_loss.clone())
    mean_losses = torch.stack(losses)
    dist.all_reduce(mean_losses)
    mean_losses /= n

    reference = make()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    expected = []
    for x, y in batches:
        ref_opt.zero_grad()
        loss = torch.nn.functional.mse_loss(reference(x), y)
        loss.backward()
        ref_opt.step()
        expected.append(loss.item())
    torch.testing.assert_close(mean_losses.cpu(), torch.tensor(expected[3:]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("wrapper", ["ddp", "fsdp2"])
def test_a_captured_training_step_matches_one_process_on_the_full_batch(tmp_path, wrapper):
    spawn(captured_step, 2, tmp_path, wrapper)
