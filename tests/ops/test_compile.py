"""torch.compile on openreg: the graph-capturing backends that run ATen ops
(eager, aot_eager) give eager's results and gradients; Inductor, the default,
generates host code for CPU or CUDA devices and has no openreg backend."""
import pytest
import torch
from torch import nn


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compiled_training_step_matches_eager(backend):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4)).to("openreg")
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(8, 16, device="openreg")
    expected = model(x)
    expected.square().mean().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    out = compiled(x)
    out.square().mean().backward()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close([p.grad for p in model.parameters()], grads)
    assert out.device.type == "openreg"
