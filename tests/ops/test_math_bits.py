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
