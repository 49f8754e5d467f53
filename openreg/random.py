"""Per-device random number generators (the torch.cuda RNG API, for openreg).

A device's state is CUDA's (seed, offset); each random kernel draws from a CPU
generator made from the state at its launch, so a state names the same numbers
everywhere and reading or setting it never waits for queued kernels (as
CUDA's). The first random op after seeding gives the CPU's numbers for the seed.
torch calls ``manual_seed_all``, ``get_rng_state`` and ``set_rng_state`` by
name on the device module (``torch.manual_seed``, ``torch.random.fork_rng``,
torch.utils.checkpoint).
Tests: tests/runtime/test_generators.py.
"""
from typing import Iterable, List

import torch

from . import _C
from .device import _get_device_index, _lazy_init, _raise_if_forked, device_count


class _DefaultGenerators:
    """Lazily created tuple-like view of the per-device default generators."""

    def __getitem__(self, index):
        _raise_if_forked()  # a generator object, as torch.cuda's tuple: no initialisation
        if isinstance(index, slice):
            return tuple(self[i] for i in range(len(self))[index])
        if isinstance(index, int) and index < 0:
            index += len(self)  # a tuple's rule, as torch.cuda.default_generators
        if not isinstance(index, int) or not 0 <= index < len(self):
            raise IndexError("tuple index out of range")
        return _C._default_generator(index)

    def __len__(self) -> int:
        return device_count()

    def __iter__(self):
        return (self[i] for i in range(len(self)))


default_generators = _DefaultGenerators()


def _generator(device, initialise: bool = True) -> torch.Generator:
    """The device's default generator. Seeding does not initialise the device
    (torch.manual_seed runs in every process, CPU-only ones and DataLoader
    workers too, as torch.cuda's seeding is deferred); reading the state does."""
    if initialise:
        _lazy_init()
    else:
        _raise_if_forked()
    if device is None:
        index = _C._current_device()
    elif isinstance(device, int) and device >= 0:
        index = device  # out of range: the tuple's IndexError, as torch.cuda's get_rng_state(99)
    else:
        index = _get_device_index(device)
    return default_generators[index]


def _seeds_nothing() -> bool:
    """A forked child of an initialised parent seeds nothing and does not
    raise (a DataLoader worker's worker_init_fn may seed), as torch.cuda's
    seeding is queued for an initialisation such a child never gets."""
    return _C._is_forked_child()


def manual_seed(seed: int) -> None:
    if _seeds_nothing():
        return
    _generator(None, initialise=False).manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    # torch.manual_seed calls this for CPU-only code too: with the devices
    # unusable (a bad OPENREG_DEVICE_COUNT / _MEMORY) there is nothing to seed,
    # as torch.cuda's seeds nothing without devices.
    if _C._config_error() or _seeds_nothing():
        return
    for i in range(device_count()):
        _generator(i, initialise=False).manual_seed(int(seed))


def seed() -> None:
    if _seeds_nothing():
        return
    _generator(None, initialise=False).seed()


def seed_all() -> None:
    if _seeds_nothing():
        return
    s = _generator(0, initialise=False).seed()
    for i in range(1, device_count()):
        _generator(i, initialise=False).manual_seed(s)


def initial_seed() -> int:
    return _generator(None, initialise=False).initial_seed()


def get_rng_state(device="openreg") -> torch.Tensor:
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device="openreg") -> None:
    _generator(device).set_state(new_state.clone().cpu())


def get_rng_state_all() -> List[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)
