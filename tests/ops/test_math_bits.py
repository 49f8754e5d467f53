"""Conjugate and negative bits (lazy conj() / neg views) on openreg tensors:
views made by the generic fallback inherit them as the CPU's do, and the
fallback's inference cache tells tensors with and without them apart."""
import pytest
import torch

DEVICE = "openreg"


def neg_view(device):
    return torch._neg_view(torch.tensor([1 + 2j, -3 + 0.5j], device=device))


VIEWS = {
    "view_as_real": lambda c: torch.view_as_real(c),
    "real": lambda c: c.real,
    "imag": lambda c: c.imag,
    "view_as_complex of view_as_real": lambda c: torch.view_as_complex(torch.view_as_real(c)),
}


@pytest.mark.parametrize("name", VIEWS)
def test_views_of_a_negative_view_read_negated_values(name):
    expected = VIEWS[name](neg_view("cpu"))
    for _ in range(2):  # the first call infers on Meta, the second takes the cache
        actual = VIEWS[name](neg_view(DEVICE))
        assert actual.is_neg() == expected.is_neg()
        torch.testing.assert_close(actual.resolve_neg().cpu(), expected.resolve_neg(), rtol=0, atol=0)
    # And what is computed from them: a mask of the real parts.
    x = neg_view(DEVICE)
    assert (x.real > 0).cpu().tolist() == (neg_view("cpu").real > 0).tolist()


def test_a_cached_call_checks_the_conjugate_bit_on_the_host():
    c = torch.randn(3, dtype=torch.complex64, device=DEVICE)
    torch.view_as_real(c)  # fills the inference cache for this signature
    with pytest.raises(RuntimeError, match="view_as_real doesn't work on unresolved conjugated"):
        torch.view_as_real(c.conj())
    torch.openreg.synchronize()  # raised on the host: the stream is fine


def test_conj_physical_in_place_on_complex():
    c = torch.tensor([1 + 2j, 3 - 4j])
    d = c.to(DEVICE)
    d.conj_physical_()
    assert torch.equal(d.cpu(), c.conj_physical())


def test_linalg_solve_into_a_conjugate_out_view():
    # The conjugate fallback hands the op a resolved clone of `out` and expects
    # it back; the op's Python Meta kernel returns fresh tensors, but the op
    # returns its out= argument, as the schema says (Tensor(a!)).
    A = (torch.randn(3, 3, generator=torch.Generator().manual_seed(0)) + 3 * torch.eye(3)).to(torch.complex64)
    B = torch.randn(3, 2, dtype=torch.complex64, generator=torch.Generator().manual_seed(1))
    expected = torch.linalg.solve(A, B)
    z = torch.zeros(3, 2, dtype=torch.complex64, device=DEVICE)
    returned = torch.linalg.solve(A.to(DEVICE), B.to(DEVICE), out=z.conj())
    assert returned.data_ptr() == z.data_ptr()
    torch.testing.assert_close(z.cpu().conj(), expected)
