"""DDP on openreg:rank over oreg_ccl trains like one process on the full batch."""
import os
import time

import pytest
import torch
import torch.distributed as dist

from _harness import spawn

STEPS = 4


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(32, 8, generator=g), torch.randn(32, 1, generator=g)


def sgd_steps(module, x, y):
    """Yields each step's loss, after the step."""
    opt = torch.optim.SGD(module.parameters(), lr=0.1)
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(module(x), y)
        loss.backward()
        opt.step()
        yield loss


def sharded_losses(ddp, rank, n, dev):
    """Each step's loss of `ddp` trained on this rank's shard, averaged over ranks
    (equal shards: the mean of means is the full batch's mean)."""
    x, y = data()
    shard = slice(rank * 32 // n, (rank + 1) * 32 // n)
    losses = []
    for loss in sgd_steps(ddp, x[shard].to(dev), y[shard].to(dev)):
        total = loss.detach().clone()
        dist.all_reduce(total, op=dist.ReduceOp.AVG)
        losses.append(total.item())
    return losses


def reference_losses():
    return [loss.item() for loss in sgd_steps(model(), *data())]


def train(rank, n, hook):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = torch.device("openreg", rank)
    torch.openreg.set_device(dev)
    ddp = DDP(model().to(dev))
    if hook != "default":
        compress = getattr(default_hooks, f"{hook}_compress_hook")

        # DDP refuses a hook *named* bf16_compress_hook unless CUDA/NCCL or
        # XPU/XCCL is present; the same hook under another name runs as is.
        def compressed(state, bucket):
            return compress(state, bucket)

        ddp.register_comm_hook(None, compressed)
    losses = sharded_losses(ddp, rank, n, dev)
    tol = 1e-5 if hook == "default" else 2e-2
    torch.testing.assert_close(losses, reference_losses(), rtol=tol, atol=tol)
    # Replicas stay identical.
    for p in ddp.parameters():
        ps = [torch.empty_like(p) for _ in range(n)]
        dist.all_gather(ps, p.detach())
        for q in ps:
            assert torch.equal(q.cpu(), ps[0].cpu())


def train_compiled(rank, n):
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = torch.device("openreg", rank)
    torch.openreg.set_device(dev)
    # DDP over the compiled module (torch.compile(DDP(...)) compiles nothing in
    # torch 2.13, on gloo and CPU alike: DDP's forward is skipped by Dynamo).
    ddp = DDP(torch.compile(model().to(dev)))
    losses = sharded_losses(ddp, rank, n, dev)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1  # Inductor compiled it
    torch.testing.assert_close(losses, reference_losses(), rtol=1e-5, atol=1e-5)


@pytest.mark.timeout(450)  # above spawn's own 400 s limit (conftest's default is 240 s)
def test_compiled_ddp_matches_full_batch(tmp_path):
    # Inductor's kernels on openreg streams, gradients reduced by oreg_ccl.
    spawn(train_compiled, 2, tmp_path, timeout=400,
          env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})


@pytest.mark.parametrize("hook", ["default", "fp16", "bf16"])
def test_ddp_matches_full_batch(tmp_path, hook):
    spawn(train, 4, tmp_path, hook, timeout=200)


@pytest.mark.timeout(240)
def test_ddp_under_torchrun():
    # The issue's setup exactly: torchrun --nproc-per-node=4, openreg:LOCAL_RANK,
    # the default hook and the fp16 / bf16 compression hooks in one job.
    from _torchrun import run, torchrun_cmd, worker_env

    # --standalone: a rendezvous port the OS picks (no clash under xdist).
    cmd = torchrun_cmd("--standalone", "--nproc-per-node=4", os.path.abspath(__file__))
    r = run(cmd, timeout=200, env=worker_env())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    assert r.stdout.count("ddp hooks ok") == 4, r.stdout[-3000:]


if __name__ == "__main__":  # one torchrun worker
    rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("oreg_ccl", device_id=torch.device("openreg", rank))
    for hook in ("default", "fp16", "bf16"):
        train(dist.get_rank(), dist.get_world_size(), hook)
    dist.destroy_process_group()
    print("ddp hooks ok", flush=True)


def powersgd(rank, n, device_type):
    # PowerSGD's callbacks issue collectives and wait for them inside the
    # future callback of the previous one (on the thread that completed it).
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = torch.device("openreg", rank) if device_type == "openreg" else torch.device("cpu")
    if device_type == "openreg":
        torch.openreg.set_device(dev)
    ddp = DDP(model().to(dev))
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                        start_powerSGD_iter=2)
    ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    losses = sharded_losses(ddp, rank, n, dev)
    # The first two steps allreduce uncompressed (start_powerSGD_iter=2).
    torch.testing.assert_close(losses[:2], reference_losses()[:2], rtol=1e-5, atol=1e-5)
    for p in ddp.parameters():
        ps = [torch.empty_like(p) for _ in range(n)]
        dist.all_gather(ps, p.detach())
        for q in ps:
            assert torch.equal(q.cpu(), ps[0].cpu())


@pytest.mark.parametrize("device_type", ["openreg", "cpu"])
def test_powersgd_hook_runs(tmp_path, device_type):
    spawn(powersgd, 2, tmp_path, device_type, timeout=120, pg_timeout=20)


def nested_in_callbacks(rank, n, device_type):
    # With several buckets in flight, a hook's callbacks issue collectives
    # while the backward pass still issues later buckets' all-reduces. On
    # openreg the callbacks run at then() on the caller's thread (device
    # futures, as NCCL's); on the CPU either there (bucket already reduced) or
    # on the group's worker, whose collective then runs ahead of the later
    # buckets queued meanwhile. Either way every rank runs them in the same
    # order. Each callback's probe has a size of its own: any other order is a
    # mismatch error, and a wrong probe sum would scale the gradients wrongly.
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = torch.device(device_type, rank) if device_type == "openreg" else torch.device("cpu")
    if device_type == "openreg":
        torch.openreg.set_device(dev)
    ddp = DDP(model().to(dev), bucket_cap_mb=1e-5)  # one bucket per parameter

    buckets = set()

    def hook(_, bucket):
        buckets.add(bucket.index())
        size = bucket.index() + 1
        if rank == 1 and bucket.index() > 0:
            time.sleep(0.1)  # rank 0 issues its later buckets first

        def average(fut):
            probe = torch.full((size,), rank + 1.0, device=dev)
            dist.all_reduce(probe)  # n(n+1)/2 in each element
            return fut.value()[0].div_(probe.sum() * 2 / ((n + 1) * size))

        return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(average)

    ddp.register_comm_hook(None, hook)
    losses = sharded_losses(ddp, rank, n, dev)
    assert len(buckets) >= 3, buckets
    torch.testing.assert_close(losses, reference_losses(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device_type", ["openreg", "cpu"])
def test_hook_callbacks_issue_collectives_in_program_order(tmp_path, device_type):
    spawn(nested_in_callbacks, 2, tmp_path, device_type, timeout=120, pg_timeout=20)


def sync_batch_norm(rank, n):
    # nn.SyncBatchNorm over oreg_ccl (its kernels have no CPU version; gloo
    # refuses it): uneven per-rank batches train like BatchNorm of the whole batch.
    dev = torch.device("openreg", rank)
    torch.openreg.set_device(dev)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 1), torch.nn.BatchNorm2d(3))
    reference = net.double()
    sync = torch.nn.SyncBatchNorm.convert_sync_batchnorm(
        torch.nn.Sequential(torch.nn.Conv2d(2, 3, 1), torch.nn.BatchNorm2d(3))).double().to(dev)
    sync.load_state_dict(reference.state_dict())
    g = torch.Generator().manual_seed(1)
    x = torch.randn(9, 2, 4, 4, generator=g, dtype=torch.float64)
    sizes = [2, 3, 4][:n - 1] + [9 - sum([2, 3, 4][:n - 1])]
    start = sum(sizes[:rank])
    mine = x[start:start + sizes[rank]].to(dev).requires_grad_()
    out = sync(mine)
    out.square().sum().backward()
    full = x.clone().requires_grad_()
    ref = reference(full)
    ref.square().sum().backward()
    torch.testing.assert_close(out.detach().cpu(), ref.detach()[start:start + sizes[rank]])
    torch.testing.assert_close(mine.grad.cpu(), full.grad[start:start + sizes[rank]])
    bn, ref_bn = sync[1], reference[1]
    torch.testing.assert_close(bn.running_mean.cpu(), ref_bn.running_mean)
    torch.testing.assert_close(bn.running_var.cpu(), ref_bn.running_var)
    # Parameter gradients are local sums (DDP would all-reduce them).
    grad_w = bn.weight.grad.clone()
    dist.all_reduce(grad_w)
    torch.testing.assert_close(grad_w.cpu(), ref_bn.weight.grad)


@pytest.mark.parametrize("world_size", [2, 3])
def test_sync_batch_norm_matches_the_whole_batch(tmp_path, world_size):
    spawn(sync_batch_norm, world_size, tmp_path, timeout=150)


def runtime_stats(rank, n):
    import warnings
    dev = torch.device("openreg", rank)
    torch.openreg.set_device(dev)
    net = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64).to(dev))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(4):
            net(torch.randn(32, 64, device=dev)).square().sum().backward()
    assert not [w for w in caught if "Time stats" in str(w.message)], [str(w.message) for w in caught]
    stats = net._get_ddp_logging_data()
    # Device times, from the registered PrivateUse1 timer's events (ns).
    for key in ("avg_forward_compute_time", "avg_backward_compute_time", "avg_backward_comm_time"):
        assert isinstance(stats.get(key), int) and stats[key] > 0, (key, stats.get(key))


def test_ddp_runtime_stats_are_timed_on_the_device(tmp_path):
    spawn(runtime_stats, 2, tmp_path)
