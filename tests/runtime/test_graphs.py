"""Graph capture and replay (torch.accelerator.Graph on openreg; csrc/runtime/OpenRegGraph.cpp):
kernels launched while a stream captures are recorded and replayed on the same memory,
which the graph's private pool keeps from every other allocation."""
import copy

import pytest
import torch

DEV = torch.device("openreg:0")


def segment_of(ptr):
    for seg in torch.openreg.memory_snapshot():
        if seg["device"] == DEV.index and seg["address"] <= ptr < seg["address"] + seg["total_size"]:
            return seg
    raise AssertionError(f"no segment holds {ptr:#x}")


def side_stream():
    s = torch.openreg.Stream(DEV)
    s.wait_stream(torch.openreg.current_stream(DEV))
    return s


def freed_temporary(x):
    """Run inside a capture: a temporary the capture frees again (the replay
    still writes it) and an output computed from it; (temporary's address, output)."""
    tmp = x * 2
    tmp_ptr = tmp.data_ptr()
    out = tmp + 1
    del tmp
    return tmp_ptr, out


def test_replay_recomputes_from_the_captured_inputs():
    x = torch.randn(1000, device=DEV)
    w = torch.randn(1000, device=DEV)
    g = torch.accelerator.Graph()
    assert not torch.openreg.is_current_stream_capturing()
    with torch.openreg.stream(side_stream()), g:
        assert torch.openreg.is_current_stream_capturing()
        y = (x * w).sin() + 1
        total = y.sum()
    assert not torch.openreg.is_current_stream_capturing()
    for value in (0.5, -2.0, 3.0):
        x.fill_(value)  # new input, same memory
        g.replay()
        expected = (torch.full((1000,), value) * w.cpu()).sin() + 1
        torch.testing.assert_close(y.cpu(), expected)
        torch.testing.assert_close(total.cpu(), expected.sum(), rtol=1e-4, atol=1e-4)


def test_replay_is_queued_on_the_current_stream():
    x = torch.ones(100, device=DEV)
    g = torch.accelerator.Graph()
    with torch.openreg.stream(side_stream()), g:
        y = x * 2
    torch.openreg.synchronize()
    other = torch.openreg.Stream(DEV)
    with torch.openreg.stream(other):
        torch.openreg._sleep(1000)
        x.fill_(5.0)
        g.replay()  # behind the sleep on `other`
        assert not other.query()
    other.synchronize()
    torch.testing.assert_close(y.cpu(), torch.full((100,), 10.0))


def test_capture_on_the_default_stream_is_refused():
    g = torch.accelerator.Graph()
    with pytest.raises(RuntimeError, match="must be captured on a non-default stream"):
        g.capture_begin()


def test_synchronising_a_capturing_stream_invalidates_the_capture():
    x = torch.ones(10, device=DEV)
    s = side_stream()
    g = torch.accelerator.Graph()
    with torch.openreg.stream(s):
        with pytest.raises(torch.AcceleratorError, match="previous error during capture") as raised:
            with g:
                (x * 2).cpu()  # a blocking copy waits for the stream
        assert "operation not permitted when stream is capturing" in str(raised.value.__context__)
        assert not torch.openreg.is_current_stream_capturing()
        with pytest.raises(RuntimeError, match="without a preceding successful capture"):
            g.replay()  # nothing half-recorded to replay
        torch.testing.assert_close((x * 3).cpu(), torch.full((10,), 3.0))
        g2 = torch.accelerator.Graph()
        g2.capture_begin()
        try:
            x.sum().item()
        except torch.AcceleratorError:
            pass  # caught inside the capture: its end still refuses the graph
        with pytest.raises(torch.AcceleratorError, match="previous error during capture"):
            g2.capture_end()


def test_a_device_synchronize_from_another_thread_invalidates_the_capture():
    import threading

    x = torch.ones(10, device=DEV)
    raised = []

    def synchronize():
        try:
            torch.openreg.synchronize(DEV)
        except torch.AcceleratorError as e:
            raised.append(str(e))

    g = torch.openreg.Graph()
    with pytest.raises(torch.AcceleratorError, match="previous error during capture"):
        with torch.openreg.graph(g, stream=side_stream()):
            y = x * 2
            t = threading.Thread(target=synchronize)
            t.start()
            t.join()
    assert len(raised) == 1 and "operation not permitted when stream is capturing" in raised[0]


def test_private_pool_keeps_graph_memory_from_other_allocations():
    x = torch.randn(4096, device=DEV)
    s = side_stream()
    g = torch.accelerator.Graph()
    with torch.openreg.stream(s):
        with g:
            tmp_ptr, out = freed_temporary(x)
        # Same stream, same size: without the graph's pool this would reuse tmp's block.
        bystander = torch.full((4096,), 7.0, device=DEV)
        assert bystander.data_ptr() != tmp_ptr
        reserved = torch.openreg.memory_reserved(DEV)
        torch.openreg.empty_cache()  # keeps the live graph's pool
        g.replay()
        s.synchronize()
    torch.testing.assert_close(bystander.cpu(), torch.full((4096,), 7.0))
    torch.testing.assert_close(out.cpu(), x.cpu() * 2 + 1)
    assert torch.openreg.memory_reserved(DEV) == reserved
    del out
    g.reset()  # the pool's memory goes back to the stream
    torch.openreg.synchronize()
    torch.openreg.empty_cache()
    assert torch.openreg.memory_reserved(DEV) < reserved


def test_reset_gives_memory_back_after_queued_replays_without_waiting_for_them():
    import time

    x = torch.ones(1 << 16, device=DEV)
    s = side_stream()
    g = torch.accelerator.Graph()
    with torch.openreg.stream(s), g:
        y = x * 2
        y_ptr = y.data_ptr()
    del y
    torch.openreg._sleep(1000)
    g.replay()  # queued on the default stream behind the sleep
    start = time.monotonic()
    g.reset()   # CUDA's does not wait for the device either (nor hold the GIL that long)
    assert time.monotonic() - start < 0.9
    with torch.openreg.stream(s):
        z = torch.full((1 << 16,), 7.0, device=DEV)
    assert z.data_ptr() != y_ptr  # the pool is the queued replay's until it ran
    torch.openreg.synchronize()
    torch.testing.assert_close(z.cpu(), torch.full((1 << 16,), 7.0))  # not overwritten
    # Once the replay ran, the pool's segment is an ordinary unused one of s.
    seg = segment_of(y_ptr)
    torch.openreg.empty_cache()
    assert all(other["address"] != seg["address"] for other in torch.openreg.memory_snapshot())


def test_deleting_a_graph_does_not_stall_other_threads():
    # A graph collected by Python's garbage collector in some thread must not
    # block every thread (it holds the GIL) until the device's queue drains.
    import threading
    import time

    x = torch.ones(100, device=DEV)
    g = torch.accelerator.Graph()
    with torch.openreg.stream(side_stream()), g:
        y = x + 1
    torch.openreg._sleep(1500)
    g.replay()
    counted = []

    def count():
        end = time.monotonic() + 1.0
        n = 0
        while time.monotonic() < end:
            n += 1
            time.sleep(0.01)
        counted.append(n)

    t = threading.Thread(target=count)
    t.start()
    time.sleep(0.1)
    del g
    t.join(timeout=30)
    # The counting thread ran (about 100 naps) while the device was busy.
    assert counted and counted[0] > 20, counted
    torch.openreg.synchronize()
    torch.testing.assert_close(y.cpu(), torch.full((100,), 2.0))


def test_freeing_a_tensor_used_by_a_capture_waits_for_the_capture():
    x = torch.ones(100, device=DEV)
    s = side_stream()
    x.record_stream(s)
    g = torch.accelerator.Graph()
    with torch.openreg.stream(s), g:
        y = x * 2
        del x  # used by the capture's stream: its event is owed until the capture ends
    g.replay()
    torch.testing.assert_close(y.cpu(), torch.full((100,), 2.0))


def test_one_empty_cache_after_a_capture_gives_back_a_block_freed_during_it():
    x = torch.ones(4 << 20, device=DEV)  # 16 MiB: a segment of its own
    s = side_stream()
    x.record_stream(s)
    torch.openreg.synchronize()
    x_ptr = x.data_ptr()
    g = torch.accelerator.Graph()
    with torch.openreg.stream(s), g:
        y = torch.ones(4, device=DEV) * 2
        del x  # used by the capturing stream: its event is owed until the capture ends
    torch.openreg.synchronize()
    torch.openreg.empty_cache()  # records the owed event before it waits
    assert all(not (seg["address"] <= x_ptr < seg["address"] + seg["total_size"])
               for seg in torch.openreg.memory_snapshot() if seg["device"] == DEV.index)
    g.replay()
    torch.testing.assert_close(y.cpu(), torch.full((4,), 2.0))


def test_pinned_source_of_a_captured_copy_is_kept():
    dst = torch.empty(1000, device=DEV)
    g = torch.accelerator.Graph()
    with torch.openreg.stream(side_stream()), g:
        dst.copy_(torch.full((1000,), 3.0).pin_memory(), non_blocking=True)  # freed at once
        y = dst * 2
    for _ in range(2):
        g.replay()
        torch.testing.assert_close(y.cpu(), torch.full((1000,), 6.0))


def test_nested_capture_is_refused_and_keeps_the_outer_pool():
    s = side_stream()
    outer, inner = torch.accelerator.Graph(), torch.accelerator.Graph()
    x = torch.ones(4096, device=DEV)
    with torch.openreg.stream(s):
        outer.capture_begin()
        with pytest.raises(RuntimeError, match="captures do not nest"):
            inner.capture_begin()
        tmp_ptr, out = freed_temporary(x)
        outer.capture_end()
        bystander = torch.full((4096,), 7.0, device=DEV)
    assert bystander.data_ptr() != tmp_ptr  # still the outer graph's pool
    outer.replay()
    torch.testing.assert_close(out.cpu(), torch.full((4096,), 3.0))
    assert torch.Stream.is_capturing(s) is False


def test_graphs_share_a_pool_from_graph_pool_handle():
    pool = torch.openreg.graph_pool_handle()
    x = torch.ones(256, device=DEV)
    s = side_stream()
    g1 = torch.accelerator.Graph(pool=pool)
    g2 = torch.accelerator.Graph(pool=pool)
    with torch.openreg.stream(s):
        with g1:
            a = x + 1
        with g2:
            b = a * 10
    assert g1.pool() == g2.pool() == pool
    x.fill_(4.0)
    g1.replay()
    g2.replay()
    torch.testing.assert_close(b.cpu(), torch.full((256,), 50.0))


def test_compiled_function_in_a_graph():
    f = torch.compile(lambda t: (t * 3).cos().sum())
    x = torch.ones(1000, device=DEV)
    f(x)  # compile before capturing
    g = torch.accelerator.Graph()
    with torch.openreg.stream(side_stream()), g:
        out = f(x)  # Inductor's kernel is captured like any other
    for value in (1.0, 2.0):
        x.fill_(value)
        g.replay()
        expected = (torch.full((1000,), value) * 3).cos().sum()
        torch.testing.assert_close(out.cpu(), expected, rtol=1e-4, atol=1e-3)


def test_random_ops_draw_new_numbers_on_each_replay():
    x = torch.ones(2000, device=DEV)
    g = torch.accelerator.Graph()
    with torch.openreg.stream(side_stream()), g:
        y = torch.nn.functional.dropout(x, 0.5)
    g.replay()
    first = y.cpu().clone()
    g.replay()
    assert not torch.equal(first, y.cpu())


def test_each_replay_reads_and_advances_the_generator():
    # As CUDA's philox seed and offset filled in per replay: a seed set before
    # a replay repeats its numbers, and replays move the generator's state;
    # the capture itself leaves it alone.
    x = torch.ones(64, device=DEV)
    gen = torch.Generator(device=DEV)
    g = torch.accelerator.Graph()
    before_capture = torch.openreg.get_rng_state(DEV)
    with torch.openreg.stream(side_stream()), g:
        r = torch.rand(16, device=DEV)
        d = torch.nn.functional.dropout(x, 0.5)
        n = torch.randn(16, device=DEV, generator=gen)
    assert torch.equal(torch.openreg.get_rng_state(DEV), before_capture)

    def replay(seed):
        torch.openreg.manual_seed(seed)
        gen.manual_seed(seed)
        g.replay()
        torch.openreg.synchronize()
        return r.cpu(), d.cpu(), n.cpu()

    first, again, other = replay(1), replay(1), replay(2)
    for a, b, c in zip(first, again, other):
        assert torch.equal(a, b)
        assert not torch.equal(a, c)
    torch.openreg.manual_seed(3)
    seeded = torch.openreg.get_rng_state(DEV)
    g.replay()
    assert not torch.equal(torch.openreg.get_rng_state(DEV), seeded)
    torch.openreg.synchronize()


def test_generator_state_during_a_capture_is_the_captures_own():
    # CUDA's per-capture state (torch 2.10+): the seed, and an offset counted
    # from the start of each replay; a replay from a state draws what eager
    # draws from it. The offset calls and other seeds are refused.
    gen0 = torch.openreg.default_generators[0]
    torch.openreg.manual_seed(5)
    torch.rand(3, device=DEV)  # eager offset 4: replays must not start at the capture's 0
    eager_state = torch.openreg.get_rng_state(DEV)
    states = {}
    g = torch.accelerator.Graph()
    with torch.openreg.stream(side_stream()), g:
        states["start"] = torch.openreg.get_rng_state(DEV)
        a = torch.rand(16, device=DEV)
        states["after_a"] = torch.openreg.get_rng_state(DEV)
        torch.openreg.set_rng_state(states["start"], DEV)
        b = torch.rand(16, device=DEV)  # the same draw as a's, at each replay
        c = torch.rand(16, device=DEV)
        torch.openreg.manual_seed(5)  # the same seed: a no-op
        with pytest.raises(RuntimeError, match="only if new seed is the same"):
            torch.openreg.manual_seed(6)
        for call in (gen0.get_offset, lambda: gen0.set_offset(0), gen0.seed):
            with pytest.raises(RuntimeError, match="during graph capture"):
                call()
    as_words = lambda t: t.view(torch.int64).tolist()  # noqa: E731
    assert as_words(states["start"]) == [5, 0]
    assert as_words(states["after_a"]) == [5, 4]
    assert torch.equal(torch.openreg.get_rng_state(DEV), eager_state)  # the capture drew nothing

    g.replay()
    assert as_words(torch.openreg.get_rng_state(DEV)) == [5, 4 + 8]  # moved by the capture's final offset
    torch.openreg.set_rng_state(eager_state, DEV)
    eager_a, eager_c = torch.rand(16, device=DEV), torch.rand(16, device=DEV)
    assert torch.equal(a.cpu(), eager_a.cpu()) and torch.equal(b.cpu(), eager_a.cpu())
    assert torch.equal(c.cpu(), eager_c.cpu())
    assert not torch.equal(a.cpu(), c.cpu())


def test_a_generator_of_another_device_draws_in_the_ops_capture():
    # CUDA decides by the op's stream: a random op on openreg:0 with an
    # openreg:1 generator is part of openreg:0's capture, even while openreg:1
    # captures another graph.
    dev1 = torch.device("openreg:1")
    gen = torch.Generator(device=dev1)
    gen.manual_seed(3)
    g0, g1 = torch.accelerator.Graph(), torch.accelerator.Graph()
    side0, side1 = torch.openreg.Stream(DEV), torch.openreg.Stream(dev1)
    # capture_begin/end: the context manager synchronises the device, which a capture refuses.
    with torch.openreg.device(dev1), torch.openreg.stream(side1):
        g1.capture_begin()
        with torch.openreg.device(DEV), torch.openreg.stream(side0):
            g0.capture_begin()
            y = torch.rand(4, device=DEV, generator=gen)
            g0.capture_end()
        torch.ones(2, device=dev1).add_(1)
        g1.capture_end()
    state = gen.get_state()
    g0.replay()
    replayed = y.cpu()
    assert not torch.equal(gen.get_state(), state)  # the replay moved it on, as eager does
    after = gen.get_state()
    gen.set_state(state)
    assert torch.equal(replayed, torch.rand(4, device=DEV, generator=gen).cpu())
    assert torch.equal(gen.get_state(), after)
    g1.replay()
    torch.openreg.synchronize(dev1)


def test_generator_copies_are_refused_during_a_capture():
    # CUDA refuses clone_impl and new generators in a capture: a copy would
    # hold neither the capture's offset nor the replays'.
    gen = torch.Generator(device=DEV)
    g = torch.accelerator.Graph()
    with torch.openreg.stream(side_stream()), g:
        with pytest.raises(RuntimeError, match="clone_impl during graph capture"):
            gen.clone_state()
        with pytest.raises(RuntimeError, match="Cannot construct a new OpenRegGeneratorImpl"):
            torch.Generator(device=DEV)
        torch.ones(2, device=DEV).add_(1)
    g.replay()
    gen.clone_state()  # fine again


def test_activation_checkpointing_in_a_capture_matches_eager():
    # torch.utils.checkpoint saves the RNG state in the forward and restores it
    # for the recompute in the backward: in a captured step both happen in the
    # capture, and each replay's recompute must draw the forward's dropout mask.
    torch.manual_seed(0)
    lin = torch.nn.Linear(32, 32).to(DEV)
    x = torch.randn(8, 32, device=DEV, requires_grad=True)

    def step():
        y = torch.utils.checkpoint.checkpoint(
            lambda t: torch.nn.functional.dropout(lin(t), 0.5).relu(), x, use_reentrant=False)
        y.sum().backward()

    def grads():
        return [t.grad.cpu().clone() for t in (x, lin.weight, lin.bias)]

    def clear():
        for t in (x, lin.weight, lin.bias):
            t.grad = None

    stream = side_stream()
    with torch.openreg.stream(stream):
        step()  # warm-up, outside the capture
    torch.openreg.current_stream(DEV).wait_stream(stream)
    clear()
    g = torch.accelerator.Graph()
    with torch.openreg.stream(stream), g:
        step()
    by_seed = []
    for seed in (1, 2):
        torch.openreg.manual_seed(seed)
        g.replay()
        replayed = grads()
        by_seed.append(replayed)
        state_after = torch.openreg.get_rng_state(DEV)
        kept = [t.grad for t in (x, lin.weight, lin.bias)]
        clear()
        torch.openreg.manual_seed(seed)
        step()
        for r, e in zip(replayed, grads()):
            assert torch.equal(r, e)
        assert torch.equal(torch.openreg.get_rng_state(DEV), state_after)
        for t, k in zip((x, lin.weight, lin.bias), kept):
            t.grad = k  # the graph's gradients again, for its next replay
    assert not torch.equal(by_seed[0][0], by_seed[1][0])  # another seed, another mask


def test_torch_cuda_style_graph_context_manager():
    # Code written for torch.cuda.graph(g) ports by the module's name alone.
    x = torch.ones(100, device=DEV)
    g = torch.openreg.Graph()
    caller = torch.openreg.current_stream()
    with torch.openreg.graph(g):
        assert torch.openreg.current_stream() != caller  # captured on a side stream
        y = x * 3
    assert torch.openreg.current_stream() == caller
    x.fill_(2.0)
    g.replay()
    torch.testing.assert_close(y.cpu(), torch.full((100,), 6.0))
    shared = torch.openreg.Graph()
    with torch.openreg.graph(shared, pool=g.pool()):
        z = y + 1
    assert shared.pool() == g.pool()
    g.replay()
    shared.replay()
    torch.testing.assert_close(z.cpu(), torch.full((100,), 7.0))
    # A pool given to the graph itself stays when the context manager names none.
    handle = torch.openreg.graph_pool_handle()
    own = torch.openreg.Graph(pool=handle)
    with torch.openreg.graph(own):
        y * 2
    assert own.pool() == handle


def test_make_graphed_callables_matches_eager_training():
    # A graphed module and function train as their eager twins do, step for step.
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(DEV)
    graphed = copy.deepcopy(eager)
    scale = torch.tensor(0.5, device=DEV, requires_grad=True)

    def head(y, s):
        return (y * s).square()

    x0 = torch.randn(32, 8, device=DEV, requires_grad=True)
    y0 = torch.randn(32, 4, device=DEV, requires_grad=True)
    graphed, graphed_head = torch.openreg.make_graphed_callables(
        (graphed, head), ((x0,), (y0, scale)))
    scale_eager = scale.detach().clone().requires_grad_()
    opt_eager = torch.optim.SGD(list(eager.parameters()) + [scale_eager], lr=0.1)
    opt_graphed = torch.optim.SGD(list(graphed.parameters()) + [scale], lr=0.1)
    for step in range(3):
        x = torch.randn(32, 8, device=DEV)
        loss_eager = head(eager(x), scale_eager).sum()
        loss_graphed = graphed_head(graphed(x), scale).sum()
        loss_eager.backward()
        loss_graphed.backward()
        torch.testing.assert_close(loss_graphed.cpu(), loss_eager.cpu())
        for a, b in zip(graphed.parameters(), eager.parameters()):
            torch.testing.assert_close(a.grad.cpu(), b.grad.cpu())
        torch.testing.assert_close(scale.grad.cpu(), scale_eager.grad.cpu())
        opt_eager.step(), opt_graphed.step()
        opt_eager.zero_grad(), opt_graphed.zero_grad()
    # Outputs are the graph's static memory, as CUDA's: the next replay overwrites them.
    with torch.no_grad():
        first = graphed(torch.randn(32, 8, device=DEV))
        second = graphed(torch.randn(32, 8, device=DEV))
    assert first.data_ptr() == second.data_ptr()
    # Evaluation mode was not captured: the module runs eagerly there.
    graphed.eval()
    x = torch.randn(5, 8, device=DEV)
    torch.testing.assert_close(graphed(x).cpu(), eager(x).cpu())


def test_make_graphed_callables_refuses_what_cuda_refuses():
    m = torch.nn.Linear(4, 4).to(DEV)
    m.register_forward_hook(lambda *a: None)
    with pytest.raises(RuntimeError, match="hooks"):
        torch.openreg.make_graphed_callables(m, (torch.randn(2, 4, device=DEV),))
    with pytest.raises(TypeError, match="only Tensors"):
        torch.openreg.make_graphed_callables(lambda a, b: a * b, (torch.randn(2, device=DEV), 3))
    f = torch.openreg.make_graphed_callables(lambda a: a * 2, (torch.randn(2, 4, device=DEV),),
                                             num_warmup_iters=0)
    with pytest.raises(RuntimeError, match="shape"):
        f(torch.randn(3, 4, device=DEV))
    torch.testing.assert_close(f(torch.ones(2, 4, device=DEV)).cpu(), torch.full((2, 4), 2.0))
    # Autocast's cache would keep the warm-up's casts of the weights in the graph.
    with torch.autocast("openreg", dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="autocast caching"):
            torch.openreg.make_graphed_callables(torch.nn.Linear(4, 4).to(DEV),
                                                 (torch.randn(2, 4, device=DEV),))


def test_out_of_memory_during_a_capture_is_an_oom_and_keeps_the_capture(python):
    # Freeing the cache for a retry waits for the device, which a capture
    # forbids: as CUDA's allocator, the failure is an OutOfMemoryError at once,
    # and the capture goes on; outside a capture the retry frees the cache.
    r = python("""
        import torch
        cached = torch.empty(600 << 20, dtype=torch.uint8, device="openreg")
        del cached
        s = torch.openreg.Stream()
        g = torch.accelerator.Graph()
        with torch.openreg.stream(s):
            g.capture_begin()
            try:
                torch.empty(700 << 20, dtype=torch.uint8, device="openreg")
                print("allocated")
            except torch.OutOfMemoryError:
                print("oom")
            y = torch.ones(10, device="openreg") * 2
            g.capture_end()
        g.replay()
        print(y.sum().item())
        torch.empty(700 << 20, dtype=torch.uint8, device="openreg")
        print("retried")
    """, env={"OPENREG_DEVICE_MEMORY": "1GiB"}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["oom", "20.0", "retried"]


def test_streams_fork_into_a_capture_and_join_it_through_events():
    # CUDA's fork-join capture: a stream that waits for an event recorded in a
    # capture takes part in it; its kernels replay with the graph, in an order
    # that keeps every event dependency.
    x = torch.ones(4096, device=DEV)
    s = side_stream()
    branch = torch.openreg.Stream(DEV)
    g = torch.accelerator.Graph()
    with torch.openreg.stream(s):
        g.capture_begin()
        a = x * 2
        branch.wait_stream(s)  # the fork
        with torch.openreg.stream(branch):
            assert torch.openreg.is_current_stream_capturing()
            tmp_ptr, b = freed_temporary(x)  # b = x * 2 + 1, beside `a`
        c = a * 3
        s.wait_stream(branch)  # the join
        y = b + c
        g.capture_end()
    assert not branch.is_capturing()
    # The branch allocated from the graph's pool: its freed temporary goes to no one.
    with torch.openreg.stream(branch):
        assert torch.empty(4096, device=DEV).data_ptr() != tmp_ptr
    for value in (2.0, -1.0):
        x.fill_(value)
        g.replay()
        torch.testing.assert_close(y.cpu(), torch.full((4096,), value * 2 + 1 + value * 6))
    # After the capture the branch is an ordinary stream again.
    with torch.openreg.stream(branch):
        torch.testing.assert_close((x + 1).cpu(), torch.full((4096,), 0.0))


def test_a_capture_that_does_not_join_its_fork_is_refused():
    x = torch.ones(10, device=DEV)
    s = side_stream()
    branch = torch.openreg.Stream(DEV)
    g = torch.accelerator.Graph()
    with torch.openreg.stream(s):
        g.capture_begin()
        branch.wait_stream(s)
        with torch.openreg.stream(branch):
            x.mul_(2)  # never waited for by `s`
        with pytest.raises(torch.AcceleratorError, match="fork that was not joined"):
            g.capture_end()
    assert not branch.is_capturing()
    torch.testing.assert_close(x.cpu(), torch.ones(10))  # captured, never run


def test_a_capture_event_cannot_be_waited_for_by_the_host():
    s = side_stream()
    g = torch.accelerator.Graph()
    with torch.openreg.stream(s):
        g.capture_begin()
        event = torch.openreg.Event()
        event.record()
        with pytest.raises(torch.AcceleratorError, match="not permitted when stream is capturing"):
            event.synchronize()
        with pytest.raises(torch.AcceleratorError, match="previous error during capture"):
            g.capture_end()


def test_a_fork_joined_through_another_stream_is_joined():
    # O forks A, A forks B; B's work reaches O through A (autograd's backward
    # over a chain of streams joins this way).
    x = torch.ones(100, device=DEV)
    s = side_stream()
    a_stream, b_stream = torch.openreg.Stream(DEV), torch.openreg.Stream(DEV)
    g = torch.accelerator.Graph()
    with torch.openreg.stream(s):
        g.capture_begin()
        a_stream.wait_stream(s)
        with torch.openreg.stream(a_stream):
            a = x + 1
            b_stream.wait_stream(a_stream)
            with torch.openreg.stream(b_stream):
                b = a * 3
            a_stream.wait_stream(b_stream)
            c = b - 1
        s.wait_stream(a_stream)
        y = c * 2
        g.capture_end()
    x.fill_(2.0)
    g.replay()
    torch.testing.assert_close(y.cpu(), torch.full((100,), 16.0))


def test_an_event_of_an_ended_capture_is_complete():
    s = side_stream()
    g = torch.accelerator.Graph()
    event = torch.openreg.Event()
    with torch.openreg.stream(s):
        g.capture_begin()
        torch.ones(10, device=DEV)
        event.record()
        g.capture_end()
    assert event.query()
    event.synchronize()
    other = torch.openreg.Stream(DEV)
    other.wait_event(event)  # nothing to wait for
    with torch.openreg.stream(other):
        torch.testing.assert_close((torch.ones(3, device=DEV) * 2).cpu(), torch.full((3,), 2.0))
    # A new capture may wait for it too, without merging into the old one.
    g2 = torch.accelerator.Graph()
    s2 = side_stream()
    with torch.openreg.stream(s2):
        g2.capture_begin()
        s2.wait_event(event)
        y = torch.ones(4, device=DEV) + 1
        g2.capture_end()
    g2.replay()
    torch.testing.assert_close(y.cpu(), torch.full((4,), 2.0))


# Operators run on the host outside a capture only so that the CPU kernel's
# argument checks raise at the call: in a capture they are queued (Fallback.cpp,
# SyncOnlyOps), as CUDA captures them.
CHECKED_ON_THE_HOST = {
    "kthvalue": lambda x, i, m: x.kthvalue(2, dim=1),
    "take": lambda x, i, m: x.take(i),
    "masked_scatter": lambda x, i, m: x.masked_scatter(m, x * 10),
    "bucketize": lambda x, i, m: torch.bucketize(x, torch.linspace(-1, 1, 5, device=x.device)),
    "aminmax": lambda x, i, m: torch.aminmax(x, dim=1),
    "complex": lambda x, i, m: torch.complex(x, x * 2),
}


# Cumulative ops without Meta kernels, native kernels (csrc/aten/CumulativeOps.cpp).
CHECKED_ON_THE_HOST.update({
    "cummax": lambda x, i, m: torch.cummax(x, 1),
    "cummin": lambda x, i, m: torch.cummin(x, 0),
    "logcumsumexp": lambda x, i, m: torch.logcumsumexp(x, 1),
})


@pytest.mark.parametrize("name", sorted(CHECKED_ON_THE_HOST))
def test_ops_checked_on_the_host_are_captured_and_replayed(name):
    fn = CHECKED_ON_THE_HOST[name]
    x = torch.randn(6, 5, device=DEV)
    idx = torch.tensor([0, 3, 7], device=DEV)
    mask = torch.zeros(6, 5, dtype=torch.bool, device=DEV)
    fn(x, idx, mask)  # warm up outside the capture
    g = torch.openreg.Graph()
    with torch.openreg.graph(g, stream=side_stream()):
        out = fn(x, idx, mask)
    for seed in range(3):
        torch.manual_seed(seed)
        new_x, new_idx, new_mask = torch.randn(6, 5), torch.randint(0, 30, (3,)), torch.rand(6, 5) > 0.5
        x.copy_(new_x), idx.copy_(new_idx), mask.copy_(new_mask)
        g.replay()
        expected = fn(new_x, new_idx, new_mask)
        for got, want in zip(out if isinstance(out, tuple) else (out,),
                             expected if isinstance(expected, tuple) else (expected,)):
            torch.testing.assert_close(got.cpu(), want)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_a_conv_batch_norm_net_is_captured_with_its_running_statistics(training):
    torch.manual_seed(0)
    net_cpu = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
    net_cpu.train(training)
    net = copy.deepcopy(net_cpu).to(DEV)
    x = torch.randn(2, 3, 8, 8, device=DEV)
    net_cpu(x.cpu()), net(x)  # warm up outside the capture, on both
    g = torch.openreg.Graph()
    with torch.openreg.graph(g, stream=side_stream()):
        y = net(x)
    bn, bn_cpu = net[1], net_cpu[1]
    for _ in range(3):
        new_x = torch.randn(2, 3, 8, 8)
        x.copy_(new_x)
        g.replay()
        torch.testing.assert_close(y.cpu(), net_cpu(new_x), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(bn.running_mean.cpu(), bn_cpu.running_mean)
        torch.testing.assert_close(bn.running_var.cpu(), bn_cpu.running_var)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("include_last_offset", [False, True])
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding_bag_is_captured_and_replayed(mode, include_last_offset, padding_idx):
    torch.manual_seed(0)
    bag_cpu = torch.nn.EmbeddingBag(10, 3, mode=mode, include_last_offset=include_last_offset,
                                    padding_idx=padding_idx)
    bag = copy.deepcopy(bag_cpu).to(DEV)
    idx = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9], device=DEV)
    offsets = torch.tensor([0, 4, 6], device=DEV)
    bag(idx, offsets)  # warm up outside the capture
    g = torch.openreg.Graph()
    with torch.openreg.graph(g, stream=side_stream()):
        out = bag(idx, offsets)
    for _ in range(3):
        new_idx = torch.randint(0, 10, (8,))
        idx.copy_(new_idx)
        g.replay()
        torch.testing.assert_close(out.cpu(), bag_cpu(new_idx, offsets.cpu()))


@pytest.mark.parametrize("call,message", [
    (lambda x: torch.bucketize(x, torch.zeros(2, 2, device=DEV)), "boundaries tensor must be 1 dimension"),
    (lambda x: torch.multinomial(x.abs() + 0.1, 10), "cannot sample n_sample > prob_dist.size"),
    (lambda x: torch.complex(x, x.double()), "Expected object of scalar type Float"),
], ids=["bucketize", "multinomial", "complex"])
def test_a_bad_shape_or_dtype_raises_at_the_captured_call(call, message):
    # The CPU kernel's shape and dtype checks run on the host in a capture too
    # (over dummy tensors of the arguments' shapes), as CUDA's host checks do.
    x = torch.rand(6, device=DEV)
    g = torch.openreg.Graph()
    with pytest.raises(RuntimeError, match=message):
        with torch.openreg.graph(g, stream=side_stream()):
            call(x)
    torch.testing.assert_close((x + 1).cpu(), x.cpu() + 1)  # nothing failed on the device


def test_a_bad_argument_to_a_captured_host_checked_op_fails_the_replay(python):
    # In a child: the failed stream stays failed, as after a CUDA device assert.
    r = python("""
        import torch
        x = torch.randn(10, device="openreg")
        idx = torch.tensor([1, 2], device="openreg")
        s = torch.openreg.Stream()
        s.wait_stream(torch.openreg.current_stream())
        g = torch.openreg.Graph()
        with torch.openreg.graph(g, stream=s):
            y = x.take(idx)
        idx.fill_(99)   # out of range: CUDA's kernel asserts, openreg's replay fails
        g.replay()
        try:
            torch.openreg.synchronize()
        except torch.AcceleratorError as e:
            print("failed:", "out of range" in str(e))
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "failed: True"


def test_check_input_liveness_reports_an_input_freed_before_replay():
    # torch.cuda.CUDAGraph's option: a replay after an input the capture read was
    # freed would read freed memory; it raises, naming where it was used and freed.
    x = torch.ones(1000, device="openreg")
    w = torch.full((1000,), 2.0, device="openreg")
    g = torch.openreg.Graph(check_input_liveness=True)
    with torch.openreg.graph(g):
        y = x * w
        z = y + 1  # y is the graph's own: not an input
        made_inside = torch.zeros(10, device="openreg")
        z[:10] += made_inside
    g.replay()
    assert z[0].item() == 3.0
    del y, made_inside  # the graph's own memory: replays stay valid
    g.replay()
    def free_w():
        nonlocal w
        del w
    free_w()
    with pytest.raises(RuntimeError, match=r"detected 1 dead tensor") as e:
        g.replay()
    assert "x * w" in str(e.value) and "in free_w" in str(e.value)
    # Unchecked (the default, as CUDA's, unless the race checker is on) the same
    # mistake goes unnoticed; the option is per graph, and also torch.openreg.graph's.
    plain = torch.openreg.Graph()
    v = torch.ones(10, device="openreg")
    with torch.openreg.graph(plain):
        v * 2
    del v
    if torch.openreg.sanitizer.is_enabled():  # OPENREG_SANITIZER=1 runs of the suite
        with pytest.raises(RuntimeError, match="dead tensor"):
            plain.replay()
    else:
        plain.replay()
    h = torch.openreg.Graph()
    u = torch.ones(10, device="openreg")
    with torch.openreg.graph(h, check_input_liveness=True):
        u * 2
    del u
    with pytest.raises(RuntimeError, match="dead tensor"):
        h.replay()
    with pytest.raises(NotImplementedError, match="enable_annotations"):
        torch.openreg.graph(torch.openreg.Graph(), enable_annotations=True)
    # An explicit False holds under the race checker too (its default: checked).
    k = torch.openreg.Graph()
    t = torch.ones(10, device="openreg")
    with torch.openreg.graph(k, check_input_liveness=False):
        t * 2
    del t
    k.replay()


def test_check_input_liveness_accepts_another_graphs_output_in_a_shared_pool():
    # As CUDA's check: memory of the pool stays the graphs' while they live,
    # even once the tensor that named it is gone (g1's replays write it).
    pool = torch.openreg.graph_pool_handle()
    a = torch.ones(100, device="openreg")
    g1, g2 = torch.openreg.Graph(check_input_liveness=True), torch.openreg.Graph(check_input_liveness=True)
    with torch.openreg.graph(g1, pool=pool):
        b = a * 2
    with torch.openreg.graph(g2, pool=pool):
        c = b + 1
    del b
    g1.replay()
    g2.replay()
    assert c[:2].tolist() == [3.0, 3.0]
