"""Steps/s of the training job: DDP on N openreg devices with oreg_ccl vs the same script on
N CPU processes with gloo, side by side in one run (issue 6's speed goal: >= 1.5x).

    python launch/bench_train.py [--devices 4] [--steps 200] [--strategy ddp] [--pairs 1] [--graph]
                                 [--graph-compile]

--graph adds a run of openreg with train.py --graph, the step captured as an openreg graph
and replayed (what a CUDA user does when launches bound a small model's step; the CPU has no
such thing, so its side stays eager); --graph-compile one with train.py --graph --compile
(Inductor's fused kernels, captured). Other options go to every run's train.py.

With --pairs N the two runs alternate N times (cpu, openreg, cpu, ...): every pair's ratio is
printed and the table shows the pair with the median ratio, since this 2-vCPU VM's speed drifts
by more than 10% between minutes.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, ROOT)
from train import WARMUP_STEPS  # noqa: E402


def run(devices, steps, strategy, device_type, extra):
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={devices}", os.path.join(ROOT, "train.py"), "--strategy", strategy,
               "--steps", str(steps), "--device-type", device_type, "--no-plot", "--out-dir", out,
               "--log-every", str(steps), *extra]
        # torchrun + gloo + DDP aborts at exit in about 1 of 10 runs on this
        # machine ("terminate called without an active exception"), also with
        # openreg not imported at all: retry that one failure (twice), nothing else.
        for attempt in range(3):
            r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if r.returncode == 0 or "terminate called without an active exception" not in r.stderr:
                break
            print(f"# {device_type} run hit gloo's abort at exit; retrying", flush=True)
        if r.returncode != 0:
            raise SystemExit(f"{device_type} run failed:\n{r.stderr[-4000:]}")
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
    return summary


def median(values, key=None):
    """The middle value (the lower of the two middle ones for an even count)."""
    return sorted(values, key=key)[(len(values) - 1) // 2]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--devices", type=int, default=4)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--strategy", default="ddp")
    p.add_argument("--pairs", type=int, default=1, help="alternating cpu/openreg runs")
    p.add_argument("--graph", action="store_true",
                   help="also run openreg with train.py --graph (the step captured and replayed)")
    p.add_argument("--graph-compile", action="store_true",
                   help="also run openreg with train.py --graph --compile")
    args, extra = p.parse_known_args()
    # (label, device type, backend, train.py's extra flags); the first is the reference.
    variants = [("cpu", "cpu", "gloo", []), ("openreg", "openreg", "oreg_ccl", [])]
    if args.graph:
        variants.append(("openreg+graph", "openreg", "oreg_ccl", ["--graph"]))
    if args.graph_compile:
        variants.append(("openreg+graph+compile", "openreg", "oreg_ccl", ["--graph", "--compile"]))
    pairs = []
    for i in range(args.pairs):
        rows = []
        for label, device_type, backend, flags in variants:
            s = run(args.devices, args.steps, args.strategy, device_type, extra + flags)
            rows.append((label, backend, s["steady_steps_per_second"], s["steps_per_second"],
                         s["final_loss"], s["steady_cpu_seconds_per_step"]))
        pairs.append(rows)
        if args.pairs > 1:
            print(f"# pair {i + 1}: " + ", ".join(
                f"{row[0]} {row[2]:.2f} / {rows[0][2]:.2f} steady steps/s = {row[2] / rows[0][2]:.2f}x"
                for row in rows[1:]), flush=True)
    rows = median(pairs, key=lambda rows: rows[1][2] / rows[0][2])
    if args.pairs > 1:
        for v, (label, *_) in enumerate(variants[1:], 1):
            ratios = sorted(r[v][2] / r[0][2] for r in pairs)
            print(f"# {label}: median of {args.pairs} pairs {median(ratios):.2f}x; ratios "
                  + ", ".join(f"{x:.2f}x" for x in ratios))
        print("# the table: the pair with the median openreg (eager) ratio")
    print(f"# {args.strategy}, {args.devices} processes, {args.steps} steps; steady = after the "
          f"first {WARMUP_STEPS} (warm-up) steps, all = every step")
    print(f"# cpu ms/step: CPU time of all ranks per steady step; cores busy: that over wall time "
          f"and the machine's {os.cpu_count()} cores")
    print(f"# {'device':<23}{'backend':<10}{'steady steps/s':>16}{'all steps/s':>13}{'final loss':>12}"
          f"{'cpu ms/step':>13}{'cores busy':>12}")
    for label, backend, steady, every, loss, cpu in rows:
        busy = cpu * steady / os.cpu_count()
        print(f"  {label:<23}{backend:<10}{steady:>16.2f}{every:>13.2f}{loss:>12.4f}"
              f"{cpu * 1e3:>13.1f}{busy:>11.0%}")
    for row in rows[1:]:
        print(f"# {row[0]}+{row[1]} / cpu+gloo: {row[2] / rows[0][2]:.2f}x steady, "
              f"{row[3] / rows[0][3]:.2f}x over all steps")


if __name__ == "__main__":
    main()
