"""The race checker (torch.openreg.sanitizer): unsynchronised use of device
memory across streams raises at the racing call; every way of ordering the
two (stream and event waits, host synchronisation, record_stream) passes."""
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch

DEV = torch.device("openreg:0")


@pytest.fixture
def sanitizer():
    torch.openreg.synchronize()
    torch.openreg.sanitizer.enable()
    try:
        yield
    finally:
        torch.openreg.synchronize()
        torch.openreg.sanitizer.disable()


def side_stream():
    return torch.openreg.Stream(DEV)


def on_side_stream(work):
    """Runs `work()` on a new stream that waited for the current one: (stream, result)."""
    s = side_stream()
    s.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(s):
        return s, work()


def test_read_of_another_streams_write_raises(sanitizer):
    x = torch.ones(1000, device=DEV)  # written on the default stream
    s = side_stream()
    with pytest.raises(RuntimeError, match="data race") as info:
        with torch.openreg.stream(s):
            x * 2
    message = str(info.value)
    assert f"a kernel (aten::mul) on stream {s.stream_id} on device openreg:0 reads 4000 bytes" in message
    assert "a kernel (aten::fill_) on stream 0 on device openreg:0 wrote" in message
    # The racing launch was refused, not queued: the stream still works.
    s.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(s):
        y = x * 2
    torch.openreg.current_stream().wait_stream(s)
    assert y.sum().item() == 2000


def test_write_after_another_streams_read_raises(sanitizer):
    x = torch.ones(1000, device=DEV)
    on_side_stream(x.sum)
    with pytest.raises(RuntimeError, match=r"kernel \(aten::add_\) on stream 0 .* writes 4000 bytes .* that a kernel \(aten::sum\) on stream \d+ on device openreg:0 read"):
        x.add_(1)


def wait_stream(s):
    s.wait_stream(torch.openreg.current_stream())


def wait_event(s):
    event = torch.openreg.Event()
    event.record()
    s.wait_event(event)


def event_synchronize(s):
    torch.openreg.current_stream().record_event().synchronize()


def stream_synchronize(s):
    torch.openreg.current_stream().synchronize()


def device_synchronize(s):
    torch.openreg.synchronize()


def event_query_until_done(s):
    event = torch.openreg.current_stream().record_event()
    while not event.query():
        pass


@pytest.mark.parametrize("order", [wait_stream, wait_event, event_synchronize, stream_synchronize,
                                   device_synchronize, event_query_until_done])
def test_every_kind_of_ordering_passes(sanitizer, order):
    x = torch.ones(1000, device=DEV)
    s = side_stream()
    order(s)
    with torch.openreg.stream(s):
        y = x * 3
    torch.openreg.current_stream().wait_stream(s)
    assert y.sum().item() == 3000


def test_freed_memory_reused_without_record_stream_raises(sanitizer):
    torch.openreg.empty_cache()  # earlier tests' cached blocks do not serve what follows
    x = torch.ones(4096, device=DEV)
    s, y = on_side_stream(lambda: x + 1)  # s still reads x when the host drops it
    del x
    # The allocator hands x's block back out on the default stream at once (all
    # of it, or part of it merged with a free neighbour: how much overlaps
    # depends on what earlier tests left in the cache).
    with pytest.raises(RuntimeError, match=r"writes \d+ bytes .* stream \d+ on device openreg:0 read.*record_stream"):
        torch.zeros(4096, device=DEV)
    torch.openreg.current_stream().wait_stream(s)
    assert y.sum().item() == 2 * 4096


def test_record_stream_makes_reuse_safe(sanitizer):
    x = torch.ones(4096, device=DEV)
    s = side_stream()
    s.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(s):
        torch.openreg._sleep(50)
        y = x + 1
    x.record_stream(s)
    del x
    z = torch.zeros(4096, device=DEV)  # another block, or x's once s is done with it
    torch.openreg.current_stream().wait_stream(s)
    assert y.sum().item() == 2 * 4096 and z.sum().item() == 0


def test_disjoint_views_on_two_streams_pass_overlapping_ones_race(sanitizer):
    x = torch.zeros(2, 1000, device=DEV)
    a, b = side_stream(), side_stream()
    for s in (a, b):
        s.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(a):
        x[0].fill_(1)
    with torch.openreg.stream(b):
        x[1].fill_(2)  # other bytes of the same storage: no race
        with pytest.raises(RuntimeError, match="data race"):
            x[:, 500:].fill_(3)  # half of it is a's row
    for s in (a, b):
        torch.openreg.current_stream().wait_stream(s)
    assert x.sum().item() == 3000


def test_copies_between_devices_order_both_streams(sanitizer):
    if torch.openreg.device_count() < 2:
        pytest.skip("needs two openreg devices")
    # As CUDA's: the copy waits for the source device's current stream, and
    # that stream for the copy, so neither side needs a wait of its own.
    x = torch.ones(100, device=DEV)
    s1 = torch.openreg.Stream(torch.device("openreg:1"))
    with torch.openreg.stream(s1):
        y = x.to("openreg:1")
    x.add_(1)
    other = torch.openreg.Stream(torch.device("openreg:1"))
    with pytest.raises(RuntimeError, match="data race"):
        with torch.openreg.stream(other):
            y * 2  # y was written on s1, which `other` never waited for
    torch.openreg.synchronize(1)
    assert y.sum().item() == 100 and x.sum().item() == 200


RACY = textwrap.dedent("""
    import torch
    x = torch.ones(10, device="openreg:0")
    s = torch.openreg.Stream()
    with torch.openreg.stream(s):
        x * 2
    print("enabled" if torch.openreg.sanitizer.is_enabled() else "disabled")
""")


@pytest.mark.parametrize("setting", ["unset", "1"])
def test_off_by_default_on_with_the_environment_variable(setting):
    env = {k: v for k, v in os.environ.items() if k != "OPENREG_SANITIZER"}
    if setting != "unset":
        env["OPENREG_SANITIZER"] = setting
    run = subprocess.run([sys.executable, "-c", RACY], env=env, capture_output=True, text=True,
                         timeout=120)
    if setting == "unset":
        assert run.returncode == 0 and run.stdout.strip() == "disabled", run.stderr
    else:
        assert run.returncode != 0 and "openreg sanitizer: data race" in run.stderr, run.stderr


def test_enabled_context_restores_the_setting():
    assert not torch.openreg.sanitizer.is_enabled()
    with torch.openreg.sanitizer.enabled():
        assert torch.openreg.sanitizer.is_enabled()
    assert not torch.openreg.sanitizer.is_enabled()


def written_on_side_stream(n=1000):
    x = torch.zeros(n, device=DEV)
    s = side_stream()
    s.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(s):
        x.fill_(1)
    return x, s


@pytest.mark.parametrize("host_read", [lambda x: x.cpu(), lambda x: x[0].item(), lambda x: x.tolist(),
                                       lambda x: torch.unique(x), lambda x: torch.nonzero(x)],
                         ids=["cpu", "item", "tolist", "unique (synchronous fallback)", "nonzero"])
def test_host_reads_in_stream_order_are_checked(sanitizer, host_read):
    # The host waits for the current stream only, then reads: s's fill may
    # still be pending.
    x, s = written_on_side_stream()
    with pytest.raises(RuntimeError, match="data race"):
        host_read(x)
    torch.openreg.current_stream().wait_stream(s)
    assert host_read(x) is not None


def test_host_write_over_memory_another_stream_reads_is_checked(sanitizer):
    y = torch.ones(1000, device=DEV)
    s = side_stream()
    s.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(s):
        y.sum()
    with pytest.raises(RuntimeError, match="writes 4000 bytes"):
        y.copy_(torch.zeros(1000))  # pageable: the host copies in the current stream's order


def test_allocator_polling_does_not_order_streams(sanitizer):
    # The allocator's own event queries (for record_stream) are not the
    # program's synchronisation: the race is reported however fast s ran.
    s = side_stream()
    x = torch.zeros(1000, device=DEV)
    z = torch.ones(1000, device=DEV)
    s.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(s):
        x.fill_(1)
        z.sum()
    z.record_stream(s)
    del z
    time.sleep(0.2)  # s has run by now
    torch.empty(10, device=DEV)  # the allocator polls z's event and finds it done
    with pytest.raises(RuntimeError, match="data race"):
        x.sum()


def test_storage_resize_copy_is_checked(sanitizer):
    x = torch.ones(1000, device=DEV)
    x.resize_(100_000)  # copies the old bytes into a new block on the current stream
    s = side_stream()
    with pytest.raises(RuntimeError, match="data race"):
        with torch.openreg.stream(s):
            x[:1000].sum()


@pytest.mark.parametrize("view", [torch.view_as_real, lambda c: c.real, lambda c: c.imag])
def test_views_of_complex_tensors_touch_no_memory(sanitizer, view):
    # view_as_real / .real / .imag go through the fallback; a view reads no
    # data, so taking one while another stream writes the base is no race (it
    # was reported as a read; c10d's functional all_reduce of a complex tensor
    # takes such a view before its wait).
    c = torch.ones(8, dtype=torch.complex64, device=DEV)
    s, _ = on_side_stream(lambda: c.mul_(2))
    v = view(c)
    assert torch.view_as_complex(torch.view_as_real(c)).data_ptr() == c.data_ptr()
    torch.openreg.current_stream().wait_stream(s)
    assert torch.equal(v.cpu(), view(torch.full((8,), 2, dtype=torch.complex64)))


@pytest.mark.parametrize("n", [100, 100_000])
@pytest.mark.parametrize("views", ["columns", "every other", "real and imag"])
def test_interleaved_views_on_two_streams_do_not_race(sanitizer, views, n):
    # Disjoint bytes, though each view spans the other's: no race (views of
    # up to 256 contiguous runs are tracked run by run, longer ones as a
    # window of each period).
    if views == "real and imag":
        z = torch.zeros(n, dtype=torch.complex64, device=DEV)
        a, b = z.real, z.imag
    else:
        x = torch.zeros(n, 2, device=DEV) if views == "columns" else torch.zeros(2 * n, device=DEV)
        a, b = (x[:, 0], x[:, 1]) if views == "columns" else (x[::2], x[1::2])
    torch.openreg.synchronize()
    s1, s2 = side_stream(), side_stream()
    with torch.openreg.stream(s1):
        a.fill_(1.0)
    with torch.openreg.stream(s2):
        b.fill_(2.0)
        with pytest.raises(RuntimeError, match="data race"):
            a.add_(1)  # the same bytes as s1's fill: still a race
    torch.openreg.synchronize()
    assert a.sum().item() == n and b.sum().item() == 2 * n


def test_strided_views_with_many_runs_race_only_where_they_meet(sanitizer):
    x = torch.zeros(10_000, 3, device=DEV)  # columns: 10,000 runs each
    torch.openreg.synchronize()
    s1, s2 = side_stream(), side_stream()
    with torch.openreg.stream(s1):
        x[:, 2].fill_(1.0)
    with torch.openreg.stream(s2):
        x[:, :2].fill_(2.0)  # the other two columns: no race
        x[:, 0].add_(1.0)  # s2's own column
        with pytest.raises(RuntimeError, match="data race"):
            x[:, 1:].add_(1.0)  # reaches s1's column
        # A few elements of s2's columns, within the span of s1's: no race.
        x[5, 1].fill_(4.0)
        x[:100, 0].sub_(1.0)
        x[:100, 0].add_(1.0)
        with pytest.raises(RuntimeError, match="data race"):
            x[5, 2].fill_(4.0)  # one element of s1's
        # s2's writes of the first two columns did not hide s1's write of the third.
        with pytest.raises(RuntimeError, match="data race"):
            x.sum()
    torch.openreg.current_stream().wait_stream(s1)
    torch.openreg.current_stream().wait_stream(s2)
    assert x.sum(0).tolist() == [30_000.0, 20_002.0, 10_000.0]
    # Once ordered after both, the whole matrix is free to use.
    x.t()[::2].mul_(2)  # rows 0 and 2 of the transpose: columns 0 and 2
    assert x.sum(0).tolist() == [60_000.0, 20_002.0, 20_000.0]


def test_strided_views_with_different_periods_are_checked(sanitizer):
    x = torch.zeros(6 * 1000, device=DEV)
    torch.openreg.synchronize()
    s1, s2 = side_stream(), side_stream()
    with torch.openreg.stream(s1):
        x[::2].fill_(1.0)  # even elements
    with torch.openreg.stream(s2):
        x[1::6].fill_(2.0)  # odd elements: no race
        with pytest.raises(RuntimeError, match="data race"):
            x[3::3].fill_(3.0)  # every third: even ones among them
    torch.openreg.synchronize()
    assert x[1::6].sum().item() == 2000 and x[::2].sum().item() == 3000


@pytest.mark.parametrize("runtime_wait", ["graph freed", "empty_cache"])
def test_the_runtimes_own_waits_do_not_order_streams(sanitizer, runtime_wait):
    # Freeing a graph's pool and emptying the cache wait for the device
    # internally; a CUDA program cannot rely on that, so the race stays a
    # race (a graph garbage-collected at a random moment hid it before).
    if runtime_wait == "graph freed":
        g = torch.accelerator.Graph()
        with torch.openreg.stream(side_stream()), g:
            torch.ones(10, device=DEV) * 2
    x = torch.zeros(100, device=DEV)
    torch.openreg.synchronize()
    with torch.openreg.stream(side_stream()):
        x.fill_(1.0)
    if runtime_wait == "graph freed":
        del g
    else:
        torch.openreg.empty_cache()
    with torch.openreg.stream(side_stream()):
        with pytest.raises(RuntimeError, match="data race"):
            x.add_(1)


def test_graph_replays_are_checked_as_the_kernels_they_replay(sanitizer):
    # A replay touches what its captured kernels touched: reading its output
    # on another stream without waiting for the replay is a race, as it would
    # be for the kernels themselves.
    x = torch.ones(1000, device=DEV)
    s, _ = on_side_stream(lambda: None)
    g = torch.accelerator.Graph()
    with torch.openreg.stream(s), g:
        y = x * 2
    x.fill_(3.0)  # after the capture, which synchronised the device
    replayer = side_stream()
    with torch.openreg.stream(replayer):
        with pytest.raises(RuntimeError, match="data race") as info:
            g.replay()  # reads x, which the default stream writes
        assert "aten::fill_) on stream 0" in str(info.value)
        replayer.wait_stream(torch.openreg.default_stream(DEV))
        g.replay()
    with pytest.raises(RuntimeError, match="data race") as info:
        y.sum()  # the default stream has not waited for the replay
    assert f"a kernel (aten::mul) on stream {replayer.stream_id}" in str(info.value)
    torch.openreg.current_stream().wait_stream(replayer)
    assert y.sum().item() == 6000


def test_a_graph_reading_a_freed_tensor_raises_at_replay(sanitizer):
    # One stream frees and reuses the block, so no stream race shows it; with the
    # race checker on, graphs check their inputs' liveness unless told not to
    # (CUDA's option, off by default otherwise).
    def capture(**option):
        w = torch.full((1000,), 2.0, device=DEV)
        g = torch.openreg.Graph(**option)
        with torch.openreg.graph(g):
            y = w * 3
        del w
        torch.full((1000,), -1.0, device=DEV)  # may take w's block
        return g, y
    g, _ = capture()
    with pytest.raises(RuntimeError, match="detected 1 dead tensor"):
        g.replay()
    unchecked, _ = capture(check_input_liveness=False)
    unchecked.replay()
