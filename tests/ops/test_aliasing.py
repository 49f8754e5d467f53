"""Writes that alias their inputs: copy_ (csrc/aten/Copy.cpp) and the generic fallback's out=
arguments (csrc/aten/Fallback.cpp) raise the CPU's overlap errors at the call, and a CPU kernel
that flips its output's conj bit leaves the right values in device memory."""
import pytest
import torch

CASES = {
    "copy_shifted": lambda x: x[1:].copy_(x[:-1]),
    "setitem_shifted": lambda x: x.__setitem__(slice(1, None), x[:-1]),
    "copy_transposed": lambda x: x.view(4, 4).copy_(x.view(4, 4).t()),
    "copy_broadcast_element": lambda x: x.copy_(x[3]),
    "foreach_copy_shifted": lambda x: torch._foreach_copy_([x[1:]], [x[:-1]]),
    "copy_into_expanded": lambda x: x[:1].expand(4).copy_(x[4:8]),
    "copy_self": lambda x: x.copy_(x),
    "copy_disjoint_halves": lambda x: x[:8].copy_(x[8:]),
    "erf_out_shifted": lambda x: torch.erf(x[:-1], out=x[1:]),
    "atan2_out_shifted": lambda x: torch.atan2(x[:-1], x[:-1], out=x[1:]),
    "erf_out_expanded": lambda x: torch.erf(x[:1], out=x[:1].expand(4)),
    "erf_out_same": lambda x: torch.erf(x, out=x),
    "erf_out_full_alias": lambda x: torch.erf(x[:], out=x),
    "erf_out_disjoint": lambda x: torch.erf(x[:4], out=x[4:8]),
}


def outcome(fn, device):
    x = torch.arange(1.0, 17.0, device=device)
    try:
        fn(x)
    except RuntimeError as e:
        return "raised", str(e).split(".")[0]
    return "ran", x.cpu()


@pytest.mark.parametrize("name", sorted(CASES))
def test_aliasing_write_behaves_like_cpu(name):
    expected, got = outcome(CASES[name], "cpu"), outcome(CASES[name], "openreg")
    assert got[0] == expected[0], (expected, got)
    if expected[0] == "raised":
        assert got[1] == expected[1]  # ATen's own words, e.g. "unsupported operation: ..."
    else:
        torch.testing.assert_close(got[1], expected[1], rtol=0, atol=0)
    torch.ones(1, device="openreg").cpu()  # raised on the host: the stream is still healthy


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_solves_from_the_right_keep_the_cpu_kernels_conj_bit(dtype):
    # The CPU kernel solves A^H X^H = B^H and flips its out= tensor's conj bit.
    torch.manual_seed(0)
    a, b = torch.randn(3, 3, dtype=dtype), torch.randn(2, 3, dtype=dtype)
    lu, pivots = torch.linalg.lu_factor(a)
    dev = lambda t: t.to("openreg")
    expected = torch.linalg.lu_solve(lu, pivots, b, left=False)
    torch.testing.assert_close(torch.linalg.lu_solve(dev(lu), dev(pivots), dev(b), left=False).cpu(),
                               expected)
    torch.testing.assert_close(torch.linalg.solve(dev(a), dev(b), left=False).cpu(),
                               torch.linalg.solve(a, b, left=False))
