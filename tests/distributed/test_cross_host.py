"""oreg_ccl across hosts: ranks on simulated hosts (OREG_CCL_HOST_ID) talk
over ZeroMQ on loopback between hosts and shared memory within a host.

The same checks as the single-host tests (every collective x op x dtype
against independently computed values; send/recv patterns), plus what only
the network path has: the wire protocol rejecting foreign or malformed
messages, a killed or hung rank on another host, abort() from another thread.
"""
import datetime
import os
import re
import signal
import threading
import time

import pytest
import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

from _harness import info_of, spawn
from test_collectives import (ALL, check, gather_scatter_tensors, make, matrix, ops_for, reduce_op,
                              reference, run_allreduce)
from test_errors import expect_dist_error, mismatches, timeouts
from test_p2p import p2p


@pytest.mark.parametrize(
    "hosts,chunk",
    [
        ((0, 0, 1, 1), None),  # 2 hosts x 2 ranks: hierarchical algorithms
        ((0, 1, 1, 0, 0, 1), None),  # 2 hosts x 3, interleaved: columns are not rank ranges
        ((0, 1, 2), 4096),     # 3 hosts x 1 rank, tiny chunks, one I/O thread per DEALER
        ((0, 0, 1), None),     # uneven hosts: leader-based allreduce
    ],
    ids=["2x2", "2x3-interleaved", "3x1-chunked", "2+1"],
)
def test_every_collective_across_hosts(tmp_path, hosts, chunk):
    env = {"OREG_CCL_ZMQ_CHUNK_BYTES": str(chunk), "OREG_CCL_ZMQ_IO_THREADS": "3"} if chunk else {}
    spawn(matrix, len(hosts), tmp_path, timeout=220, host_of=hosts, env=env)


def allreduce_across_many_hosts(rank, n):
    assert info_of()["host_count"] == n
    # Tiny messages: one-shot among the 5 host leaders; large ones: the ring.
    run_allreduce(rank, n, torch.device("cpu"), 0)
    # 8-64 KiB among more than 4 hosts: recursive doubling, with a host count
    # that is not a power of two. Every dtype x op (fp16/bf16 travel as fp32).
    for seed, dtype in enumerate(ALL):
        count = 30_000 // (4 if dtype in (torch.float16, torch.bfloat16) else dtype.itemsize)
        for op in ops_for(dtype):
            inputs = [make(r, (count,), dtype, 100 + seed) for r in range(n)]
            t = inputs[rank].clone()
            dist.all_reduce(t, op=reduce_op(op, 0.5, t.device))
            check(t, reference(inputs, op, dtype, 0.5), f"allreduce {op} {dtype} across 5 hosts")
    # ... and every rank ends with the same bits, also where the order of the
    # operands decides them (MAX of +0 and -0).
    for t, op in [(make(rank, (10_000,), torch.float32, 5), ReduceOp.SUM),
                  (torch.full((10_000,), -0.0 if rank % 2 else 0.0), ReduceOp.MAX)]:
        dist.all_reduce(t, op=op)
        outs = [torch.empty_like(t) for _ in range(n)]
        dist.all_gather(outs, t)
        assert all(torch.equal(o.view(torch.int32), outs[0].view(torch.int32)) for o in outs), op


def test_small_allreduce_across_five_hosts(tmp_path):
    spawn(allreduce_across_many_hosts, 5, tmp_path, timeout=200, host_of=(0, 1, 2, 3, 4))


def large_reduce_across_hosts(rank, n):
    # Each host reduces to one rank (the root on its host, the first rank
    # elsewhere), those reduce to the root over the network; above 64 KiB both
    # steps are reduce-scatter + gather. The root is first, last and in the
    # middle of its host; every other rank's buffer stays as it was.
    for device in [torch.device("cpu"), torch.device("openreg", rank)]:
        for dst in range(n):
            ins = [make(r, (100_003,), torch.float32, 40 + r + dst) for r in range(n)]
            t = ins[rank].to(device, copy=True)
            dist.reduce(t, dst=dst, op=ReduceOp.SUM)
            check(t, reference(ins, "SUM", torch.float32) if rank == dst else ins[rank],
                  f"reduce to {dst} across hosts")


@pytest.mark.parametrize("hosts", [(0, 1, 1, 0, 0, 1), (0, 1, 2)], ids=["2x3-interleaved", "3x1"])
def test_large_reduce_across_hosts(tmp_path, hosts):
    spawn(large_reduce_across_hosts, len(hosts), tmp_path, timeout=120, host_of=hosts)


def local_failure_reaches_other_hosts(rank, n, tmp):
    # A send/recv size mismatch fails the receiver's group on the spot, without
    # telling anyone at first; the other host must then learn it from an abort
    # message, not from its own timeout (60 s here). Rank 0 stays alive until
    # rank 1 is done, so its exit cannot be what rank 1 notices.
    done = os.path.join(tmp, "rank1-done")
    if rank == 1:
        dist.send(torch.ones(4), 0)
        start = time.monotonic()
        expect_dist_error(lambda: dist.all_reduce(torch.ones(2)), "rank 0")
        assert time.monotonic() - start < 15, time.monotonic() - start
        open(done, "w").close()
    else:
        expect_dist_error(lambda: dist.recv(torch.empty(8), 1), "posted a recv of")
        expect_dist_error(lambda: dist.all_reduce(torch.ones(2)))
        deadline = time.monotonic() + 30
        while not os.path.exists(done) and time.monotonic() < deadline:
            time.sleep(0.05)


def test_local_failure_reaches_other_hosts(tmp_path):
    spawn(local_failure_reaches_other_hosts, 2, tmp_path, str(tmp_path), host_of=(0, 1),
          pg_timeout=60)


def failure_while_sending_staged_block(rank, n, tmp):
    # Rank 0's block for rank 1 is a staging copy (the input is strided) sent
    # without copying; rank 1 sends a block of the wrong size, so rank 0's
    # all_to_all fails while most of that copy is still queued. The copy must
    # outlive the transport's reads of it (freed first, libzmq's I/O thread
    # read unmapped memory). Rank 1 stays alive, not reading, until rank 0 is done.
    done = os.path.join(tmp, "rank0-done")
    big = 16 << 20
    if rank == 0:
        inp = torch.ones(1 + big, 2)[:, 0]
        out = torch.empty(3)
        expect_dist_error(lambda: dist.all_to_all_single(out, inp, [1, 2], [1, big]), "rank 1")
        junk = [torch.ones(big // 4) for _ in range(8)]  # reuse the freed memory
        assert all(bool((j == 1).all()) for j in junk)
        open(done, "w").close()
    else:
        expect_dist_error(lambda: dist.all_to_all_single(torch.empty(2), torch.ones(2), [1, 1], [1, 1]))
        deadline = time.monotonic() + 30
        while not os.path.exists(done) and time.monotonic() < deadline:
            time.sleep(0.05)
    os._exit(0)  # skip destroy: the group is broken


def test_failure_while_a_staged_block_is_being_sent(tmp_path):
    spawn(failure_while_sending_staged_block, 2, tmp_path, str(tmp_path), host_of=(0, 1),
          pg_timeout=60)


@pytest.mark.parametrize("hosts", [(0, 1, 1, 0), (1, 0, 0)], ids=["2x2-root-not-first", "1+2"])
def test_gather_scatter_across_hosts(tmp_path, hosts):
    # The root is the last rank: small blocks go host by host in one message
    # per host (the root is not its host's first rank in 2x2), large ones direct.
    spawn(gather_scatter_tensors, len(hosts), tmp_path, timeout=120, host_of=hosts)


def p2p_across_hosts(rank, n):
    p2p(rank, n)  # recv from any source included: one sender on rank 0's host, one remote
    # A receive from any source posted before one from a given rank with the
    # same tag takes the first of that rank's messages, the later receive the
    # next one (posting order, as MPI); a message from rank 1 (shared memory)
    # racing rank 2's (ZeroMQ) is taken by exactly one receive.
    big = 300_000  # over the p2p ring: single copy between ranks of a host
    for size in (3, big):
        if rank == 0:
            first, second, third = torch.empty(size), torch.empty(size), torch.empty(size)
            w1 = dist.irecv(first)  # any source
            w2 = dist.irecv(second, src=2)
            w3 = dist.irecv(third)  # any source
            for w in (w1, w2, w3):
                w.wait()
            got = tuple(t[0].item() for t in (first, second, third))
            # Rank 2's two messages go to the receives that take them in posting order.
            assert got in [(20.0, 21.0, 1.0), (1.0, 20.0, 21.0)], got
            for t, v in zip((first, second, third), got):
                assert torch.equal(t, torch.full((size,), v))
        elif rank == 1:
            dist.send(torch.full((size,), 1.0), 0)
        elif rank == 2:
            dist.send(torch.full((size,), 20.0), 0)
            dist.send(torch.full((size,), 21.0), 0)
        dist.barrier()


@pytest.mark.parametrize("io_threads", ["1", "2"])
@pytest.mark.parametrize("hosts", [(0, 0, 1), (0, 1, 1)], ids=["2+1", "1+2"])
def test_send_recv_across_hosts(tmp_path, io_threads, hosts):
    # 2+1: rank 0 receives from any source over both transports; 1+2: over ZeroMQ only.
    spawn(p2p_across_hosts, 3, tmp_path, host_of=hosts, env={"OREG_CCL_ZMQ_IO_THREADS": io_threads})


# ---- the wire protocol against a hostile peer -------------------------------------

HEADER = "<IHBBIIQQQQQ104s"  # wire::Header (csrc/c10d/zmq/Wire.h), 160 bytes
MAGIC, VERSION = 0x4C43434F, 1


def header(group, src=0, kind=0, tag=0, nbytes=4, offset=0, chunk=4, what=b"allreduce#0",
           magic=MAGIC, version=VERSION):
    import struct

    return struct.pack(HEADER, magic, version, kind, 0, src, 0, group, tag, nbytes, offset, chunk, what)


def hostile(rank, n, tmp):
    import random

    import zmq

    if rank == 1:  # the victim: keep its warnings
        log = os.open(f"{tmp}/stderr.1", os.O_WRONLY | os.O_CREAT, 0o600)
        os.dup2(log, 2)
    info = info_of()
    assert info["host_count"] == 2 and info["endpoint"].startswith("tcp://127.0.0.1:")
    infos = [None] * n
    dist.all_gather_object(infos, info)
    victim = infos[1]
    if rank == 0:
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.connect(victim["endpoint"])
        gid = victim["group_id"]
        sock.send(b"garbage")                                      # one frame
        sock.send_multipart([b"x" * 12, b"yyyy"])                  # short header
        sock.send_multipart([header(gid, magic=0x1234), b"1234"])  # not oreg_ccl
        sock.send_multipart([header(gid ^ 1), b"1234"])            # another job / before a restart
        sock.send_multipart([header(gid, src=7), b"1234"])         # not a member
        sock.send_multipart([header(gid, kind=9), b"1234"])        # unknown kind
        rng = random.Random(0)
        for _ in range(200):  # fuzz: random frames, random headers with a wrong group
            frames = [rng.randbytes(rng.choice([0, 1, 159, 160, 161, 1000])) for _ in range(rng.randint(1, 4))]
            if rng.random() < 0.5:
                frames = [header(rng.getrandbits(64) | 1 if gid % 2 == 0 else rng.getrandbits(64) & ~1,
                                 src=rng.randint(0, 3), kind=rng.randint(0, 3), tag=rng.getrandbits(64),
                                 nbytes=rng.getrandbits(64), offset=rng.getrandbits(64),
                                 chunk=rng.getrandbits(20)), rng.randbytes(8)]
            sock.send_multipart(frames)
    # The group is unharmed: exact results, before and after.
    t = torch.full((1000,), float(rank + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((1000,), 3.0))
    if rank == 1:
        deadline = time.monotonic() + 20
        while info_of()["rejected"] < 206 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert info_of()["rejected"] == 206, info_of()
    dist.barrier()
    if rank == 1:
        log = open(f"{tmp}/stderr.1").read()
        assert "rejected a message" in log and "another job" in log and "not an oreg_ccl" in log, log
    # A message that names the group and a member but is malformed fails the
    # group (that member would be broken): DistBackendError on every rank.
    g = dist.new_group([0, 1])
    ginfo = [None] * n
    dist.all_gather_object(ginfo, info_of(g))
    if rank == 0:
        sock.close(0)
        sock = zmq.Context.instance().socket(zmq.DEALER)  # a DEALER round-robins its peers
        sock.connect(ginfo[1]["endpoint"])
        sock.send_multipart([header(ginfo[1]["group_id"], chunk=64), b"1234"])
        sock.close(1000)
    time.sleep(1)
    expect_dist_error(lambda: dist.all_reduce(torch.ones(4), group=g), "malformed")
    dist.barrier()
    # A well-formed message of a member that comes over another connection
    # than that member's earlier ones (as after libzmq reconnected a dropped
    # one, when a message may have been lost) fails the group too.
    g = dist.new_group([0, 1])
    dist.all_gather_object(ginfo, info_of(g))
    dist.all_reduce(torch.ones(4), group=g)  # rank 0's own connection is known now
    # ... on rank 1 too: rank 0's all_reduce can return before rank 1 has read
    # its message, which the forged one below could otherwise overtake.
    dist.barrier()
    if rank == 0:
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.connect(ginfo[1]["endpoint"])
        sock.send_multipart([header(ginfo[1]["group_id"], tag=1, what=b"allreduce#1"), b"1234"])
        sock.close(1000)
    time.sleep(1)
    expect_dist_error(lambda: dist.all_reduce(torch.ones(4), group=g), "re-established")
    dist.barrier()


def test_hostile_peer_is_rejected(tmp_path):
    spawn(hostile, 2, tmp_path, str(tmp_path), host_of=(0, 1))


# ---- failures -------------------------------------------------------------------------


def killed_across_hosts(rank, n, tmp, victim):
    # The victim dies only once every survivor is past the first all_reduce:
    # its last message of it could otherwise still be on the way.
    t = torch.ones(2)
    dist.all_reduce(t)
    if rank == victim:
        survivors = [os.path.join(tmp, f"rank{r}-past-all-reduce") for r in range(n) if r != victim]
        deadline = time.monotonic() + 30
        while not all(map(os.path.exists, survivors)) and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGKILL)
    open(os.path.join(tmp, f"rank{rank}-past-all-reduce"), "w").close()
    start = time.monotonic()
    for size in (2, 1 << 20):  # the first fails; the group stays failed
        msg = expect_dist_error(lambda: dist.all_reduce(torch.ones(size)))
    # Named by its group rank (not its index among its host's ranks).
    assert re.search(rf"rank {victim} \((pid \d+|tcp://)", msg), msg
    assert time.monotonic() - start < 10  # far below the 30 s group timeout
    stay_until_all_raised(tmp, rank, [r for r in range(n) if r != victim])
    os._exit(0)  # skip destroy: the group is broken


def stay_until_all_raised(tmp, rank, ranks):
    """An exit would be reported to the ranks still waiting instead of the real cause."""
    open(os.path.join(tmp, f"rank{rank}-raised"), "w").close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(
            os.path.exists(os.path.join(tmp, f"rank{r}-raised")) for r in ranks):
        time.sleep(0.01)


def killed_while_sent_to(rank, n, tmp):
    # Rank 0 only sends (a message far larger than the socket buffers) to a
    # rank on another host that dies: libzmq keeps the rest queued for a
    # reconnect, so the send must fail on the dropped connection, not at the
    # 60 s group timeout. Rank 1 dies only once rank 0 is past the barrier
    # (its last barrier message could otherwise still be on the way).
    passed = os.path.join(tmp, "rank0-past-barrier")
    dist.barrier()
    if rank == 1:
        deadline = time.monotonic() + 30
        while not os.path.exists(passed) and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGKILL)
    open(passed, "w").close()
    start = time.monotonic()
    msg = expect_dist_error(lambda: dist.send(torch.ones(64 << 20), 1), "rank 1")
    assert time.monotonic() - start < 15, (time.monotonic() - start, msg)
    os._exit(0)  # skip destroy: the group is broken


def abort_behind_queued_data(rank, n, tmp):
    # Rank 0's group fails while far more data to rank 1 is queued than the
    # sockets hold (rank 1 is stopped, SIGSTOP): its abort, queued behind that
    # data, is dropped with it when the connection is closed without
    # lingering, so it must go again on a connection of its own. Rank 1 then
    # learns of the failure once it runs again, not at its own 60 s timeout.
    pids = [None] * n
    dist.all_gather_object(pids, os.getpid())
    g = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=3 if rank == 0 else 60))
    dist.barrier(group=g)
    done = os.path.join(tmp, "rank1-done")
    # Rank 1 must be past the barrier before it is stopped, or the failure
    # lands in its barrier instead (seen on a loaded machine).
    passed = os.path.join(tmp, "rank1-past-barrier")
    if rank == 0:
        deadline = time.monotonic() + 30
        while not os.path.exists(passed) and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(pids[1], signal.SIGSTOP)
        try:
            dist.isend(torch.ones(64 << 20), 1, group=g)  # 256 MiB
            expect_dist_error(lambda: dist.all_reduce(torch.ones(2), group=g))
        finally:
            os.kill(pids[1], signal.SIGCONT)
        deadline = time.monotonic() + 60
        while not os.path.exists(done) and time.monotonic() < deadline:
            time.sleep(0.05)
    else:
        open(passed, "w").close()
        time.sleep(5)  # stopped meanwhile: its part of the all_reduce must not be sent before
        start = time.monotonic()
        msg = expect_dist_error(lambda: dist.all_reduce(torch.ones(2), group=g), "rank 0 failed")
        assert time.monotonic() - start < 30, (time.monotonic() - start, msg)
        open(done, "w").close()
    os._exit(0)  # skip destroy: the group is broken


def last_messages_outlive_sender(rank, n, tmp):
    # Rank 1 sends its last messages and leaves at once (the harness destroys
    # the group and os._exit()s): shutdown must hand them to the network
    # before it returns. Seen once under load: a barrier's last message lost
    # with its sender, so the peer failed with "closed its connection".
    gone = os.path.join(tmp, "rank1-gone")
    dist.barrier()
    if rank == 1:
        works = [dist.isend(torch.full((16,), float(i)), 0, tag=i) for i in range(200)]
        for w in works:
            w.wait()
        dist.destroy_process_group()
        open(gone, "w").close()
        return
    deadline = time.monotonic() + 60
    while not os.path.exists(gone) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)  # rank 1 is exiting or gone
    for i in range(200):
        t = torch.empty(16)
        dist.recv(t, 1, tag=i)
        assert torch.equal(t, torch.full((16,), float(i))), (i, t)


def test_last_messages_outlive_their_sender(tmp_path):
    spawn(last_messages_outlive_sender, 2, tmp_path, str(tmp_path), host_of=(0, 1))


def test_abort_queued_behind_data_still_arrives(tmp_path):
    spawn(abort_behind_queued_data, 2, tmp_path, str(tmp_path), host_of=(0, 1), timeout=150)


def test_killed_while_only_sent_to(tmp_path):
    spawn(killed_while_sent_to, 2, tmp_path, str(tmp_path), host_of=(0, 1), pg_timeout=60,
          expect_exit={1: -signal.SIGKILL})


@pytest.mark.parametrize("victim,hosts", [(2, (0, 0, 1)), (0, (0, 0, 1)), (2, (0, 1, 0, 1))],
                         ids=["alone-on-its-host", "host-leader", "second-on-its-host"])
def test_killed_rank_across_hosts(tmp_path, victim, hosts):
    spawn(killed_across_hosts, len(hosts), tmp_path, str(tmp_path), victim, host_of=hosts,
          expect_exit={victim: -signal.SIGKILL})


def killed_in_subgroups(rank, n, tmp):
    # Global rank 3 dies; its subgroups' errors name it by subgroup rank (1), so
    # they also say which global ranks the subgroup's ranks are.
    across = dist.new_group([1, 3])  # hosts 0 and 1: ZeroMQ
    within = dist.new_group([2, 3], group_desc="within_host_1")  # host 1: shared memory
    mine = {1: across, 2: within, 3: within}.get(rank)
    if mine is not None:
        dist.all_reduce(torch.ones(2), group=mine)
    if rank == 3:
        dist.all_reduce(torch.ones(2), group=across)
    open(os.path.join(tmp, f"rank{rank}-connected"), "w").close()
    if rank == 3:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(
                os.path.exists(os.path.join(tmp, f"rank{r}-connected")) for r in (1, 2)):
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGKILL)
    if rank == 1:
        expect_dist_error(lambda: dist.all_reduce(torch.ones(2), group=across),
                          "rank 1 (tcp://", "its ranks 0-1 are global ranks 1, 3]")
        # A later call fails on the caller's thread, naming them too.
        expect_dist_error(lambda: dist.all_reduce(torch.ones(2), group=across),
                          "already failed", "its ranks 0-1 are global ranks 1, 3]")
    if rank == 2:
        expect_dist_error(lambda: dist.all_reduce(torch.ones(2), group=within),
                          "rank 1 (pid", "(within_host_1): its ranks 0-1 are global ranks 2, 3]")
    stay_until_all_raised(tmp, rank, [1, 2])
    os._exit(0)  # skip destroy: the groups are broken


def test_subgroup_errors_name_global_ranks(tmp_path):
    spawn(killed_in_subgroups, 4, tmp_path, str(tmp_path), host_of=(0, 0, 1, 1),
          expect_exit={3: -signal.SIGKILL})


def mismatch_named_by_group_rank(rank, n, tmp):
    # Rank 3 (the second rank of host 1) passes one element more: every rank's
    # error names group ranks, not indices within a host.
    msg = expect_dist_error(lambda: dist.all_reduce(torch.ones(10 + (rank == 3))))
    assert "rank 3 runs allreduce" in msg or "but rank 2 runs allreduce" in msg, msg
    assert "rank 1 runs allreduce#0 11" not in msg, msg
    stay_until_all_raised(tmp, rank, range(n))
    os._exit(0)  # skip destroy: the group is broken


def test_mismatches_across_hosts(tmp_path):
    # ZeroMQ's header holds a shorter description than shared memory's.
    spawn(mismatches, 2, tmp_path, host_of=(0, 1))


def test_mismatch_across_hosts_names_group_ranks(tmp_path):
    spawn(mismatch_named_by_group_rank, 4, tmp_path, str(tmp_path), host_of=(0, 0, 1, 1))


def chunk_size_differs(rank, n, tmp):
    os.environ["OREG_CCL_ZMQ_CHUNK_BYTES"] = str(65536 if rank == 1 else 524288)
    with pytest.raises(ValueError, match="OREG_CCL_ZMQ_CHUNK_BYTES is .* it must be the same"):
        dist.init_process_group("oreg_ccl", init_method=f"file://{tmp}/store", rank=rank,
                                world_size=n, timeout=datetime.timedelta(seconds=60))
    os._exit(0)


def test_chunk_size_that_differs_between_hosts_fails_at_init(tmp_path):
    # Receivers drop frames above their own chunk size: without the check a
    # large collective would wait out the timeout.
    start = time.monotonic()
    spawn(chunk_size_differs, 2, tmp_path, str(tmp_path), host_of=(0, 1), init=False)
    assert time.monotonic() - start < 40


def test_hung_rank_across_hosts(tmp_path):
    # The single-host timeout checks, with the peer on another host: a rank
    # that stops participating times the collective out on the other.
    spawn(timeouts, 2, tmp_path, host_of=(0, 1))


def abort_wakes(rank, n):
    g = dist.new_group(list(range(n)))
    if rank == 0:
        # Blocked in a collective rank 1 never joins; another thread aborts.
        timer = threading.Timer(1.0, dist.distributed_c10d._abort_process_group, args=(g,))
        timer.start()
        start = time.monotonic()
        try:
            dist.all_reduce(torch.ones(3), group=g)
            err = None
        except dist.DistBackendError as e:
            err = e
        except ValueError as e:
            # c10d's logging wrapper looks the group up while handling our
            # error, and may find that the abort already unregistered it.
            err = e.__context__
        assert isinstance(err, dist.DistBackendError) and "aborted" in str(err), repr(err)
        assert time.monotonic() - start < 6
        timer.join()
    dist.barrier()


@pytest.mark.parametrize("hosts", [(0, 0), (0, 1)], ids=["one-host", "two-hosts"])
def test_abort_from_another_thread_wakes_collectives(tmp_path, hosts):
    spawn(abort_wakes, 2, tmp_path, host_of=hosts)


def never_joins(rank, n, tmp):
    if rank == 1:
        return  # never creates the group
    start = time.monotonic()
    with pytest.raises(Exception, match="(?i)timeout|timed out"):
        dist.init_process_group("oreg_ccl", init_method=f"file://{tmp}/lonely", rank=0, world_size=2,
                                timeout=datetime.timedelta(seconds=3))
    assert time.monotonic() - start < 15


def test_peer_that_never_appears_times_out(tmp_path):
    spawn(never_joins, 2, tmp_path, str(tmp_path), init=False, host_of=(0, 1))


def one_rank_cannot_bind(rank, n, tmp):
    # Rank 1 names an interface that does not exist: it raises ValueError at
    # once, and rank 0, waiting for its address, raises that cause well within
    # the group timeout (the store's own timeout said nothing about it).
    if rank == 1:
        os.environ["OREG_CCL_SOCKET_IFNAME"] = "no-such-if0"
    start = time.monotonic()
    with pytest.raises(ValueError if rank == 1 else dist.DistBackendError) as e:
        dist.init_process_group("oreg_ccl", init_method=f"file://{tmp}/store", rank=rank,
                                world_size=n, timeout=datetime.timedelta(seconds=60))
    assert "OREG_CCL_SOCKET_IFNAME=no-such-if0" in str(e.value), str(e.value)
    if rank == 0:
        assert "rank 1" in str(e.value) and "could not create the group" in str(e.value)
    assert time.monotonic() - start < 30


def test_a_rank_that_cannot_join_fails_group_creation_on_every_rank(tmp_path):
    spawn(one_rank_cannot_bind, 2, tmp_path, str(tmp_path), init=False, host_of=(0, 1))


def mesh_across_hosts(rank, n):
    # A 2-D DeviceMesh splits the group once per dimension: the replicate
    # groups span the hosts, the shard groups stay within one. Each split
    # creates a CPU and an openreg backend over the same store.
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("openreg", (2, 2), mesh_dim_names=("replicate", "shard"))
    for name, hosts in (("replicate", 2), ("shard", 1)):
        g = mesh.get_group(name)
        assert info_of(g, "openreg")["host_count"] == hosts
        t = torch.full((3,), float(rank), device=torch.device("openreg", rank))
        dist.all_reduce(t, group=g)
        peers = dist.get_process_group_ranks(g)
        assert t.cpu().tolist() == [float(sum(peers))] * 3, (name, peers)


def test_device_mesh_across_hosts(tmp_path):
    spawn(mesh_across_hosts, 4, tmp_path, host_of=(0, 0, 1, 1), init={"device_id": True})


def alltoall_with_split_sizes(rank, n, block, self_block, others_give_splits):
    # rows[p][q]: what rank p sends rank q. Rank 0 gives split sizes; its own
    # block may differ. The others give theirs too (uneven, as an MoE layer's:
    # rank 0's row and column stay equal) or none (all their blocks equal).
    rows = [[block] * n for _ in range(n)]
    rows[0][0] = self_block
    if others_give_splits:
        for p in range(1, n):
            for q in range(1, n):
                rows[p][q] = block + (p * q) % 3
    send = rows[rank]
    recv = [rows[q][rank] for q in range(n)]
    inp = torch.cat([torch.full((send[q],), 100.0 * rank + q) for q in range(n)])
    out = torch.empty(sum(recv))
    splits = (recv, send) if rank == 0 or others_give_splits else ()
    if not others_give_splits and block * 4 <= 4096:
        # The others' small equal blocks go through the hosts' first ranks,
        # rank 0's (split sizes given) directly: a clear mismatch (NCCL
        # accepts this call).
        expect_dist_error(lambda: dist.all_to_all_single(out, inp, *splits),
                          "mismatched collectives", "equal blocks of")
        return
    dist.all_to_all_single(out, inp, *splits)
    expected = torch.cat([torch.full((recv[q],), 100.0 * q + rank) for q in range(n)])
    assert torch.equal(out, expected), (rank, out, expected)


@pytest.mark.parametrize("block,self_block,others_give_splits",
                         [(2, 2, False), (2, 3, False), (2048, 2049, False), (2, 2, True)],
                         ids=["equal-small", "uneven-small", "uneven-large", "all-give-splits"])
def test_alltoall_with_split_sizes_given_by_some_ranks(tmp_path, block, self_block,
                                                      others_give_splits):
    spawn(alltoall_with_split_sizes, 4, tmp_path, block, self_block, others_give_splits,
          timeout=120, host_of=(0, 0, 1, 1))


def destroy_with_receives_in_flight(rank, n):
    # The receiver destroys its group while the sender's messages arrive and
    # the worker drives its receives: shutdown's check for unreceived messages
    # must not use the transport meanwhile (it did: crashes in libzmq, a
    # receive completed with another message).
    for _ in range(8):
        g = dist.new_group([0, 1])
        if rank == 0:
            dist.barrier()
            for i in range(400):
                dist.isend(torch.full((64,), float(i)), 1, group=g, tag=1)
            dist.destroy_process_group(g)
        else:
            bufs = [torch.zeros(64) for _ in range(400)]
            works = [dist.irecv(b, 0, group=g, tag=1) for b in bufs]
            dist.barrier()
            time.sleep(0.002)
            dist.destroy_process_group(g)
            for i, (work, b) in enumerate(zip(works, bufs)):
                try:
                    work.wait()
                    assert b[0].item() == float(i), (i, b[0].item())
                except dist.DistBackendError as e:
                    assert "shut down" in str(e), str(e)
        dist.barrier()


def test_destroy_with_receives_in_flight(tmp_path):
    spawn(destroy_with_receives_in_flight, 2, tmp_path, host_of=(0, 1), timeout=120)
