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


STRIDED_OUT = {
    # Python Meta kernels (written for fresh fake tensors) restride out=
    # arguments with as_strided_; the device tensor must keep the caller's view.
    # (mode's out= variant has a composite kernel that rejects all but
    # CPU/CUDA/XPU: RegisterFallbackRoutes.cpp sends it to the fallback.)
    "sort": lambda x, out: torch.sort(x, out=out),
    "sort_stable": lambda x, out: torch.sort(x, stable=True, descending=True, out=out),
    "msort": lambda x, out: torch.msort(x, out=out[0]),
    "mode": lambda x, out: torch.mode(x.round(), 0, out=(out[0][0], out[1][0])),  # routed, see below
    "linalg_solve": lambda x, out: torch.linalg.solve(x @ x.T + 4 * torch.eye(4, device=x.device),
                                                      x, out=out[0]),
}


@pytest.mark.parametrize("name", STRIDED_OUT)
def test_out_of_the_right_shape_with_gaps_keeps_its_strides(name):
    x = torch.randn(4, 6)
    results = []
    for device in ("cpu", "openreg"):
        base = torch.zeros(4, 12, device=device)
        index_base = torch.zeros(4, 12, dtype=torch.long, device=device)
        out = (base[:, ::2], index_base[:, ::2])  # the right shape, a gap after each element
        for _ in range(2):  # the second call takes the fallback's cached inference
            STRIDED_OUT[name](x.to(device), out)
        assert out[0].stride() == (12, 2)
        results.append((base.cpu(), index_base.cpu()))
    torch.testing.assert_close(results[1][0], results[0][0])  # the gaps are untouched too
    torch.testing.assert_close(results[1][1], results[0][1])


@pytest.mark.parametrize("layout", ["transposed", "channels_last"])
def test_where_keeps_its_inputs_layout_as_the_cpu(layout):
    # The native where (csrc/aten/Nn.cpp) takes TensorIterator's layout, as the
    # CPU: a transposed result still cannot be viewed flat.
    t = torch.randn(6, 5).t() if layout == "transposed" else \
        torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    expected = torch.where(t > 0, t, 0.0)
    actual = torch.where(t.to("openreg") > 0, t.to("openreg"), 0.0)
    assert actual.stride() == expected.stride()
    torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0)


@pytest.mark.parametrize("channels_last", ["input", "weight", "both", "neither"])
def test_convolutions_give_the_cpus_memory_format(channels_last):
    # The CPU's 2-D convolutions answer channels_last input or weight with a
    # channels_last result (Meta alone says contiguous): a channels_last model
    # keeps its format from layer to layer, forward and backward.
    def cl(t, which):
        return t.to(memory_format=torch.channels_last) if channels_last in (which, "both") else t

    x = cl(torch.randn(2, 3, 8, 8), "input")
    w = cl(torch.randn(4, 3, 3, 3), "weight")
    go = cl(torch.randn(2, 4, 6, 6), "input")
    args = ([4], [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True, True, True])
    for fn in (lambda d: [torch.nn.functional.conv2d(x.to(d), w.to(d))],
               lambda d: torch.ops.aten.convolution_backward(go.to(d), x.to(d), w.to(d), *args)):
        expected, actual = fn("cpu"), fn("openreg")
        assert [t.stride() for t in actual] == [t.stride() for t in expected]
        for a, e in zip(actual, expected):
            torch.testing.assert_close(a.cpu(), e)
    # 3-D convolutions stay contiguous on the CPU, and so here.
    x3 = torch.randn(1, 2, 3, 4, 5).to(memory_format=torch.channels_last_3d)
    w3 = torch.randn(4, 2, 2, 2, 2)
    assert (torch.nn.functional.conv3d(x3.to("openreg"), w3.to("openreg")).stride()
            == torch.nn.functional.conv3d(x3, w3).stride())
