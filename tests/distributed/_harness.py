"""Multi-process runner for the oreg_ccl tests.

``spawn(fn, world_size, tmp_path)`` starts ``world_size`` fresh interpreters
(start method "spawn": the openreg driver refuses forked children), each
joining an oreg_ccl process group over a FileStore in ``tmp_path`` (no ports),
runs ``fn(rank, world_size, *args)`` and tears the group down. A hard deadline
kills stragglers, every rank's traceback is reported, and afterwards no
shared-memory object of these processes may be left in /dev/shm.
"""
import ctypes
import datetime
import functools
import glob
import os
import subprocess
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _entry(rank, fn, world_size, tmp, args, pg_timeout, init, env, host_of):
    os.environ.update({k: v.format(rank=rank) for k, v in env.items()})  # "{rank}": per rank
    if host_of is not None:
        os.environ["OREG_CCL_HOST_ID"] = f"simhost{host_of[rank]}"
    try:
        if init:
            kwargs = init if isinstance(init, dict) else {}
            device_id = kwargs.get("device_id")
            dist.init_process_group(
                "oreg_ccl",
                init_method=f"file://{tmp}/store",
                rank=rank,
                world_size=world_size,
                timeout=datetime.timedelta(seconds=pg_timeout),
                device_id=torch.device("openreg", rank) if device_id else None,
            )
        fn(rank, world_size, *args)
        if dist.is_initialized():
            dist.destroy_process_group()
    except BaseException:
        with open(f"{tmp}/error.{rank}", "w") as f:
            f.write(traceback.format_exc())
        os._exit(1)
    # Skip interpreter teardown (and any lingering threads) once all is checked.
    os._exit(0)


def shm_objects(pids):
    """oreg_ccl's /dev/shm objects created by any of `pids` (names end in _<pid>_<rank>)."""
    found = []
    for pid in pids:
        found += glob.glob(f"/dev/shm/oreg_ccl_*_{pid}_*")
    return found


def info_of(group=None, device="cpu"):
    """oreg_ccl's view of a group (backend._network_info()): topology,
    host_count, endpoint, group_id, rejected, single_copy, shared_chunks_written,
    peer_mapped_read, peer_mapped_written, splits."""
    return (group or dist.group.WORLD)._get_backend(torch.device(device))._network_info()


@functools.lru_cache(maxsize=None)
def single_copy_allowed():
    """Whether one process may read another's memory with process_vm_readv, as
    oreg_ccl's single-copy path needs. Probed by a child reading this process:
    Yama (ptrace_scope >= 1) and seccomp forbid that just as between siblings."""
    marker = ctypes.create_string_buffer(b"oreg-probe")
    code = (
        "import ctypes, sys\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "class Iov(ctypes.Structure):\n"
        "    _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]\n"
        "out = ctypes.create_string_buffer(10)\n"
        f"local, remote = Iov(ctypes.addressof(out), 10), Iov({ctypes.addressof(marker)}, 10)\n"
        f"n = libc.process_vm_readv({os.getpid()}, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)\n"
        "sys.exit(0 if n == 10 and out.raw == b'oreg-probe' else 1)\n"
    )
    return subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


@functools.lru_cache(maxsize=None)
def peer_mapping_allowed():
    """Whether one process may open another's memfd through /proc/PID/fd, as
    oreg_ccl's copies out of a peer's device memory need (hidepid or an LSM
    can forbid it where process_vm_readv works)."""
    fd = os.memfd_create("oreg-probe")
    try:
        os.ftruncate(fd, 4096)
        code = f"import os\nos.close(os.open('/proc/{os.getpid()}/fd/{fd}', os.O_RDWR))\n"
        return subprocess.run([sys.executable, "-c", code], timeout=60,
                              stderr=subprocess.DEVNULL).returncode == 0
    finally:
        os.close(fd)


def spawn(fn, world_size, tmp_path, *args, timeout=120, pg_timeout=30, init=True, env=None,
          expect_exit=None, host_of=None):
    """Run fn on world_size ranks; returns the exit codes. `expect_exit` maps
    rank -> expected exit code (default: every rank exits 0). `host_of[rank]`
    puts ranks on simulated hosts (OREG_CCL_HOST_ID): ZeroMQ between hosts."""
    tmp = str(tmp_path)
    ctx = mp.get_context("spawn")
    env = {"OMP_NUM_THREADS": "1", **(env or {})}
    procs = [
        ctx.Process(target=_entry, args=(r, fn, world_size, tmp, args, pg_timeout, init, env, host_of))
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
    finally:
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    codes = [p.exitcode for p in procs]
    errors = {}
    for r in range(world_size):
        path = os.path.join(tmp, f"error.{r}")
        if os.path.exists(path):
            errors[r] = open(path).read()
    expected = [0] * world_size
    for r, code in (expect_exit or {}).items():
        expected[r] = code
    report = "".join(f"\n--- rank {r} ---\n{tb}" for r, tb in errors.items())
    assert not hung, f"ranks {hung} still running after {timeout}s (killed){report}"
    assert codes == expected, f"exit codes {codes}, expected {expected}{report}"
    leaked = shm_objects([p.pid for p in procs])
    assert not leaked, f"shared memory left behind: {leaked}"
    return codes
