"""``openreg-run``: launch the GPT training job (launch/train.py) on simulated devices.

    openreg-run                       # DDP on 4 openreg devices, 800 steps in 18-45 s
    openreg-run --devices 8 --strategy fsdp2 --bf16
    openreg-run --devices 4 --strategy tp --steps 100
    openreg-run --nodes 2 --devices 2 --strategy hsdp   # 2 simulated hosts x 2 devices

A thin layer over torchrun (``torch.distributed.run --standalone``): every option
other than --devices and --nodes is passed to the training script (listed by
``openreg-run --help``), and checked here first, with the device count against
the strategy and batch, so a typo fails once, before any process starts. With
--nodes M it starts M torchrun agents on this machine, one per simulated host (``--nnodes=M --node-rank=i``, each with its own
OREG_CCL_HOST_ID), so oreg_ccl uses shared memory within a host and ZeroMQ over
loopback TCP between hosts, as on a real cluster.
"""
import argparse
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time


def _train_script() -> str:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = os.path.join(root, "launch", "train.py")
    if not os.path.exists(script):
        raise SystemExit(f"openreg-run: {script} not found; install openreg from its source "
                         "checkout (pip install --no-build-isolation -e .)")
    return script


def _train_module():
    spec = importlib.util.spec_from_file_location("openreg_train_job", _train_script())
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # definitions only: the job runs under __main__
    return module


def main(argv=None) -> None:
    # No abbreviations: "--device cpu" is the training script's --device-type, not --devices.
    parser = argparse.ArgumentParser(prog="openreg-run", description=__doc__, add_help=False,
                                     allow_abbrev=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-h", "--help", action="store_true",
                        help="show this help and the training options, then exit")
    parser.add_argument("--devices", type=int, default=4,
                        help="simulated devices (= processes) per host")
    parser.add_argument("--nodes", type=int, default=1, help="simulated hosts")
    args, train_args = parser.parse_known_args(argv)
    train = _train_module()
    if args.help:
        parser.print_help()
        print("\ntraining options (launch/train.py):")
        train.parse_args(["--help"])  # prints them and exits
    if args.devices < 1 or args.nodes < 1:
        parser.error("--devices and --nodes must be at least 1")
    if args.devices > 64:
        parser.error("--devices: a simulated host has at most 64 devices (OPENREG_DEVICE_COUNT)")
    if args.nodes > 64:  # each is a torchrun agent on this machine, with --devices processes
        parser.error("--nodes: at most 64 simulated hosts")
    # A bad option, layout or checkpoint directory fails here, not once per rank.
    parsed = train.parse_args(train_args)
    layout = train.layout_error(parsed, args.devices * args.nodes, args.devices)
    if layout:
        parser.error(layout)
    try:
        checkpoint = train.checkpoint_error(parsed)
    except SystemExit as e:  # an unreadable checkpoint pointer
        parser.error(str(e).removeprefix("train.py: "))
    if checkpoint:
        parser.error(checkpoint)
    env = os.environ
    if "OPENREG_VISIBLE_DEVICES" in env:
        # Rank r of a simulated host uses its openreg:r; a narrower view would fail the ranks.
        parser.error("OPENREG_VISIBLE_DEVICES is set: openreg-run gives each rank a device of "
                     "its own (rank r of a host on openreg:r); unset it")
    count = env.get("OPENREG_DEVICE_COUNT", "8")
    if not count.isdigit() or not 1 <= int(count) <= 64:
        parser.error(f"OPENREG_DEVICE_COUNT={count!r}: must be an integer in 1..64")
    if int(count) < args.devices:
        env["OPENREG_DEVICE_COUNT"] = str(args.devices)
    if args.nodes == 1:
        _agent(["--standalone", f"--nproc-per-node={args.devices}", _train_script(), *train_args])
        return
    sys.exit(_run_nodes(args.nodes, args.devices, train_args, train))


def _agent(torchrun_args, where: str = "") -> None:
    """torchrun's main, with one line instead of its traceback when a rank fails
    or a signal stops it: the ranks printed their errors, and torchrun's
    traceback through its own frames and failure table would bury them."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun
    try:
        torchrun(torchrun_args)
    except ChildFailedError as e:
        failed = ", ".join(f"rank {r} (exit code {f.exitcode})" for r, f in sorted(e.failures.items()))
        print(f"openreg-run: training failed{where}: {failed}; the error is above", file=sys.stderr)
        sys.exit(1)
    except SignalException as e:  # SIGTERM / SIGINT: torchrun stopped its ranks
        print(f"openreg-run: stopped by {signal.Signals(e.sigval).name}{where}", file=sys.stderr)
        sys.exit(128 + e.sigval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(processes, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for p in processes:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass


def _agent_preexec(parent: int, train):
    """A Popen preexec_fn for an agent. Its own process group: a terminal's Ctrl-C reaches this
    process alone, which stops each agent once (a SIGINT from the terminal as well would cut
    torchrun's shutdown of its ranks short). And SIGTERM (torchrun then stops its ranks) when
    `parent` exits, SIGKILLed included: nothing else would stop it then."""
    def preexec():
        os.setpgid(0, 0)
        train.tie_to_parent(signal.SIGTERM, parent)
    return preexec


def _run_nodes(nodes: int, devices: int, train_args, train) -> int:
    """One torchrun agent per simulated host; the first failure stops them all."""
    port = free_port()
    agents = []
    for node in range(nodes):
        env = dict(os.environ, OREG_CCL_HOST_ID=f"node{node}")
        # torchrun's agent, through _agent: its failures are one line, as on one host.
        cmd = [sys.executable, "-c",
               f"import sys; from openreg.launcher import _agent; _agent(sys.argv[1:], ' on simulated host {node}')",
               f"--nnodes={nodes}", f"--node-rank={node}", f"--nproc-per-node={devices}",
               "--master-addr=127.0.0.1", f"--master-port={port}", _train_script(), *train_args]
        agents.append(subprocess.Popen(cmd, env=env, preexec_fn=_agent_preexec(os.getpid(), train)))
    failed = 0

    # SIGTERM / SIGHUP (a scheduler, a closed terminal) stop the agents too:
    # Python's default would end this process alone and leave them training.
    def stop(signum, frame):
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        while True:
            codes = [a.poll() for a in agents]
            failed = next((c for c in codes if c not in (None, 0)), 0)
            if failed or all(c == 0 for c in codes):
                break
            time.sleep(0.2)
    except KeyboardInterrupt:
        # A Ctrl-C or a SIGINT sent to this process alone (the agents have process groups of
        # their own). They get SIGTERM, which torchrun passes on to its ranks: a rank blocked
        # in a collective or a stream wait dies at once, where a SIGINT would wait until it
        # returns to Python, and its peer on the other host until then too.
        failed = 128 + signal.SIGINT
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for a in agents:
            if a.poll() is None:
                a.terminate()
        _wait(agents, timeout=30)  # one deadline for all: Ctrl-C ends in bounded time
        for a in agents:
            if a.poll() is None:
                a.kill()  # its ranks die with it (PR_SET_PDEATHSIG)
                a.wait()
    # The first agent that failed decides (the others got our SIGTERM).
    return abs(failed) if failed else max(abs(a.returncode) for a in agents)


if __name__ == "__main__":
    main(sys.argv[1:])
