"""Per-device generators (csrc/runtime/OpenRegGenerator.cpp, openreg/random.py)."""
import pytest
import torch


def test_same_seed_same_values_and_matches_cpu():
    torch.openreg.manual_seed(123)
    a = torch.rand(100, device="openreg").cpu()
    torch.openreg.manual_seed(123)
    b = torch.rand(100, device="openreg").cpu()
    torch.manual_seed(123)
    c = torch.rand(100)
    assert torch.equal(a, b)
    assert torch.equal(a, c)


def test_torch_manual_seed_seeds_openreg():
    torch.manual_seed(7)
    a = torch.randn(50, device="openreg:1").cpu()
    torch.manual_seed(7)
    b = torch.randn(50, device="openreg:1").cpu()
    assert torch.equal(a, b)
    assert torch.openreg.initial_seed() == 7


def test_rng_state_round_trip():
    """The state has CUDA's 16-byte (seed, offset) layout; restoring resumes exactly."""
    state = torch.openreg.get_rng_state()
    a = torch.rand(20, device="openreg").cpu()
    torch.openreg.set_rng_state(state)
    b = torch.rand(20, device="openreg").cpu()
    assert torch.equal(a, b)
    states = torch.openreg.get_rng_state_all()
    assert len(states) == torch.openreg.device_count()
    torch.openreg.set_rng_state_all(states)


@pytest.mark.parametrize("which", ["default", "explicit"])
def test_generator_state_taken_while_random_kernels_are_queued(which):
    # Kernels draw when they run: a state taken while one is still queued must
    # not replay its numbers.
    g = (torch.openreg.default_generators[0] if which == "default"
         else torch.Generator(device="openreg"))
    g.manual_seed(0)
    kw = {} if which == "default" else {"generator": g}
    torch.openreg._sleep(200)
    x = torch.randn(1000, device="openreg", **kw)
    state = g.get_state()
    a = torch.randn(1000, device="openreg", **kw)
    g.set_state(state)
    b = torch.randn(1000, device="openreg", **kw)
    assert torch.equal(a.cpu(), b.cpu())
    assert not torch.equal(b.cpu(), x.cpu())


def test_devices_have_independent_generators():
    torch.openreg.manual_seed_all(5)
    with torch.openreg.device(2):
        a = torch.rand(10, device="openreg").cpu()
    b = torch.rand(10, device="openreg:0").cpu()
    assert torch.equal(a, b)  # both seeded with 5, neither advanced the other


def test_state_layout_and_offset():
    torch.openreg.manual_seed(11)
    state = torch.openreg.get_rng_state()
    assert state.dtype == torch.uint8 and state.numel() == 16
    assert state[:8].view(torch.int64).item() == 11
    assert state[8:].view(torch.int64).item() == 0
    torch.rand(3, device="openreg")
    assert torch.openreg.get_rng_state()[8:].view(torch.int64).item() > 0
    with pytest.raises(RuntimeError, match="16 bytes"):
        torch.openreg.set_rng_state(torch.zeros(5, dtype=torch.uint8))
