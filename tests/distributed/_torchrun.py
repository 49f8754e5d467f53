"""Helpers for the tests that launch real `torchrun` jobs (test_netns_torchrun.py,
test_elastic_restart.py): free ports, the environment the workers need, and
killing whole process trees (torchrun starts each worker in its own session,
so killing torchrun's process group would miss them).
"""
import os
import signal
import subprocess
import sys
import time

from openreg.launcher import free_port  # noqa: F401  (re-exported for the tests)

# tests/, for _processes (also when a worker runs a test file as its script).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _processes import descendants  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(cmd, timeout, **kwargs):
    """subprocess.run(cmd, capture_output=True, text=True) for launchers: on a
    timeout the whole process tree is killed (torchrun's workers live in their
    own sessions, so killing torchrun alone would leave them running)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def worker_env(**extra):
    """The environment for torchrun and its workers: this checkout's openreg
    first on the path (``import torch`` autoloads whichever openreg it finds)."""
    env = dict(os.environ)
    for k in ("OREG_CCL_HOST_ID", "OREG_CCL_SOCKET_IFNAME", "MASTER_ADDR", "MASTER_PORT", "RANK",
              "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_RUN_ID"):
        env.pop(k, None)
    env["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in [env.get("PYTHONPATH")] if p])
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def torchrun_cmd(*args):
    return [sys.executable, "-m", "torch.distributed.run", *map(str, args)]


def kill_tree(proc):
    """SIGKILL a Popen and every process below it (by pid), then reap it."""
    if proc.poll() is None:
        pids = descendants(proc.pid)
        for pid in [proc.pid] + pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass


def wait_all(procs, timeout):
    """Wait for every Popen until a shared deadline; returns the names still running."""
    deadline = time.monotonic() + timeout
    hung = []
    for name, p in procs.items():
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            hung.append(name)
    return hung


def tail(path, n=60):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return "(no output)"


def pids_in(directory):
    """Worker pids recorded as files named pid.* in `directory`."""
    pids = []
    for name in os.listdir(directory):
        if name.startswith("pid."):
            with open(os.path.join(directory, name)) as f:
                pids += [int(x) for x in f.read().split()]
    return pids


def kill_pids(pids, marker):
    """SIGKILL the processes in `pids` still running whose command line contains
    `marker` (so a recycled pid is never hit)."""
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() not in f.read():
                    continue
            os.kill(pid, signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass
