"""Every collective x reduce op x dtype, world sizes 1-4, CPU and openreg tensors.

Each rank builds every rank's input from a seed, so the expected result is
computed locally with plain torch ops in float64/int64 (independently of the
backend) and compared with what oreg_ccl produced. One process group per
world size runs the whole matrix on both devices, to keep spawns few.
"""
import os
import resource
import time

import pytest
import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

from _harness import info_of, peer_mapping_allowed, single_copy_allowed, spawn

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]
ALL = FLOATS + INTS + [torch.bool]


def make(rank, shape, dtype, seed):
    """Rank `rank`'s input: small values so products and int sums stay exact."""
    g = torch.Generator().manual_seed(seed * 1009 + rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return (torch.randint(-8, 9, shape, generator=g).double() / 4 + 0.5).to(dtype)
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    lo = 0 if dtype == torch.uint8 else -3
    return torch.randint(lo, 4, shape, generator=g).to(dtype)


def wide(t):
    if t.dtype == torch.bool or t.dtype.is_complex:
        return t
    return t.double() if t.dtype.is_floating_point else t.long()


def reference(inputs, op, dtype, factor=None):
    """Reduce `inputs` (one tensor per rank) the textbook way."""
    x = torch.stack([wide(t) for t in inputs])
    n = len(inputs)
    if dtype == torch.bool:
        f = {
            "SUM": torch.any, "MAX": torch.any, "BOR": torch.any,
            "PRODUCT": torch.all, "MIN": torch.all, "BAND": torch.all,
        }
        if op == "BXOR":
            return (x.long().sum(0) % 2).bool()
        return f[op](x, dim=0)
    if op in ("SUM", "AVG", "PREMUL_SUM"):
        if op == "PREMUL_SUM":
            x = x * factor
        r = x.sum(0)
        if op == "AVG":
            r = torch.div(r, n, rounding_mode="trunc") if not dtype.is_floating_point else r / n
    elif op == "PRODUCT":
        r = x.prod(0)
    elif op == "MIN":
        r = x.min(0).values
    elif op == "MAX":
        r = x.max(0).values
    else:
        r = x[0]
        for t in x[1:]:
            r = {"BAND": torch.bitwise_and, "BOR": torch.bitwise_or, "BXOR": torch.bitwise_xor}[op](r, t)
    return r.to(dtype)


def ops_for(dtype):
    if dtype == torch.bool:
        return ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]
    if dtype.is_floating_point:
        return ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "PREMUL_SUM"]
    return ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]


def reduce_op(name, factor, device):
    if name != "PREMUL_SUM":
        return getattr(ReduceOp, name)
    if isinstance(factor, float):
        return dist._make_nccl_premul_sum(factor)
    return dist._make_nccl_premul_sum(torch.tensor([factor[0]], dtype=torch.float32, device=device))


def check(actual, expected, what):
    actual = actual.cpu()
    if expected.dtype in (torch.float16, torch.bfloat16):
        torch.testing.assert_close(actual, expected, rtol=1e-2, atol=1e-2, msg=lambda m: f"{what}: {m}")
    else:
        torch.testing.assert_close(actual, expected, msg=lambda m: f"{what}: {m}")


def run_allreduce(rank, n, device, seed):
    for dtype in ALL:
        for op in ops_for(dtype):
            for shape in [(7,), (3, 5)]:
                seed += 1
                factor = 0.5 if (op == "PREMUL_SUM" and shape == (7,)) else [2.0]
                inputs = [make(r, shape, dtype, seed) for r in range(n)]
                if shape == (3, 5):  # a transposed view: not contiguous
                    t = inputs[rank].t().contiguous().to(device, copy=True).t()
                else:
                    t = inputs[rank].to(device, copy=True)
                dist.all_reduce(t, op=reduce_op(op, factor, device))
                f = factor if isinstance(factor, float) else factor[0]
                check(t, reference(inputs, op, dtype, f), f"allreduce {op} {dtype} {shape}")
    # Large messages take reduce-scatter + all-gather (above the one-shot size).
    for dtype, op in [(torch.float32, "SUM"), (torch.bfloat16, "AVG"), (torch.int64, "MAX")]:
        seed += 1
        inputs = [make(r, (50_001,), dtype, seed) for r in range(n)]
        t = inputs[rank].to(device, copy=True)
        dist.all_reduce(t, op=getattr(ReduceOp, op))
        check(t, reference(inputs, op, dtype), f"large allreduce {op} {dtype}")
    # The barebones unsigned types (no ATen division kernel for AVG's).
    for dtype in (torch.uint16, torch.uint32, torch.uint64):
        for op in ("SUM", "AVG", "MAX"):
            seed += 1
            inputs = [make(r, (7,), torch.uint8, seed).to(dtype) for r in range(n)]
            t = inputs[rank].to(device, copy=True)
            dist.all_reduce(t, op=getattr(ReduceOp, op))
            check(t, reference(inputs, op, dtype), f"allreduce {op} {dtype}")
    # Complex sums; empty tensors.
    inputs = [make(r, (4,), torch.complex64, seed) for r in range(n)]
    t = inputs[rank].to(device, copy=True)
    dist.all_reduce(t)
    torch.testing.assert_close(t.cpu(), torch.stack(inputs).sum(0))
    e = torch.empty(0, device=device)
    dist.all_reduce(e)
    assert e.numel() == 0
    return seed


def run_coalesced(rank, n, device, seed):
    inputs = [[make(r, (5,), torch.float32, seed), make(r, (3,), torch.float64, seed + 1)]
              for r in range(n)]
    ts = [x.to(device, copy=True) for x in inputs[rank]]
    with dist._coalescing_manager(device=device):
        for t in ts:
            dist.all_reduce(t)
    for i, t in enumerate(ts):
        check(t, reference([inputs[r][i] for r in range(n)], "SUM", t.dtype), "coalesced allreduce")
    # all_gather_into_tensor / reduce_scatter_tensor, coalesced.
    ins = [make(rank, (4,), torch.float32, seed + 2), make(rank, (2, 3), torch.int32, seed + 3)]
    outs = [torch.empty(n * 4, device=device), torch.empty(n * 2, 3, dtype=torch.int32, device=device)]
    with dist._coalescing_manager(device=device, async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i.to(device, copy=True))
    cm.wait()
    check(outs[0], torch.cat([make(r, (4,), torch.float32, seed + 2) for r in range(n)]), "ag coalesced")
    check(outs[1], torch.cat([make(r, (2, 3), torch.int32, seed + 3) for r in range(n)]), "ag coalesced")
    full = [make(r, (n * 3,), torch.float32, seed + 4) for r in range(n)]
    out = torch.empty(3, device=device)
    with dist._coalescing_manager(device=device):
        dist.reduce_scatter_tensor(out, full[rank].to(device, copy=True), op=ReduceOp.AVG)
    check(out, reference(full, "AVG", torch.float32)[rank * 3:(rank + 1) * 3], "rs coalesced")
    # The deprecated list form (c10d's allgather_coalesced): outputs[rank][input].
    if device.type == "cpu":
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            ins = [make(rank, (4,), torch.float32, seed + 2), make(rank, (2, 3), torch.float32, seed + 3)]
            outs = [[torch.empty(4), torch.empty(2, 3)] for _ in range(n)]
            dist.all_gather_coalesced(outs, ins)
        for r in range(n):
            check(outs[r][0], make(r, (4,), torch.float32, seed + 2), "all_gather_coalesced")
            check(outs[r][1], make(r, (2, 3), torch.float32, seed + 3), "all_gather_coalesced")
    return seed + 5


def run_data_movement(rank, n, device, seed):
    for dtype in [torch.float32, torch.bfloat16, torch.int64, torch.bool]:
        seed += 1
        mk = lambda r, shape=(2, 3): make(r, shape, dtype, seed)  # noqa: E731
        # broadcast from the last rank, into a non-contiguous tensor.
        root = n - 1
        t = mk(rank).t().to(device, copy=True) if rank != root else mk(rank).t().to(device, copy=True)
        dist.broadcast(t, src=root)
        check(t, mk(root).t(), f"broadcast {dtype}")
        # all_gather (list) and all_gather_into_tensor.
        outs = [torch.empty(2, 3, dtype=dtype, device=device) for _ in range(n)]
        dist.all_gather(outs, mk(rank).to(device, copy=True))
        for r in range(n):
            check(outs[r], mk(r), f"all_gather {dtype}")
        # Outputs of different sizes (NCCL takes them: a broadcast per rank).
        outs = [torch.empty(r + 1, 2, dtype=dtype, device=device) for r in range(n)]
        dist.all_gather(outs, mk(rank, (rank + 1, 2)).to(device, copy=True))
        for r in range(n):
            check(outs[r], mk(r, (r + 1, 2)), f"uneven all_gather {dtype}")
        flat = torch.empty(n * 2, 3, dtype=dtype, device=device)
        dist.all_gather_into_tensor(flat, mk(rank).to(device, copy=True))
        check(flat, torch.cat([mk(r) for r in range(n)]), f"all_gather_into_tensor {dtype}")
        # gather / scatter to and from rank 0.
        gl = [torch.empty(2, 3, dtype=dtype, device=device) for _ in range(n)] if rank == 0 else None
        dist.gather(mk(rank).to(device, copy=True), gl, dst=0)
        if rank == 0:
            for r in range(n):
                check(gl[r], mk(r), f"gather {dtype}")
        out = torch.empty(2, 3, dtype=dtype, device=device)
        sl = [mk(r + 100).to(device, copy=True) for r in range(n)] if rank == 0 else None
        dist.scatter(out, sl, src=0)
        check(out, mk(rank + 100), f"scatter {dtype}")
        # all_to_all_single, uneven rows: rank r sends (r + 2p) % 3 + 1 rows to p.
        rows = lambda src, dst: (src + 2 * dst) % 3 + 1  # noqa: E731
        inp = mk(rank, (sum(rows(rank, p) for p in range(n)), 2))
        out = torch.empty(sum(rows(p, rank) for p in range(n)), 2, dtype=dtype, device=device)
        dist.all_to_all_single(out, inp.to(device, copy=True), [rows(p, rank) for p in range(n)],
                               [rows(rank, p) for p in range(n)])
        pieces = []
        for p in range(n):
            src = mk(p, (sum(rows(p, q) for q in range(n)), 2))
            start = sum(rows(p, q) for q in range(rank))
            pieces.append(src[start:start + rows(p, rank)])
        check(out, torch.cat(pieces), f"all_to_all_single {dtype}")
        # all_to_all_single, equal splits (across hosts: through each host's
        # first rank): block p of rank r is make(r * 10 + p).
        inp = torch.cat([mk(rank * 10 + p, (2, 3)) for p in range(n)])
        out = torch.empty(2 * n, 3, dtype=dtype, device=device)
        dist.all_to_all_single(out, inp.to(device, copy=True))
        check(out, torch.cat([mk(p * 10 + rank, (2, 3)) for p in range(n)]), f"all_to_all_single equal {dtype}")
        # all_to_all (lists), element p of rank r is make(r * 10 + p).
        outs = [torch.empty(3, dtype=dtype, device=device) for _ in range(n)]
        dist.all_to_all(outs, [mk(rank * 10 + p, (3,)).to(device, copy=True) for p in range(n)])
        for p in range(n):
            check(outs[p], mk(p * 10 + rank, (3,)), f"all_to_all {dtype}")
    return seed


def run_reductions(rank, n, device, seed):
    for dtype, op in [(torch.float32, "SUM"), (torch.bfloat16, "MAX"), (torch.int32, "BXOR"),
                      (torch.float64, "PREMUL_SUM"), (torch.float16, "AVG")]:
        seed += 1
        ins = [make(r, (n * 4,), dtype, seed) for r in range(n)]
        expect = reference(ins, op, dtype, 0.5)
        rop = reduce_op(op, 0.5, device)
        # reduce to the last rank; other ranks' tensors stay untouched.
        t = ins[rank].to(device, copy=True)
        dist.reduce(t, dst=n - 1, op=rop)
        check(t, expect if rank == n - 1 else ins[rank], f"reduce {op} {dtype}")
        # reduce_scatter_tensor and reduce_scatter (list).
        out = torch.empty(4, dtype=dtype, device=device)
        dist.reduce_scatter_tensor(out, ins[rank].to(device, copy=True), op=rop)
        check(out, expect[rank * 4:(rank + 1) * 4], f"reduce_scatter_tensor {op} {dtype}")
        out = torch.empty(4, dtype=dtype, device=device)
        dist.reduce_scatter(out, list(ins[rank].to(device, copy=True).chunk(n)), op=rop)
        check(out, expect[rank * 4:(rank + 1) * 4], f"reduce_scatter {op} {dtype}")
        # Parts of different sizes (NCCL takes them: a reduce per rank): part p
        # is the p + 1 elements from 2p of every rank's input.
        out = torch.empty(rank + 1, dtype=dtype, device=device)
        parts = [ins[rank][2 * p:3 * p + 1].to(device, copy=True) for p in range(n)]
        dist.reduce_scatter(out, parts, op=rop)
        check(out, expect[2 * rank:3 * rank + 1], f"uneven reduce_scatter {op} {dtype}")
    return seed


def matrix(rank, n):
    for device in [torch.device("cpu"), torch.device("openreg", rank)]:
        seed = 0
        seed = run_allreduce(rank, n, device, seed)
        seed = run_coalesced(rank, n, device, seed)
        seed = run_data_movement(rank, n, device, seed)
        seed = run_reductions(rank, n, device, seed)
    dist.barrier()
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": rank})
    assert objs == [{"rank": r} for r in range(n)]
    assert dist.get_backend() == "oreg_ccl"


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_every_collective(tmp_path, world_size):
    spawn(matrix, world_size, tmp_path, timeout=200)


def oversubscribed(rank, n):
    # More ranks than cores: waiting must block in the kernel, not spin.
    for count in (7, 300_001):
        t = torch.full((count,), float(rank))
        dist.all_reduce(t)
        assert torch.equal(t, torch.full((count,), float(sum(range(n)))))
    outs = [torch.empty(3, dtype=torch.int64) for _ in range(n)]
    dist.all_gather(outs, torch.full((3,), rank, dtype=torch.int64))
    assert [o[0].item() for o in outs] == list(range(n))
    for _ in range(20):
        dist.barrier()


def test_eight_ranks_on_two_cores(tmp_path):
    spawn(oversubscribed, 8, tmp_path, timeout=200)


def large_messages(rank, n, single_copy, peer_mapping=False):
    info = info_of()
    assert info["single_copy"] == single_copy, info
    # Several single-copy chunks each way: 4 MiB straight into the destination,
    # 256 KiB at a time into a reduction. On the CPU and from device memory,
    # which a peer copies through its mapping of it (peer_mapping) rather than
    # with process_vm_readv/writev.
    for device in [torch.device("cpu"), torch.device("openreg", rank)]:
        before = info_of()
        for dtype in [torch.float32, torch.bfloat16]:
            ins = [make(r, (n * 700_001,), dtype, 7 + r) for r in range(n)]
            t = ins[rank].to(device, copy=True)
            dist.all_reduce(t)
            check(t, reference(ins, "SUM", dtype), f"allreduce {dtype} {device}")
            t = ins[rank].to(device, copy=True)
            dist.reduce(t, dst=n - 1, op=ReduceOp.MAX)
            check(t, reference(ins, "MAX", dtype) if rank == n - 1 else ins[rank], f"reduce {dtype}")
            out = torch.empty(700_001, dtype=dtype, device=device)
            dist.reduce_scatter_tensor(out, ins[rank].to(device, copy=True))
            check(out, reference(ins, "SUM", dtype)[rank * 700_001:(rank + 1) * 700_001], "reduce_scatter")
        # Parts of unequal length (reduce-scatter + gather above 2 ranks); the
        # other ranks' buffers stay as they were.
        odd = [make(r, (700_003,), torch.float64, 11 + r) for r in range(n)]
        t = odd[rank].to(device, copy=True)
        dist.reduce(t, dst=1, op=ReduceOp.MIN)
        check(t, reference(odd, "MIN", torch.float64) if rank == 1 else odd[rank], "reduce, uneven parts")
        big = make(0, (3_000_001,), torch.float32, 99)  # 12 MB
        t = (big if rank == 0 else torch.zeros_like(big)).to(device, copy=True)
        dist.broadcast(t, src=0)
        check(t, big, "broadcast")
        if single_copy:
            # The root, idle while its peers read, writes part of each copy
            # itself (a shared copy); let it show once. Only if it wakes while
            # a peer still copies: give a loaded machine time.
            deadline = time.monotonic() + 20
            # On device memory, wait for what is asserted below: a chunk written
            # through the mapping (a shared copy may also go by process_vm_writev).
            key = ("peer_mapped_written" if device.type == "openreg" and peer_mapping
                   else "shared_chunks_written")
            while True:
                chunks = info_of()[key] - before[key]
                shown = torch.tensor([int(rank == 0 and chunks > 0),
                                      int(time.monotonic() > deadline)])
                dist.all_reduce(shown, op=ReduceOp.MAX)
                if shown[0]:
                    break
                assert not shown[1], "the broadcast root never took part in a shared copy"
                dist.broadcast(t, src=0)
            dist.broadcast(t, src=0)
            check(t, big, "broadcast, shared copy")
        flat = torch.empty(n * 1_500_000, device=device)
        dist.all_gather_into_tensor(flat, big[rank:rank + 1_500_000].to(device, copy=True))
        check(flat, torch.cat([big[r:r + 1_500_000] for r in range(n)]), "all_gather")
        out = torch.empty(n * 400_000, device=device)
        dist.all_to_all_single(out, (big[:n * 400_000] + rank).to(device, copy=True))
        check(out, torch.cat([big[rank * 400_000:(rank + 1) * 400_000] + p for p in range(n)]),
              "all_to_all")
        # A view 12 bytes into its storage: used in place, so peers copy from
        # and into an address that is not an allocation's.
        ins = [make(r, (n * 300_001,), torch.float32, 5 + r) for r in range(n)]
        base = torch.zeros(n * 300_001 + 3, device=device)
        view = base[3:]
        view.copy_(ins[rank].to(device))
        dist.all_reduce(view)
        check(view, reference(ins, "SUM", torch.float32), "allreduce, offset view")
        assert base[:3].eq(0).all().item()
        after = info_of()
        read = after["peer_mapped_read"] - before["peer_mapped_read"]
        written = after["peer_mapped_written"] - before["peer_mapped_written"]
        if device.type == "openreg" and single_copy and peer_mapping:
            assert read > 0, "no payload was read through mapped device memory"
            if rank == 0:  # the broadcast root's part of the shared copies
                assert written > 0, "no shared-copy chunk was written into mapped device memory"
        else:
            assert read == written == 0, f"{read}/{written} bytes through mapped memory on {device}"


@pytest.mark.parametrize("world_size", [2, 3])
def test_single_copy_every_collective_and_large_messages(tmp_path, world_size):
    # A 64-byte threshold sends nearly every message of the matrix through the
    # single-copy path (read straight from the sender's memory), and copies
    # them (and own blocks) with streaming stores, at every size and alignment.
    spawn(matrix, world_size, tmp_path, timeout=200,
          env={"OREG_CCL_SINGLE_COPY_BYTES": "64", "OREG_CCL_STREAMING_COPY_BYTES": "64"})
    (tmp_path / "large").mkdir()
    spawn(large_messages, world_size, tmp_path / "large", single_copy_allowed(),
          single_copy_allowed() and peer_mapping_allowed(), timeout=200)


def test_large_messages_through_the_ring_only(tmp_path):
    spawn(large_messages, 3, tmp_path, False, timeout=200, env={"OREG_CCL_SINGLE_COPY_BYTES": "0"})


def test_large_device_messages_without_peer_mapping(tmp_path):
    # Device memory read and written with process_vm_readv/writev, as when a
    # peer's memory cannot be mapped.
    if not single_copy_allowed():
        pytest.skip("process_vm_readv between processes is not permitted here")
    spawn(large_messages, 2, tmp_path, single_copy_allowed(), False, timeout=200,
          env={"OREG_CCL_PEER_MAPPING": "0"})


def unopenable_peer_memory(rank, n):
    dev = torch.device("openreg", rank)
    torch.openreg.set_device(dev)
    info = lambda: info_of(device=f"openreg:{rank}")  # noqa: E731
    ins = [make(r, (n * 700_001,), torch.float32, 3 + r) for r in range(n)]
    expected = reference(ins, "SUM", torch.float32)
    t = ins[rank].to(dev)
    # The group's first device collectives compare the ranks' devices through
    # the store, which opens files: done before the limit below.
    for _ in range(2):
        dist.all_reduce(torch.ones(1, device=dev))
        dist.barrier()
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    before = info()
    try:
        if rank == 1:
            # Out of file descriptors: opening rank 0's device memory fails,
            # as it would when the process is at its limit. A limit of 3
            # leaves no number to allocate beyond stdin/stdout/stderr, not
            # even one another thread frees meanwhile (at the lowest free
            # number, the retry a second into a slow collective once found one).
            resource.setrlimit(resource.RLIMIT_NOFILE, (3, limits[1]))
        # Rank 0 sends only once rank 1 is at its limit: rank 1's transport
        # opens a sender's memory as soon as a message's header arrives.
        dist.barrier()
        dist.all_reduce(t)
        torch.openreg.synchronize()
        middle = info()
    finally:  # before anything imports or opens a file (a failure's report too)
        resource.setrlimit(resource.RLIMIT_NOFILE, limits)
    check(t, expected, "allreduce, peer memory not mapped")
    if rank == 0:  # the messages did go through mapped memory where it could be opened
        assert middle["peer_mapped_read"] > before["peer_mapped_read"], middle
    else:  # rank 1 tried to open rank 0's and read with process_vm_readv instead
        assert middle["peer_mapped_read"] == before["peer_mapped_read"], middle
    dist.barrier()
    time.sleep(1.2)  # a failed opening is retried a second later
    t = ins[rank].to(dev)
    dist.all_reduce(t)
    check(t, expected, "allreduce, peer memory mapped after all")
    assert info()["peer_mapped_read"] > middle["peer_mapped_read"], info()


def test_peer_memory_mapped_once_descriptors_are_back(tmp_path):
    if not (single_copy_allowed() and peer_mapping_allowed()):
        pytest.skip("single-copy reads or peer memory mapping are not permitted here")
    spawn(unopenable_peer_memory, 2, tmp_path, timeout=120)


def gather_scatter_tensors(rank, n):
    # Contiguous list tensors are written and read in place (from 1 MiB with
    # the shared copy); strided ones go through a packed buffer; the root's own
    # block may be its input or output tensor itself. Root: the last rank.
    root = n - 1
    for device in [torch.device("cpu"), torch.device("openreg", rank)]:
        for numel in (5, 300_001):
            blocks = [make(r, (numel,), torch.float32, 60) for r in range(n)]
            for layout in ("contiguous", "strided", "own block aliased"):
                if rank != root:
                    outs = None
                elif layout == "strided":
                    outs = [torch.zeros(numel, 2, device=device)[:, 1] for _ in range(n)]
                else:
                    outs = [torch.zeros(numel, device=device) for _ in range(n)]
                mine = blocks[rank].to(device, copy=True)
                if rank == root and layout == "own block aliased":
                    outs[root].copy_(mine)
                    mine = outs[root]
                dist.gather(mine, outs, dst=root)
                if rank == root:
                    for r in range(n):
                        check(outs[r], blocks[r], f"gather {layout} {numel} from {r}")
                ins = None
                if rank == root:
                    if layout == "strided":
                        ins = [torch.zeros(numel, 2, device=device)[:, 0] for _ in range(n)]
                        for r in range(n):
                            ins[r].copy_(blocks[r])
                    else:
                        ins = [b.to(device, copy=True) for b in blocks]
                out = torch.zeros(numel, device=device)
                if rank == root and layout == "own block aliased":
                    out = ins[root]
                dist.scatter(out, ins, src=root)
                check(out, blocks[rank], f"scatter {layout} {numel}")


def test_gather_scatter_in_place_and_packed(tmp_path):
    spawn(gather_scatter_tensors, 3, tmp_path, timeout=120)


def uneven_outputs_inside_later_inputs(rank, n):
    # Uneven list forms, where each rank's output lies inside another rank's
    # block of its own input list (a later one for rank 0): every block is
    # reduced or sent before any output is written, as with gloo.
    sizes = [2, 1, 2]
    for device in [torch.device("cpu"), torch.device("openreg", rank)]:
        ins = [torch.full((s,), rank + 1.0, device=device) for s in sizes]
        theirs = (rank + 2) % n  # a block of this rank's input list other than its own
        out = ins[theirs][: sizes[rank]] if sizes[theirs] >= sizes[rank] else torch.zeros(sizes[rank], device=device)
        dist.reduce_scatter(out, ins)
        check(out, torch.full((sizes[rank],), 6.0), f"uneven reduce_scatter into input {theirs}")
        src = torch.full((sizes[rank],), 10.0 * (rank + 1), device=device)
        outs = [torch.zeros(s, device=device) for s in sizes]
        if sizes[theirs] >= sizes[rank]:
            outs[theirs][: sizes[rank]].copy_(src)
            src = outs[theirs][: sizes[rank]]
        dist.all_gather(outs, src)
        for r in range(n):
            check(outs[r], torch.full((sizes[r],), 10.0 * (r + 1)), f"uneven all_gather from {r}")


def test_uneven_outputs_inside_later_inputs(tmp_path):
    spawn(uneven_outputs_inside_later_inputs, 3, tmp_path, timeout=120)


def strided_in_place_forms(rank, n):
    # NCCL's in-place forms on strided tensors (a column of a wider buffer):
    # the block is this rank's run of the same evenly spaced elements.
    for device in [torch.device("cpu"), torch.device("openreg", rank)]:
        for k in (1, 3, 70_000):
            base = torch.full((n * k, 2), -1.0, device=device)
            out = base[:, 1]
            out[rank * k:(rank + 1) * k] = float(rank)
            dist.all_gather_into_tensor(out, out[rank * k:(rank + 1) * k])
            check(base[:, 1], torch.arange(n).float().repeat_interleave(k), f"all_gather {k}")
            check(base[:, 0], torch.full((n * k,), -1.0), f"all_gather {k}: column 0 kept")
            base = torch.full((n * k, 2), -1.0, device=device)
            inp = base[:, 0]
            inp.copy_(torch.arange(n * k, dtype=torch.float32) + rank)
            dist.reduce_scatter_tensor(inp[rank * k:(rank + 1) * k], inp, op=ReduceOp.MAX)
            expect = torch.arange(rank * k, (rank + 1) * k, dtype=torch.float32) + (n - 1)
            check(base[rank * k:(rank + 1) * k, 0], expect, f"reduce_scatter {k}")
            check(base[:, 1], torch.full((n * k,), -1.0), f"reduce_scatter {k}: column 1 kept")
        with pytest.raises(ValueError, match="other than as block"):  # another rank's block
            other = (rank + 1) % n
            dist.all_gather_into_tensor(out, out[other * k:(other + 1) * k])


def test_strided_in_place_forms(tmp_path):
    spawn(strided_in_place_forms, 3, tmp_path, timeout=120)
