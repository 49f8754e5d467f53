import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

from _processes import descendants


def _native_stacks(pids: list[int]) -> str:
    """Every thread's native stack of each process (gdb when installed, else
    what the kernel says each thread waits in), for a hang's report."""
    out = []
    for pid in pids:
        out.append(f"--- pid {pid}")
        if shutil.which("gdb"):
            r = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"],
                               capture_output=True, text=True, timeout=120)
            frames = [line for line in r.stdout.splitlines() if line.startswith(("#", "Thread"))]
            out.append("\n".join(frames) if frames else f"(gdb found no frames: {r.stderr.strip()})")
            continue
        for task in sorted(os.listdir(f"/proc/{pid}/task")):
            try:
                with open(f"/proc/{pid}/task/{task}/wchan") as f:
                    out.append(f"thread {task}: waits in {f.read() or '-'}")
            except OSError:
                pass
    return "\n".join(out)


def run_python(code: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter (clean device state, own env knobs).
    A run past `timeout` fails with the native stacks of its processes."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    args = [sys.executable, "-c", textwrap.dedent(code)]
    # A session of its own: its whole group is stopped (nothing forks while
    # the stacks are read) and then killed, so no descendant keeps the pipes open.
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=full_env, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGSTOP)
        tree = [proc.pid] + descendants(proc.pid)
        try:
            stacks = _native_stacks(tree)
        except (OSError, subprocess.SubprocessError) as e:
            stacks = f"(no stacks: {e})"
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.killpg(proc.pid, signal.SIGKILL)
        try:
            stdout, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            stdout, stderr = "(pipes held open)", ""
        pytest.fail(f"subprocess ran past {timeout} s; stdout:\n{stdout}\nstderr:\n{stderr}\n"
                    f"native stacks:\n{stacks}", pytrace=False)
    return subprocess.CompletedProcess(args, proc.returncode, stdout, stderr)


@pytest.fixture
def python():
    return run_python
