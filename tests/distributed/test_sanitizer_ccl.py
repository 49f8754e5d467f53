"""The race checker with oreg_ccl: a collective reads and writes its tensors
off the stream (as NCCL's stream does) until Work.wait() orders the waiting
stream after it; DDP and FSDP2 training steps check clean."""
import pytest
import torch
import torch.distributed as dist

from _harness import spawn


def checked_device(rank):
    """This rank's openreg device, with the race checker on."""
    dev = torch.device("openreg", rank)
    torch.openreg.set_device(dev)
    torch.openreg.sanitizer.enable()
    return dev


def use_before_wait(rank, n):
    dev = checked_device(rank)
    x = torch.ones(1000, device=dev)
    work = dist.all_reduce(x, async_op=True)
    try:
        x * 2  # the collective may still be writing x
    except RuntimeError as e:
        assert "reads 4000 bytes" in str(e) and "an operation (c10d::allreduce_) of oreg_ccl rank" in str(e), e
    else:
        raise AssertionError("reading a collective's output before wait() was not reported")
    work.wait()
    assert (x * 2).sum().item() == 2000 * n

    # wait() under another stream orders that stream only.
    side = torch.openreg.Stream()
    work = dist.all_reduce(x, async_op=True)
    with torch.openreg.stream(side):
        work.wait()
        y = x + 1
    try:
        x.add_(1)
    except RuntimeError as e:
        assert "data race" in str(e), e
    else:
        raise AssertionError("the default stream did not wait, yet its write was not reported")
    torch.openreg.current_stream().wait_stream(side)
    assert y.sum().item() == 1000 * (n * n + 1)

    # A synchronous collective is waited for on the current stream.
    dist.all_reduce(x)
    assert x.sum().item() == 1000 * n ** 3


def test_using_a_collectives_tensor_before_wait_is_reported(tmp_path):
    spawn(use_before_wait, 2, tmp_path)


def collective_on_unsynchronised_stream(rank, n):
    dev = checked_device(rank)
    x = torch.full((256,), float(rank), device=dev)  # written on the default stream
    side = torch.openreg.Stream()
    with torch.openreg.stream(side):
        try:
            dist.all_reduce(x)  # issued on a stream that never waited for the fill
        except dist.DistBackendError as e:
            assert "data race" in str(e) and "allreduce" in str(e), e
        else:
            raise AssertionError("a collective racing with its input's writer was not reported")


def test_collective_racing_with_its_inputs_writer_fails_the_group(tmp_path):
    spawn(collective_on_unsynchronised_stream, 2, tmp_path)


def training_steps(rank, n):
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = checked_device(rank)
    torch.manual_seed(0)

    def mlp():
        return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                   torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                   torch.nn.Linear(64, 8)).to(dev)

    ddp = DDP(mlp(), device_ids=[rank], bucket_cap_mb=0.01)  # several buckets in flight
    fsdp = mlp()
    for layer in fsdp:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(fsdp)
    for model in (ddp, fsdp):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        for step in range(3):
            inp = torch.randn(16, 32, device=dev)
            loss = model(inp).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        assert torch.isfinite(loss).item()
    assert torch.openreg.sanitizer.is_enabled()


@pytest.mark.timeout(300)
def test_ddp_and_fsdp2_steps_check_clean(tmp_path):
    spawn(training_steps, 2, tmp_path, timeout=240)


def powersgd_several_buckets(rank, n):
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = checked_device(rank)
    torch.manual_seed(0)
    ddp = DDP(torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(6)]).to(dev),
              bucket_cap_mb=0.02)
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                        start_powerSGD_iter=2)
    ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    try:
        for _ in range(4):
            ddp(torch.randn(8, 64, device=dev)).square().mean().backward()
    except RuntimeError as e:
        # The hook clones each bucket on the current stream and reads the clone
        # in a callback on a pool stream, but drops it without record_stream:
        # the next bucket's clone reuses the block while that read may be pending.
        assert "writes" in str(e) and "read" in str(e) and "record_stream" in str(e), e
        import traceback
        assert "input_tensor_cp = input_tensor.detach().clone()" in traceback.format_exc()
    else:
        raise AssertionError("torch 2.13's PowerSGD use-after-free was not reported")


def test_reports_the_use_after_free_in_torchs_powersgd_hook(tmp_path):
    spawn(powersgd_several_buckets, 2, tmp_path)


def is_completed_orders(rank, n):
    dev = checked_device(rank)
    # As NCCL's: once is_completed() is True the output may be used as is.
    x = torch.ones(16, device=dev)
    work = dist.all_reduce(x, async_op=True)
    while not work.is_completed():
        pass
    assert work.is_success() and x.sum().item() == 16 * n, x.cpu()


def test_is_completed_orders_like_a_wait(tmp_path):
    spawn(is_completed_orders, 2, tmp_path)


def p2p_of_one_buffer(rank, n):
    # A test of its own: the race fails the group, and with it any collective
    # a peer still has in flight.
    dev = checked_device(rank)
    # A receive and a send of one buffer run concurrently: a race.
    buf = torch.full((1 << 12,), float(rank), device=dev)
    peer = 1 - rank
    try:
        # Inside batch_isend_irecv's coalescing block the error fails the
        # group and surfaces at wait(), as oreg_ccl's other errors there.
        for w in dist.batch_isend_irecv([dist.P2POp(dist.irecv, buf, peer),
                                         dist.P2POp(dist.isend, buf, peer)]):
            w.wait()
    except RuntimeError as e:
        assert "data race" in str(e) and "sends to rank" in str(e), e
    else:
        raise AssertionError("a send reading the buffer a receive writes was not reported")


def test_sends_and_receives_of_one_buffer_race(tmp_path):
    spawn(p2p_of_one_buffer, 2, tmp_path, pg_timeout=10)


def batch_waited_then_used(rank, n):
    # wait() on a batch orders the stream after every part, each on its own
    # lane (one per peer and direction): the tensors are then free to use.
    dev = checked_device(rank)
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    for recv_first in (True, False):
        s = torch.full((1024,), float(rank), device=dev)
        r = torch.full((1024,), -1.0, device=dev)
        ops = [dist.P2POp(dist.isend, s, nxt), dist.P2POp(dist.irecv, r, prv)]
        if recv_first:
            ops.reverse()
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        assert (r + 0).cpu().eq(prv).all(), r  # read what the receive wrote
        s.fill_(5.0)  # write what the send read
        torch.openreg.synchronize()
    x = torch.ones(4, device=dev)
    dist.all_reduce(x)  # the group is still healthy
    assert x.cpu().eq(n).all(), x


def test_a_waited_batch_orders_every_part(tmp_path):
    spawn(batch_waited_then_used, 3, tmp_path, timeout=90)
