"""torch.compile's compiler collectives (torch._dynamo.config.enable_compiler_collectives):
the ranks agree on their compile decisions through the process group. Dynamo wants a
group with one device type, as NCCL's: `init_process_group("openreg:oreg_ccl")` gives
that; plain "oreg_ccl" also serves CPU tensors (cpu and openreg), which Dynamo's
check refuses, as it refuses gloo's."""
import datetime

import pytest
import torch
import torch.distributed as dist

from _harness import spawn


def compile_with_compiler_collectives(rank, n, tmp, enabled):
    import torch._dynamo
    from torch._dynamo.utils import counters

    dist.init_process_group("openreg:oreg_ccl", init_method=f"file://{tmp}/store", rank=rank,
                            world_size=n, timeout=datetime.timedelta(seconds=30),
                            device_id=torch.device("openreg", rank))
    torch.openreg.set_device(rank)
    assert dist.group.WORLD._device_types == [torch.device("openreg")]
    torch._dynamo.config.enable_compiler_collectives = enabled

    @torch.compile(backend="eager")
    def f(x):
        return x * 2 + 1

    # Each rank sees other sizes: with the collective, the first compile
    # already learns that the size differs across ranks and makes it dynamic.
    for size in (4, 7, 9):
        x = torch.randn(size + rank, device=f"openreg:{rank}")
        assert torch.equal(f(x), x * 2 + 1)
    assert counters["stats"]["unique_graphs"] == (1 if enabled else 2)
    # The group serves openreg tensors and objects (on the current device).
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": rank})
    assert objs == [{"rank": r} for r in range(n)]


@pytest.mark.parametrize("enabled", [False, True])
def test_compiler_collectives_make_ranks_agree_on_dynamic_shapes(tmp_path, enabled):
    spawn(compile_with_compiler_collectives, 2, tmp_path, str(tmp_path), enabled, init=False)
