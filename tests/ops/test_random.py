"""Random operators draw from the openreg generator of their device.

Each openreg device has its own default generator with CUDA's (seed, offset)
state; the first random op after seeding reproduces the CPU's numbers for the
seed exactly, run after run. The CPU's own generator is never consumed by
openreg ops, and each device's generator is independent.
"""
import subprocess
import sys

import pytest
import torch

DEVICE = "openreg"

RANDOM_OPS = {
    "rand": lambda d, g=None: torch.rand(64, device=d, generator=g),
    "randn": lambda d, g=None: torch.randn(4, 16, device=d, generator=g),
    "randint": lambda d, g=None: torch.randint(-50, 50, (64,), device=d, generator=g),
    "normal_": lambda d, g=None: torch.empty(64, device=d).normal_(2.0, 3.0, generator=g),
    "normal": lambda d, g=None: torch.normal(torch.zeros(64, device=d), torch.ones(64, device=d) * 2,
                                             generator=g),
    "uniform_": lambda d, g=None: torch.empty(64, device=d).uniform_(-1, 1, generator=g),
    "bernoulli_": lambda d, g=None: torch.empty(64, device=d).bernoulli_(0.3, generator=g),
    "bernoulli": lambda d, g=None: torch.bernoulli(torch.full((64,), 0.5, device=d), generator=g),
    "exponential_": lambda d, g=None: torch.empty(64, device=d).exponential_(generator=g),
    "multinomial": lambda d, g=None: torch.multinomial(torch.tensor([0.1, 0.2, 0.7], device=d), 32,
                                                       replacement=True, generator=g),
    "multinomial_no_replacement": lambda d, g=None: torch.multinomial(
        torch.arange(1.0, 21.0, device=d), 10, generator=g),
    "randperm": lambda d, g=None: torch.randperm(100, device=d, generator=g),
    "randperm_large": lambda d, g=None: torch.randperm(50000, device=d, generator=g),
}
# dropout takes no generator argument: it uses the device's default generator.
DEFAULT_ONLY = {
    "dropout": lambda d: torch.nn.functional.dropout(torch.ones(256, device=d), 0.5),
    "dropout2d": lambda d: torch.nn.functional.dropout2d(torch.ones(4, 8, 3, 3, device=d), 0.5),
    "native_dropout": lambda d: torch.native_dropout(torch.ones(256, device=d), 0.3, True)[1],
    "rand_like": lambda d: torch.rand_like(torch.empty(8, 8, device=d)),
}
ALL_DEFAULT = {**{k: (lambda f: lambda d: f(d))(f) for k, f in RANDOM_OPS.items()}, **DEFAULT_ONLY}


def seeded(fn, device, seed=1234):
    torch.manual_seed(seed)
    return fn(device).cpu()


@pytest.mark.parametrize("name", ALL_DEFAULT)
def test_default_generator_matches_cpu_and_reproduces(name):
    fn = ALL_DEFAULT[name]
    first = seeded(fn, DEVICE)
    again = seeded(fn, DEVICE)
    cpu = seeded(fn, "cpu")
    assert torch.equal(first, again)
    assert torch.equal(first, cpu)
    other_seed = seeded(fn, DEVICE, seed=99)
    assert not torch.equal(first, other_seed)


@pytest.mark.parametrize("name", RANDOM_OPS)
def test_explicit_generator(name):
    fn = RANDOM_OPS[name]
    gen = torch.Generator(device=DEVICE).manual_seed(5)
    assert gen.device.type == DEVICE
    a = fn(DEVICE, gen).cpu()
    b = fn(DEVICE, gen).cpu()  # the generator advanced
    gen.manual_seed(5)
    assert torch.equal(fn(DEVICE, gen).cpu(), a)
    assert torch.equal(a, fn("cpu", torch.Generator().manual_seed(5)))
    if name not in ("multinomial",):  # a 3-way draw may repeat by chance
        assert not torch.equal(a, b)


@pytest.mark.parametrize("name", ALL_DEFAULT)
def test_openreg_ops_do_not_consume_the_cpu_generator(name):
    torch.manual_seed(0)
    expected = torch.rand(4)
    torch.manual_seed(0)
    ALL_DEFAULT[name](DEVICE)
    torch.openreg.synchronize()
    assert torch.equal(torch.rand(4), expected)


def test_openreg_numbers_do_not_depend_on_the_cpu_generator():
    torch.openreg.manual_seed(5)
    a = torch.nn.functional.dropout(torch.ones(256, device=DEVICE), 0.5).cpu()
    torch.openreg.manual_seed(5)
    torch.rand(1000)  # CPU draws in between change nothing on openreg
    b = torch.nn.functional.dropout(torch.ones(256, device=DEVICE), 0.5).cpu()
    assert torch.equal(a, b)


def test_devices_have_independent_generators():
    torch.openreg.manual_seed_all(3)
    a0 = torch.rand(8, device="openreg:0").cpu()
    a1 = torch.rand(8, device="openreg:1").cpu()
    assert torch.equal(a0, a1)  # same seed, separate streams of numbers
    torch.openreg.manual_seed_all(3)
    torch.rand(100, device="openreg:1")  # consuming device 1 leaves device 0 alone
    assert torch.equal(torch.rand(8, device="openreg:0").cpu(), a0)
    with torch.openreg.device(1):
        torch.openreg.manual_seed(11)  # seeds the current device only
    assert torch.openreg.default_generators[1].initial_seed() == 11
    assert torch.openreg.default_generators[0].initial_seed() == 3


def test_rng_state_round_trip():
    torch.openreg.manual_seed(21)
    torch.randn(10, device=DEVICE)
    state = torch.openreg.get_rng_state()
    assert state.device.type == "cpu" and state.dtype == torch.uint8
    first = torch.randn(10, device=DEVICE).cpu()
    torch.openreg.set_rng_state(state)
    assert torch.equal(torch.randn(10, device=DEVICE).cpu(), first)
    states = torch.openreg.get_rng_state_all()
    assert len(states) == torch.openreg.device_count()


def test_fork_rng_restores_openreg_state():
    torch.manual_seed(4)
    with torch.random.fork_rng(device_type=DEVICE):
        inside = torch.rand(5, device=DEVICE).cpu()
    after = torch.rand(5, device=DEVICE).cpu()
    assert torch.equal(inside, after)


def test_async_draws_are_ordered_with_state_reads():
    # Draws are queued on the stream; reading the state waits for them.
    torch.openreg.manual_seed(8)
    before = torch.openreg.get_rng_state()
    torch.openreg._sleep(20)  # the draw below stays queued for a while
    x = torch.rand(1000, device=DEVICE)
    assert not torch.equal(torch.openreg.get_rng_state(), before)
    torch.openreg.set_rng_state(before)
    assert torch.equal(torch.rand(1000, device=DEVICE).cpu(), x.cpu())


def test_invalid_arguments_raise_on_the_host():
    # Checks that need no data run on the host, before anything is queued.
    with pytest.raises(RuntimeError, match="from.*to"):
        torch.randint(5, 2, (3,), device=DEVICE)
    with pytest.raises(RuntimeError, match="Expected a 'openreg' device type for generator"):
        torch.rand(3, device=DEVICE, generator=torch.Generator())  # a CPU generator
    with pytest.raises(RuntimeError, match="cannot sample n_sample > prob_dist"):
        torch.multinomial(torch.ones(3, device=DEVICE), 5)
    torch.openreg.synchronize()  # nothing failed on a stream


def test_multinomial_checks_probabilities_on_the_host():
    with pytest.raises(RuntimeError, match="probability tensor contains"):
        torch.multinomial(torch.tensor([-1.0, 2.0], device=DEVICE), 1)
    torch.openreg.synchronize()


def test_data_dependent_errors_are_asynchronous_and_sticky():
    # An out-of-range index is only seen by the kernel: like CUDA's device-side
    # assert, the error surfaces at the next synchronising call and the stream
    # stays failed. In a subprocess, so this test's stream stays healthy.
    code = (
        "import torch\n"
        "x = torch.ones(3, device='openreg').index_select(0, torch.tensor([5], device='openreg'))\n"
        "try:\n"
        "    torch.openreg.synchronize()\n"
        "except RuntimeError as e:\n"
        "    print('first:', e)\n"
        "try:\n"
        "    torch.ones(2, device='openreg') + 1\n"
        "except RuntimeError as e:\n"
        "    print('later:', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "first:" in out.stdout and "out of range" in out.stdout, out
    assert "later:" in out.stdout, out


def test_torch_manual_seed_seeds_openreg_without_warning():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Set seed for `openreg` device does not take effect"
        torch.manual_seed(77)
    assert all(torch.openreg.default_generators[i].initial_seed() == 77
               for i in range(torch.openreg.device_count()))
