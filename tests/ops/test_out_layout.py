"""out= arguments get the CPU's layout (ATen's resize_out): an out that the op resizes takes the
layout computed from the inputs (channels-last or transposed inputs give a like-laid-out result),
one of the right size keeps its own strides. Native kernels (csrc/aten/Structured.h) and
pointwise ops through the generic fallback (csrc/aten/Fallback.cpp)."""
import warnings

import pytest
import torch

NATIVE = [
    lambda a, out: torch.add(a, 1, out=out), lambda a, out: torch.sub(a, a, alpha=2, out=out),
    lambda a, out: torch.mul(a, a, out=out), lambda a, out: torch.div(a, 3, out=out),
    lambda a, out: torch.addcmul(a, a, a, value=2, out=out),
    lambda a, out: torch.addcdiv(a, a, a + 3, out=out),
]
FALLBACK = [
    lambda a, out: torch.exp(a, out=out), lambda a, out: torch.sigmoid(a, out=out),
    lambda a, out: torch.pow(a, 2, out=out), lambda a, out: torch.atan2(a, a + 1, out=out),
    lambda a, out: torch.clamp(a, -0.5, 0.5, out=out),
    lambda a, out: torch.maximum(a, a.flip(0), out=out),
    lambda a, out: torch.atan2(a, torch.ones(a.shape[-1], device=a.device), out=out),  # broadcast
]


def inputs(layout):
    a = torch.randn(2, 3, 4, 5)
    if layout == "channels_last":
        return a.to(memory_format=torch.channels_last)
    if layout == "transposed":
        return a.transpose(1, 3)
    return a


@pytest.mark.parametrize("op", NATIVE + FALLBACK)
@pytest.mark.parametrize("layout", ["channels_last", "transposed", "contiguous"])
@pytest.mark.parametrize("out_numel", [0, 5, 120])
def test_out_takes_the_cpu_layout(op, layout, out_numel):
    a = inputs(layout)
    outs = []
    for device in ("cpu", "openreg"):
        out = torch.empty(out_numel, device=device)
        if out_numel == a.numel():
            out = out.view(a.shape[::-1]).permute(3, 2, 1, 0)  # right size, its own strides
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # resizing a non-empty out= warns on both
            op(a.to(device), out)
        outs.append(out)
    assert outs[1].stride() == outs[0].stride()
    torch.testing.assert_close(outs[1].cpu(), outs[0])


def test_fallback_out_layout_is_cached_with_the_op():
    # The second call takes the fallback's cached inference: the same layout.
    a = inputs("transposed")
    for _ in range(2):
        cpu, dev = torch.empty(0), torch.empty(0, device="openreg")
        torch.exp(a, out=cpu)
        torch.exp(a.to("openreg"), out=dev)
        assert dev.stride() == cpu.stride() != torch.empty(cpu.shape).stride()
        torch.testing.assert_close(dev.cpu(), cpu)
