"""FSDP on models built on the CPU: both move parameters with `param.data = param.to(device)`,
which needs the backend to declare CPU and openreg tensors shallow-copy compatible
(`_has_compatible_shallow_copy_type`, as CUDA's are)."""
import torch
import torch.distributed as dist
import torch.nn as nn

from _harness import spawn


def cpu_built_models(rank, n):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FullStateDictConfig
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import StateDictType, fully_shard

    dev = torch.device("openreg", rank)
    torch.openreg.set_device(dev)
    mesh = init_device_mesh("openreg", (n,))
    torch.manual_seed(0)
    reference = nn.Linear(4, 3)
    x = torch.randn(2 * n, 4)
    # FSDP2 moves the CPU-built parameters to the mesh's device and trains
    # them: one SGD step matches the single-process step on the full batch.
    model = nn.Linear(4, 3)
    model.load_state_dict(reference.state_dict())
    fully_shard(model, mesh=mesh)
    assert model.weight.to_local().device == dev
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    model(x[2 * rank:2 * rank + 2].to(dev)).pow(2).sum().backward()
    opt.step()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.5)
    (reference(x).pow(2).sum() / n).backward()  # FSDP averages the ranks' gradients
    ref_opt.step()
    torch.testing.assert_close(model.weight.full_tensor().cpu(), reference.weight.detach())
    # FSDP1 with device_id on a CPU-built module, and a full state dict
    # offloaded to the CPU (flat_param.data = flat_param.to("cpu")).
    fsdp1 = FSDP(nn.Linear(4, 3), device_id=dev)
    with FSDP.state_dict_type(fsdp1, StateDictType.FULL_STATE_DICT,
                              FullStateDictConfig(offload_to_cpu=True)):
        state = fsdp1.state_dict()
    if rank == 0:
        assert state["weight"].device == torch.device("cpu") and state["weight"].shape == (3, 4)
    dist.barrier()


def test_fsdp_on_cpu_built_models(tmp_path):
    spawn(cpu_built_models, 2, tmp_path, timeout=180)
