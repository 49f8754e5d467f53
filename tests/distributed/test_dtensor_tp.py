"""DTensor on openreg over oreg_ccl (issue 6): distribute_tensor, redistribute between
Shard/Replicate/Partial on 1-D and 2-D meshes, and parallelize_module with column/row-wise
plans give the same numbers as plain tensors and modules."""
import torch
import torch.distributed as dist

from _harness import spawn


def redistribute_1d_and_2d(rank, n):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
    torch.openreg.set_device(rank)
    torch.manual_seed(0)
    full = torch.randn(8, 6)  # identical on every rank
    mesh = init_device_mesh("openreg", (n,))
    d = distribute_tensor(full.to("openreg"), mesh, [Shard(0)])
    assert d.to_local().shape == (8 // n, 6)
    assert d.to_local().device == torch.device("openreg", rank)
    torch.testing.assert_close(d.full_tensor().cpu(), full)
    torch.testing.assert_close(d.redistribute(mesh, [Shard(1)]).full_tensor().cpu(), full)
    rep = d.redistribute(mesh, [Replicate()])
    torch.testing.assert_close(rep.to_local().cpu(), full)
    # Partial -> Replicate sums the per-rank contributions (an allreduce).
    from torch.distributed.tensor import DTensor
    contribution = (full * (rank + 1)).to("openreg")
    part = DTensor.from_local(contribution, mesh, [Partial()])
    total = full * sum(range(1, n + 1))
    torch.testing.assert_close(part.redistribute(mesh, [Replicate()]).to_local().cpu(), total)
    # Partial -> Shard is a reduce_scatter.
    torch.testing.assert_close(part.redistribute(mesh, [Shard(0)]).full_tensor().cpu(), total)
    # Arithmetic on DTensors matches plain tensors.
    torch.testing.assert_close((d * 2 + 1).sum().full_tensor().cpu(), (full * 2 + 1).sum())

    mesh2 = init_device_mesh("openreg", (2, n // 2), mesh_dim_names=("dp", "tp"))
    d2 = distribute_tensor(full.to("openreg"), mesh2, [Shard(0), Shard(1)])
    assert d2.to_local().shape == (4, 6 // (n // 2))
    torch.testing.assert_close(d2.full_tensor().cpu(), full)
    torch.testing.assert_close(
        d2.redistribute(mesh2, [Replicate(), Shard(0)]).full_tensor().cpu(), full)


def tensor_parallel_mlp(rank, n):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    torch.openreg.set_device(rank)
    torch.manual_seed(0)
    plain = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    x = torch.randn(5, 16)
    expected = plain(x)
    expected.sum().backward()
    expected_grad = plain[0].weight.grad.clone()

    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    model.load_state_dict(plain.state_dict())
    model = model.to("openreg")
    mesh = init_device_mesh("openreg", (n,))
    parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    out = model(x.to("openreg"))
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-5)
    out.sum().backward()
    torch.testing.assert_close(model[0].weight.grad.full_tensor().cpu(), expected_grad,
                               rtol=1e-5, atol=1e-5)


def rng_state_round_trip(rank, n):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    torch.openreg.set_device(rank)
    mesh = init_device_mesh("openreg", (n,))
    torch.manual_seed(1)
    d = distribute_tensor(torch.empty(8, 4, device="openreg"), mesh, [Shard(0)])
    torch.nn.init.uniform_(d)  # DTensor's RNG tracker uses openreg's get/set_rng_state
    first = d.full_tensor().cpu()
    torch.manual_seed(1)
    d2 = distribute_tensor(torch.empty(8, 4, device="openreg"), mesh, [Shard(0)])
    torch.nn.init.uniform_(d2)
    torch.testing.assert_close(d2.full_tensor().cpu(), first)
    assert len(torch.unique(first)) > 16  # shards are not copies of one another

    # Same seed, then local draws of different sizes (an uneven last batch):
    # every rank is at the same (seed, offset), so a Replicate random op must
    # give every rank the same values, as on CUDA.
    from torch.distributed.tensor import Replicate
    torch.manual_seed(0)
    torch.randn(10 + rank, device="openreg")
    w = distribute_tensor(torch.zeros(4, 4, device="openreg"), mesh, [Replicate()])
    w.uniform_()
    mask = torch.nn.functional.dropout(
        distribute_tensor(torch.ones(4, 8, device="openreg"), mesh, [Replicate()]), 0.5, True)
    mine = torch.cat([w.to_local().flatten(), mask.to_local().flatten()]).cpu()
    everyone = [None] * n
    dist.all_gather_object(everyone, mine)
    for other in everyone:
        assert torch.equal(other, mine)


def test_redistribute(tmp_path):
    spawn(redistribute_1d_and_2d, 4, tmp_path, timeout=180)


def test_tensor_parallel_module(tmp_path):
    spawn(tensor_parallel_mlp, 2, tmp_path, timeout=180)


def test_dtensor_random_ops(tmp_path):
    spawn(rng_state_round_trip, 2, tmp_path, timeout=180)
