"""PyTorch's ModuleInfo database run on openreg and compared with the CPU.

For each ModuleInfo in `module_db` (float32, training mode), the first
MAX_INPUTS module inputs construct the module on the CPU, a deep copy moves to
openreg, and both run forward and backward (one fixed random cotangent per
output); outputs, input gradients and parameter gradients must match.
Expected failures: expected_failures.MODULES.
"""
import copy
import itertools

import pytest
import torch
from torch.testing._internal.common_modules import module_db
from torch.utils._pytree import tree_flatten

from common import DEVICE, assert_same, to_device
from expected_failures import MODULES

MAX_INPUTS = 2
SEED = 4321


def params():
    for info in module_db:
        if torch.float32 not in info.dtypes:
            continue
        reason = MODULES.get(info.formatted_name)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        yield pytest.param(info, id=info.formatted_name, marks=marks)


def forward_backward(module, forward_input):
    args, kwargs = forward_input.args, forward_input.kwargs
    torch.manual_seed(SEED)  # same dropout masks on both devices (one random kernel per forward)
    out = module(*args, **kwargs)
    outputs = [t for t in tree_flatten(out)[0]
               if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()]
    inputs = [t for t in tree_flatten((args, kwargs))[0]
              if isinstance(t, torch.Tensor) and t.requires_grad]
    params = [p for p in module.parameters() if p.requires_grad]
    grads = None
    if outputs and (inputs or params):
        gen = torch.Generator().manual_seed(0)
        cotangents = [torch.randn(o.shape, generator=gen).to(o.device, o.dtype) for o in outputs]
        grads = torch.autograd.grad(outputs, inputs + params, cotangents, allow_unused=True)
    return out, grads


@pytest.mark.parametrize("info", list(params()))
def test_module(info):
    torch.manual_seed(0)
    module_inputs = info.module_inputs_func(info, device="cpu", dtype=torch.float32,
                                            requires_grad=True, training=True)
    ran = 0
    for module_input in itertools.islice(module_inputs, MAX_INPUTS):
        if module_input.forward_input is None:
            continue
        c_args, c_kwargs = module_input.constructor_input.args, module_input.constructor_input.kwargs
        torch.manual_seed(0)
        cpu_module = info.module_cls(*c_args, **c_kwargs).to(torch.float32)
        cpu_module.train()
        if any(isinstance(p, torch.nn.parameter.UninitializedParameter) for p in cpu_module.parameters()):
            # Lazy modules draw their weights at the first forward: do that on
            # the CPU, as the device's random ops follow CUDA's (seed, offset)
            # contract and give the CPU's numbers only for the first draw.
            with torch.no_grad():
                cpu_module(*module_input.forward_input.args, **module_input.forward_input.kwargs)
        dev_module = copy.deepcopy(cpu_module).to(DEVICE)
        dev_input = copy.copy(module_input.forward_input)
        dev_input.args = to_device(module_input.forward_input.args)
        dev_input.kwargs = to_device(module_input.forward_input.kwargs)
        expected, expected_grads = forward_backward(cpu_module, module_input.forward_input)
        actual, actual_grads = forward_backward(dev_module, dev_input)
        assert_same(actual, expected, rtol=1e-4, atol=1e-5)
        if expected_grads is not None:
            assert_same(actual_grads, expected_grads, rtol=1e-4, atol=1e-5)
        # Buffers (running stats) are updated the same way.
        assert_same(dict(dev_module.named_buffers()), dict(cpu_module.named_buffers()))
        ran += 1
    torch.openreg.synchronize()
    assert ran > 0


def test_optimizer_built_after_to_trains():
    # The working order (what CUDA code written with .to() first does).
    model = torch.nn.Linear(2, 1).to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.weight.detach().cpu().clone()
    model(torch.ones(3, 2, device=DEVICE)).sum().backward()
    opt.step()
    assert not torch.equal(model.weight.detach().cpu(), before)
