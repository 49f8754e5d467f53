"""nccl-tests-style benchmark of oreg_ccl against gloo, in the same run.

    PYTHONPATH=. python launch/bench_collectives.py --world-sizes 2 4 8 --max-bytes 16M
    PYTHONPATH=. python launch/bench_collectives.py --hosts 2 --world-sizes 2 4 --min-bytes 64K

With --hosts H the ranks are spread over H simulated hosts (OREG_CCL_HOST_ID):
oreg_ccl then talks ZeroMQ over loopback TCP between hosts (shared memory
within one), and gloo uses TCP as always: the cross-host comparison.

For every collective and size, each rank times 5 batches of calls (~20 ms each,
after a warm-up); per batch the slowest rank's average counts, and the median
batch is reported. algbw = size / time; busbw applies
nccl-tests' factors (allreduce 2(n-1)/n, allgather / reduce-scatter / alltoall /
gather / scatter (n-1)/n, broadcast / reduce / sendrecv 1), so it is comparable
across world sizes.
By default both backends move CPU tensors, over one process group each, in
the same processes. With --device openreg, oreg_ccl moves openreg tensors
(rank r on openreg:r, as nccl-tests moves device buffers) and each batch ends
with torch.openreg.synchronize(), so it is timed to completion; gloo, which has
no openreg support, still moves CPU tensors. The footer prints memcpy bandwidth
measured in the same run and the ratios the issue asks about.
"""
import argparse
import datetime
import functools
import os
import tempfile
import time
import warnings

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

COLLECTIVES = {
    # name: nccl-tests' busbw factor for n ranks
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
    "sendrecv": lambda n: 1.0,
}


def parse_bytes(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * units[s[-1].upper()]) if s[-1].upper() in units else int(s)


def make_op(name, nbytes, n, group, device="cpu"):
    """Buffers for one call of `name` moving `nbytes` in total (nccl-tests' size)."""
    count = max(n, nbytes // 4 // n * n)
    empty = functools.partial(torch.empty, device=device)
    ones = functools.partial(torch.ones, device=device)
    if name == "all_reduce":
        t = ones(count)
        return lambda: dist.all_reduce(t, group=group)
    if name == "all_gather":
        out, inp = empty(count), ones(count // n)
        return lambda: dist.all_gather_into_tensor(out, inp, group=group)
    if name == "reduce_scatter":
        out, inp = empty(count // n), ones(count)
        return lambda: dist.reduce_scatter_tensor(out, inp, group=group)
    if name == "all_to_all":
        out, inp = empty(count), ones(count)
        return lambda: dist.all_to_all_single(out, inp, group=group)
    if name == "broadcast":
        t = ones(count)
        return lambda: dist.broadcast(t, src=0, group=group)
    if name == "reduce":
        t = ones(count)
        return lambda: dist.reduce(t, dst=0, group=group)
    rank = dist.get_rank(group)
    if name == "gather":
        inp = ones(count // n)
        outs = [empty(count // n) for _ in range(n)] if rank == 0 else None
        return lambda: dist.gather(inp, outs, dst=0, group=group)
    if name == "scatter":
        out = empty(count // n)
        ins = [ones(count // n) for _ in range(n)] if rank == 0 else None
        return lambda: dist.scatter(out, ins, src=0, group=group)
    # sendrecv: every rank sends `nbytes` to the next and receives as much
    # from the previous one, at once (nccl-tests' sendrecv).
    send, recv = ones(count), empty(count)
    nxt, prev = (rank + 1) % n, (rank - 1) % n

    def sendrecv():
        for req in (dist.isend(send, nxt, group=group), dist.irecv(recv, prev, group=group)):
            req.wait()
    return sendrecv


def timed(fn, group, sync, reps=5):
    """Seconds per call: the median over `reps` batches of the slowest rank's
    average (a batch lasts ~20 ms; a median keeps one scheduler hiccup of the
    2-core VM from dominating microsecond-scale rows, for both backends alike)."""
    for _ in range(3):
        fn()
    sync()
    dist.barrier(group=group)
    start = time.perf_counter()
    fn()
    sync()
    one = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    dist.all_reduce(one, op=dist.ReduceOp.MAX)  # every rank must run the same count
    iters = int(max(3, min(500, 0.02 / max(one.item(), 1e-7))))
    batches = []
    for _ in range(reps):
        dist.barrier(group=group)
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        batches.append((time.perf_counter() - start) / iters)
    per_batch = torch.tensor(batches, dtype=torch.float64)
    dist.all_reduce(per_batch, op=dist.ReduceOp.MAX)  # the slowest rank decides
    return per_batch.median().item()


def worker(rank, n, store_dir, sizes, queue, hosts, names, device):
    warnings.filterwarnings("ignore", category=FutureWarning)
    if hosts > 1:
        os.environ["OREG_CCL_HOST_ID"] = f"bench-host-{rank * hosts // n}"
    dist.init_process_group("oreg_ccl", init_method=f"file://{store_dir}/store", rank=rank,
                            world_size=n, timeout=datetime.timedelta(seconds=300))
    gloo = dist.new_group(backend="gloo")
    ours = dist.group.WORLD
    on_device = device == "openreg"
    if on_device:  # a device per rank of a host (main() provides enough)
        host = rank * hosts // n
        torch.openreg.set_device(sum(1 for r in range(rank) if r * hosts // n == host))
    no_sync = lambda: None  # noqa: E731
    rows = []
    for name in names:
        factor = COLLECTIVES[name]
        for nbytes in sizes:
            row = {"name": name, "bytes": nbytes}
            for label, group in (("oreg_ccl", ours), ("gloo", gloo)):
                ours_on_device = on_device and label == "oreg_ccl"
                op = make_op(name, nbytes, n, group, device if ours_on_device else "cpu")
                t = timed(op, group, torch.openreg.synchronize if ours_on_device else no_sync)
                algbw = nbytes / t / 1e9
                row[label] = (t * 1e6, algbw, algbw * factor(n))
            rows.append(row)
    if rank == 0:
        queue.put(rows)
    dist.destroy_process_group()


def memcpy_gbps(reps=5):
    """One core's copy bandwidth: the median of `reps` batches of 10 copies
    (a single batch varied 14-22 GB/s on this VM)."""
    src, dst = torch.ones(16 << 20), torch.empty(16 << 20)  # 64 MiB
    dst.copy_(src)
    rates = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(10):
            dst.copy_(src)
        rates.append(10 * src.nbytes / (time.perf_counter() - start) / 1e9)
    return sorted(rates)[reps // 2]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--world-sizes", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--min-bytes", default="1K")
    p.add_argument("--max-bytes", default="16M")
    p.add_argument("--hosts", type=int, default=1, help="simulated hosts the ranks are spread over")
    p.add_argument("--device", choices=["cpu", "openreg"], default="cpu",
                   help="where oreg_ccl's tensors live (gloo's are always on the CPU)")
    p.add_argument("--collectives", nargs="+", choices=list(COLLECTIVES), default=list(COLLECTIVES))
    args = p.parse_args()
    lo, hi = parse_bytes(args.min_bytes), parse_bytes(args.max_bytes)
    sizes = []
    s = lo
    while s < hi:
        sizes.append(s)
        s *= 8
    sizes.append(hi)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # Each rank of a simulated host needs a device of its own (oreg_ccl refuses
    # two ranks of a host on one device, as NCCL does).
    per_host = max(-(-n // args.hosts) for n in args.world_sizes)
    if int(os.environ.get("OPENREG_DEVICE_COUNT", "8")) < per_host:
        os.environ["OPENREG_DEVICE_COUNT"] = str(per_host)
    ctx = mp.get_context("spawn")
    copy_bw = memcpy_gbps()
    print(f"# memcpy bandwidth (64 MiB, 1 thread, median of 5): {copy_bw:.2f} GB/s")
    for n in args.world_sizes:
        queue = ctx.SimpleQueue()
        with tempfile.TemporaryDirectory() as tmp:
            work = (n, tmp, sizes, queue, args.hosts, args.collectives, args.device)
            procs = [ctx.Process(target=worker, args=(r, *work)) for r in range(n)]
            for pr in procs:
                pr.start()
            while queue.empty():  # a rank that died must not leave us waiting
                dead = [r for r, pr in enumerate(procs) if pr.exitcode not in (None, 0)]
                if dead:
                    for pr in procs:
                        pr.kill()
                    raise SystemExit(f"bench_collectives: world size {n}: rank {dead[0]} failed "
                                     f"(exit code {procs[dead[0]].exitcode}); its error is above")
                time.sleep(0.2)
            rows = queue.get()
            for pr in procs:
                pr.join()
        where = f", {args.hosts} simulated hosts (ZeroMQ between them)" if args.hosts > 1 else ""
        tensors = ("oreg_ccl on openreg tensors, gloo on CPU tensors" if args.device == "openreg"
                   else "CPU tensors")
        print(f"\n# world size {n}{where}, float32, {tensors}")
        print(f"# {'collective':>14} {'size(B)':>10} {'count':>9} |"
              f" {'oreg_ccl time(us)':>17} {'algbw':>7} {'busbw':>7} |"
              f" {'gloo time(us)':>13} {'algbw':>7} {'busbw':>7} | {'speedup':>7}")
        big, small, net = [], [], []
        for r in rows:
            (ot, oa, ob), (gt, ga, gb) = r["oreg_ccl"], r["gloo"]
            print(f"  {r['name']:>14} {r['bytes']:>10} {r['bytes'] // 4:>9} |"
                  f" {ot:>17.1f} {oa:>7.2f} {ob:>7.2f} | {gt:>13.1f} {ga:>7.2f} {gb:>7.2f} |"
                  f" {gt / ot:>6.1f}x")
            if r["bytes"] >= 16 << 20:
                big.append(ob / gb)
            if r["bytes"] <= 64 << 10:
                small.append(ot / gt)
            if r["bytes"] >= 64 << 10:
                net.append(ob / gb)
        allreduce_busbw = max((r["oreg_ccl"][2] for r in rows if r["name"] == "all_reduce"),
                              default=None)
        print(f"# Avg bus bandwidth (oreg_ccl): "
              f"{sum(r['oreg_ccl'][2] for r in rows) / len(rows):.2f} GB/s")
        if args.hosts > 1:
            if net:
                print(f"# across hosts, >= 64 KiB: busbw oreg_ccl / gloo, worst {min(net):.2f}x"
                      f" (goal >= 1)")
            continue
        if big:
            print(f"# >= 16 MiB: busbw oreg_ccl / gloo, worst {min(big):.1f}x (goal >= 5x)")
        if small:
            print(f"# <= 64 KiB: latency oreg_ccl / gloo, worst {max(small):.3f} (goal <= 0.05)")
        if allreduce_busbw is not None:
            print(f"# best all_reduce busbw / memcpy: {allreduce_busbw / copy_bw:.2f}"
                  f" (goal >= 0.5 at 2 ranks)")


if __name__ == "__main__":
    main()
