"""Runtime and operator speed: openreg vs CPU eager, side by side in one run.

Prints one table (operation, CPU time, openreg time, ratio openreg/CPU). Times
include everything a user waits for: openreg runs end with a synchronize.
Both sides use the same torch thread count.

    python launch/bench_ops.py [--quick]
"""
import argparse
import time

import torch


def timeit(fn, sync=None, iters=100, warmup=10, min_time=0.3):
    for _ in range(warmup):
        fn()
    if sync:
        sync()
    n = 0
    start = time.perf_counter()
    while True:
        for _ in range(iters):
            fn()
        n += iters
        if sync:
            sync()
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            return elapsed / n


def fmt(seconds):
    if seconds < 1e-3:
        return f"{seconds * 1e6:9.2f} us"
    if seconds < 1:
        return f"{seconds * 1e3:9.2f} ms"
    return f"{seconds:9.2f} s "


def rows(quick):
    dev = "openreg"
    sync = torch.openreg.synchronize

    # Launch overhead of an empty kernel, measured inside C++ (no Python in the loop).
    n = 20000
    torch.openreg._C._launch_empty(1000)
    yield ("empty kernel launch (C++ loop)", None, torch.openreg._C._launch_empty(n) * 1e-6,
           "host cost per orLaunchKernel")

    # The same from Python: a no-op ATen call on CPU vs an empty kernel launch.
    yield ("no-op call from Python", timeit(lambda: torch.empty(0)),
           timeit(lambda: torch.openreg._C._sleep(0), sync), "torch.empty(0) vs _sleep(0) launch")

    a_cpu, b_cpu = torch.randn(100), torch.randn(100)
    a_dev, b_dev = a_cpu.to(dev), b_cpu.to(dev)
    host_dst = torch.empty(100)
    dev_dst = torch.empty(100, device=dev)
    yield ("H2D copy, 100 floats", timeit(lambda: host_dst.copy_(a_cpu)),
           timeit(lambda: dev_dst.copy_(a_cpu), sync), "CPU: host-to-host copy_")
    yield ("add, 100 floats", timeit(lambda: a_cpu + b_cpu), timeit(lambda: a_dev + b_dev, sync),
           "latency incl. launch")

    big = 1 << 24
    x_cpu, y_cpu = torch.randn(big), torch.randn(big)
    x_dev, y_dev = x_cpu.to(dev), y_cpu.to(dev)
    yield ("add, 16M floats", timeit(lambda: x_cpu + y_cpu, iters=3, warmup=2),
           timeit(lambda: x_dev + y_dev, sync, iters=3, warmup=2), "throughput")
    del x_cpu, y_cpu, x_dev, y_dev

    sizes = [1024] if quick else [1024, 4096]
    for s in sizes:
        m_cpu = torch.randn(s, s)
        m_dev = m_cpu.to(dev)
        iters = 3 if s <= 1024 else 1
        yield (f"matmul {s}x{s}", timeit(lambda: m_cpu @ m_cpu, iters=iters, warmup=1, min_time=0.5),
               timeit(lambda: m_dev @ m_dev, sync, iters=iters, warmup=1, min_time=0.5), "throughput")


def step_time(device, sanitize=False, compile=False):
    """Seconds per AdamW training step of the small GPT (launch/models/gpt.py) on `device`,
    its model compiled by Inductor if `compile` (compiled during the warm-up steps)."""
    import os
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from models.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig()).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    if compile:
        model = torch.compile(model)
    x = torch.randint(0, 256, (16, 64)).to(device)
    y = torch.randint(0, 256, (16, 64)).to(device)

    def step():
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    sync = torch.openreg.synchronize if device == "openreg" else None
    if sanitize:
        torch.openreg.sanitizer.enable()
    return timeit(step, sync, iters=3, warmup=2, min_time=1.0)


def train_step_rows():
    """The training step, each side in a fresh process, so that neither inherits the
    other's OpenMP teams, allocator caches or warmed-up kernels."""
    import subprocess
    import sys

    def fresh(*args):
        out = subprocess.run([sys.executable, __file__, "--step", *args], check=True,
                             capture_output=True, text=True).stdout
        return float(out.split()[-1])

    cpu = fresh("cpu")
    yield ("GPT training step (AdamW)", cpu, fresh("openreg"), "2 layers, d=128, batch 16x64")
    yield ("  same, race checker on", cpu, fresh("openreg", "--sanitize"), "OPENREG_SANITIZER=1")
    yield ("  same, torch.compile (Inductor)", fresh("cpu", "--compile"),
           fresh("openreg", "--compile"), "model compiled on both sides")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="skip the 4096 matmul")
    parser.add_argument("--step", choices=["cpu", "openreg"], help=argparse.SUPPRESS)
    parser.add_argument("--sanitize", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--compile", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:  # one side of the training-step rows, in its own process
        print(step_time(args.step, args.sanitize, args.compile))
        return
    print(f"# torch {torch.__version__}, threads {torch.get_num_threads()}")
    print(f"# {'operation':<32}{'CPU':>13}{'openreg':>13}{'openreg/CPU':>13}  note")
    import itertools
    for name, cpu, dev, note in itertools.chain(rows(args.quick), train_step_rows()):
        ratio = f"{dev / cpu:10.2f}x" if cpu else "         -"
        cpu_s = fmt(cpu) if cpu else "        -   "
        print(f"  {name:<32}{cpu_s:>13}{fmt(dev):>13}{ratio:>13}  {note}")


if __name__ == "__main__":
    main()
