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


def test_default_generators_index_and_slice_as_cudas_tuple():
    gens = torch.openreg.default_generators
    assert isinstance(gens[:2], tuple) and len(gens[:2]) == 2 and len(gens[::4]) == 2
    assert gens[-1].device == torch.device("openreg:7")
    # An index past the devices is the tuple's IndexError, as torch.cuda's.
    with pytest.raises(IndexError, match="out of range"):
        torch.openreg.get_rng_state(99)
    with pytest.raises(IndexError, match="out of range"):
        torch.openreg.set_rng_state(torch.openreg.get_rng_state(), 8)


def test_seeding_in_a_forked_child_seeds_nothing_and_does_not_raise(python):
    # As torch.cuda's (queued for an initialisation the child never gets): a
    # fork-started DataLoader worker's worker_init_fn may seed.
    r = python("""
        import os, torch
        torch.ones(1, device="openreg")  # the parent is initialised
        pid = os.fork()
        if pid == 0:
            try:
                torch.manual_seed(1); torch.openreg.manual_seed(1); torch.openreg.manual_seed_all(2)
                torch.openreg.seed(); torch.openreg.seed_all()
            except Exception:
                os._exit(1)
            try:
                torch.openreg.initial_seed()  # reading a state initialises: refused
                os._exit(2)
            except RuntimeError as e:
                os._exit(0 if "forked subprocess" in str(e) else 3)
        print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    """, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "0"


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
    # Offsets move by 4 per kernel; others are refused, as CUDA's Philox offsets,
    # and a refused state changes nothing.
    g = torch.Generator(device="openreg")
    g.manual_seed(5)
    g.set_offset(8)
    with pytest.raises(RuntimeError, match="offset must be a multiple of 4"):
        g.set_offset(5)
    bad = g.get_state().clone()
    bad[:8].view(torch.int64).fill_(99)
    bad[8:].view(torch.int64).fill_(7)
    with pytest.raises(RuntimeError, match="offset must be a multiple of 4"):
        g.set_state(bad)
    assert (g.initial_seed(), g.get_offset()) == (5, 8)


def test_generator_set_state_checks_like_cuda():
    g = torch.Generator(device="openreg")
    state = g.get_state()
    # at::detail::check_rng_state, as CUDA's generator: a CPU, contiguous ByteTensor.
    for bad in (state.to("openreg"), torch.empty(16, dtype=torch.uint8, device="meta")):
        with pytest.raises(TypeError, match="RNG state must be a torch.ByteTensor"):
            g.set_state(bad)
    strided = torch.stack([state, torch.zeros_like(state)], dim=1)[:, 0]
    assert torch.equal(strided, state) and not strided.is_contiguous()
    with pytest.raises(RuntimeError, match="RNG state must be contiguous"):
        g.set_state(strided)


def test_states_restored_in_reverse_reproduce_their_numbers():
    # Activation checkpointing takes a state per checkpointed block in the
    # forward and restores them in reverse order in the backward.
    g = torch.Generator(device="openreg")
    g.manual_seed(3)
    states, draws = [], []
    for _ in range(40):
        states.append(g.get_state())
        draws.append(torch.rand(8, device="openreg", generator=g).cpu())
    for state, expected in reversed(list(zip(states, draws))):
        g.set_state(state)
        assert torch.equal(torch.rand(8, device="openreg", generator=g).cpu(), expected)


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_activation_checkpointing_replays_dropout_masks(use_reentrant):
    # torch.utils.checkpoint stashes the device's RNG state only when
    # torch.openreg._initialized is true; the recomputed dropout masks must be
    # the forward's, here across more blocks than a small snapshot cache holds.
    from torch.utils.checkpoint import checkpoint

    def run(checkpointed):
        torch.manual_seed(0)
        x = torch.randn(4, 256, device="openreg", requires_grad=True)
        h = x
        for _ in range(20):
            block = lambda t: torch.nn.functional.dropout(t * 1.5, p=0.1, training=True)
            h = checkpoint(block, h, use_reentrant=use_reentrant) if checkpointed else block(h)
        h.sum().backward()
        return h.detach().cpu(), x.grad.cpu()

    out_a, grad_a = run(False)
    assert torch.openreg._initialized  # the device is in use
    out_b, grad_b = run(True)
    assert torch.equal(out_a, out_b)
    assert torch.equal(grad_a, grad_b)
    assert grad_a.count_nonzero() > 0


# A saved state replays its numbers wherever it is restored, as CUDA's
# (seed, offset) does: after a reseed, in another generator, device or process,
# through a copy of the generator, and when draws of different sizes reached the
# same (seed, offset) (every kernel adds the same offset, as small CUDA ones do).

def test_checkpoint_replays_dropout_after_a_reseed_between_forward_and_backward():
    from torch.utils.checkpoint import checkpoint
    torch.manual_seed(0)
    x = torch.randn(64, 64, device="openreg", requires_grad=True)
    y = checkpoint(lambda t: torch.nn.functional.dropout(t, 0.5, True) * 3, x, use_reentrant=False)
    torch.manual_seed(1234)  # e.g. an evaluation between forward and backward
    y.sum().backward()
    assert torch.equal((y != 0).cpu(), (x.grad != 0).cpu())


def test_fork_rng_with_a_reseed_inside_restores_the_outer_sequence():
    def draws(fork):
        torch.openreg.manual_seed(0)
        torch.rand(10, device="openreg")
        if fork:
            with torch.random.fork_rng(devices=[0], device_type="openreg"):
                torch.openreg.manual_seed(123)
                torch.randn(4, device="openreg")
        return torch.rand(5, device="openreg").cpu()

    assert torch.equal(draws(fork=True), draws(fork=False))


def test_a_state_restored_into_another_device_or_generator_continues_its_sequence():
    torch.openreg.manual_seed_all(0)
    torch.rand(10, device="openreg:0")
    state = torch.openreg.get_rng_state(0)
    torch.openreg.set_rng_state(state, 1)
    g = torch.Generator("openreg:0")
    g.set_state(state)
    expected = torch.rand(5, device="openreg:0").cpu()
    assert torch.equal(torch.rand(5, device="openreg:1").cpu(), expected)
    assert torch.equal(torch.rand(5, device="openreg:0", generator=g).cpu(), expected)


def test_copies_of_a_generator_continue_its_sequence():
    import copy
    import pickle
    g = torch.Generator("openreg").manual_seed(3)
    torch.rand(100, device="openreg", generator=g)
    deep, pickled = copy.deepcopy(g), pickle.loads(pickle.dumps(g))
    expected = torch.rand(5, device="openreg", generator=g).cpu()
    assert torch.equal(torch.rand(5, device="openreg", generator=deep).cpu(), expected)
    assert torch.equal(torch.rand(5, device="openreg", generator=pickled).cpu(), expected)


def test_a_state_reached_again_by_other_draws_still_replays():
    g = torch.Generator("openreg").manual_seed(0)
    s0 = g.get_state()
    torch.rand(1000, device="openreg", generator=g)
    s1 = g.get_state()
    expected = torch.rand(5, device="openreg", generator=g).cpu()
    g.set_state(s0)
    torch.rand(3, device="openreg", generator=g)  # one kernel too: s1's (seed, offset)
    g.set_state(s1)
    assert torch.equal(torch.rand(5, device="openreg", generator=g).cpu(), expected)


def test_devices_seeded_alike_restore_their_own_states():
    # Same seed on both devices, different draws: equal (seed, offset) pairs
    # that name different positions (get/set_rng_state_all, as fork_rng does).
    torch.openreg.manual_seed_all(5)
    torch.rand(3, device="openreg:0")
    torch.rand(999, device="openreg:1")
    states = torch.openreg.get_rng_state_all()
    expected = [torch.rand(4, device=f"openreg:{d}").cpu() for d in (0, 1)]
    torch.openreg.set_rng_state_all(states)
    for d in (0, 1):
        assert torch.equal(torch.rand(4, device=f"openreg:{d}").cpu(), expected[d])


def test_random_kernels_draw_at_launch_not_when_their_stream_runs_them():
    # Two streams, the first held up or not: the numbers follow launch order.
    def draws(hold):
        torch.openreg.manual_seed(0)
        s1, s2 = torch.openreg.Stream(), torch.openreg.Stream()
        with torch.openreg.stream(s1):
            if hold:
                torch.openreg._sleep(200)
            a = torch.randn(5, device="openreg")
        with torch.openreg.stream(s2):
            b = torch.randn(5, device="openreg")
        torch.openreg.synchronize()
        return torch.cat([a, b]).cpu()

    assert torch.equal(draws(hold=True), draws(hold=False))


def test_checkpoint_replays_dropout_after_a_reseed_to_the_same_seed():
    # Forward 1 and forward 2 each start from manual_seed(0) and draw once
    # first: both checkpoints stash (0, 4), which must replay each one's masks.
    from torch.utils.checkpoint import checkpoint
    drop = lambda t: torch.nn.functional.dropout(t, 0.5, True)
    torch.manual_seed(0)
    x = torch.randn(64, 64, device="openreg", requires_grad=True)
    y = checkpoint(drop, x, use_reentrant=False)
    torch.manual_seed(0)
    torch.randn(10, device="openreg")
    x2 = torch.ones(64, 64, device="openreg", requires_grad=True)
    w = checkpoint(drop, x2, use_reentrant=False)
    (y.sum() + w.sum()).backward()
    assert torch.equal((y != 0).cpu(), (x.grad != 0).cpu())
    assert torch.equal((w != 0).cpu(), (x2.grad != 0).cpu())


def test_many_pending_checkpoints_replay_their_masks():
    # More stashed states than any cache of positions would hold (e.g. all of a
    # pipeline schedule's forwards before the backwards).
    from torch.utils.checkpoint import checkpoint
    drop = lambda t: torch.nn.functional.dropout(t, 0.5, True)
    torch.manual_seed(0)
    xs = [torch.ones(32, device="openreg", requires_grad=True) for _ in range(1500)]
    ys = [checkpoint(drop, x, use_reentrant=False) for x in xs]
    sum(y.sum() for y in ys).backward()
    assert all(torch.equal((y != 0).cpu(), (x.grad != 0).cpu()) for x, y in zip(xs, ys))


def test_states_with_seed_and_offset_swapped_draw_differently():
    # The stream a state names mixes seed and offset asymmetrically.
    g = torch.Generator("openreg")
    draws = []
    for seed, offset in [(8, 4), (4, 8), (0x5851F42D4C957F29, 0x5851F42D4C957F2C), (0, 4)]:
        g.set_state(torch.tensor([seed, offset], dtype=torch.int64).view(torch.uint8))
        draws.append(torch.rand(8, device="openreg", generator=g).cpu())
    assert all(not torch.equal(a, b) for i, a in enumerate(draws) for b in draws[i + 1:])


def test_a_state_names_the_same_numbers_in_another_process(python):
    # Reached by different draws in two processes: (0, 8) either way.
    code = """
        import sys, torch
        torch.openreg.manual_seed(0)
        for n in {sizes}:
            torch.rand(n, device="openreg")
        print(torch.openreg.get_rng_state()[8:].view(torch.int64).item(),
              torch.rand(4, device="openreg").cpu().tolist())
    """
    first = python(code.format(sizes=[3, 1000]))
    second = python(code.format(sizes=[777, 5]))
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert first.stdout == second.stdout and first.stdout.startswith("8 ")
