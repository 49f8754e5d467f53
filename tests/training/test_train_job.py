"""The main job (launch/train.py under torchrun, issue 6): every strategy on 4 simulated
devices with oreg_ccl reproduces a single-process CPU run on the same global batch."""
import json
import os
import pathlib
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(ROOT, "launch", "train.py")
STEPS = 20
sys.path.insert(0, os.path.join(ROOT, "tests", "distributed"))
from _torchrun import run  # noqa: E402  (kills torchrun's workers too on a timeout)


def run_job(out_dir, *args, nproc=None, nodes=None, timeout=420, env=None):
    """launch/train.py: one process, torchrun with `nproc` workers, or
    openreg-run with `nodes` simulated hosts of `nproc` devices each."""
    cmd = [sys.executable, TRAIN]
    if nodes:
        cmd = [sys.executable, "-m", "openreg.launcher", "--nodes", str(nodes), "--devices", str(nproc)]
    elif nproc:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={nproc}", TRAIN]
    cmd += ["--steps", str(STEPS), "--no-plot", "--out-dir", str(out_dir), *args]
    r = run(cmd, timeout=timeout, env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    with open(os.path.join(out_dir, "summary.json")) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def cpu_reference(tmp_path_factory):
    return run_job(tmp_path_factory.mktemp("cpu"), "--strategy", "none", "--device-type", "cpu")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "fsdp2", "hsdp", "tp", "dp_tp"])
def test_strategy_matches_single_process_cpu(strategy, cpu_reference, tmp_path):
    summary = run_job(tmp_path, "--strategy", strategy, nproc=4)
    assert summary["world_size"] == 4
    assert len(summary["losses"]) == STEPS
    assert summary["collective_seconds"] > 0  # oreg_ccl's worker time, reported by the job
    for step, (got, want) in enumerate(zip(summary["losses"], cpu_reference["losses"])):
        assert got == pytest.approx(want, rel=2e-4, abs=2e-4), (strategy, step, got, want)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2", "tp"])
def test_compiled_blocks_match_single_process_cpu(strategy, cpu_reference, tmp_path):
    # --compile: each block compiled by Inductor (its kernels on openreg streams),
    # before data parallelism wraps it and after tensor parallelism shards it.
    summary = run_job(tmp_path, "--strategy", strategy, "--compile", nproc=2,
                      env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    for step, (got, want) in enumerate(zip(summary["losses"], cpu_reference["losses"])):
        assert got == pytest.approx(want, rel=2e-4, abs=2e-4), (strategy, step, got, want)


@pytest.mark.timeout(600)
def test_tensor_parallel_with_activation_checkpointing(cpu_reference, tmp_path):
    # Checkpointing wraps the blocks; tensor parallelism must still find (and
    # shard) their submodules: each rank holds part of the parameters.
    summary = run_job(tmp_path, "--strategy", "tp", "--activation-checkpointing", nproc=4)
    assert summary["local_parameter_elements"] < 0.6 * cpu_reference["local_parameter_elements"]
    for step, (got, want) in enumerate(zip(summary["losses"], cpu_reference["losses"])):
        assert got == pytest.approx(want, rel=2e-4, abs=2e-4), (step, got, want)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("strategy,nproc,flags", [
    ("ddp", 4, []), ("none", 1, []),
    # Inductor's kernels and checkpointed blocks' recompute inside the capture (a
    # checkpointed SDPA is a random op to AOTAutograd: openreg/_rng_prims.py).
    ("ddp", 2, ["--compile", "--activation-checkpointing"])])
def test_captured_step_matches_single_process_cpu(strategy, nproc, flags, cpu_reference, tmp_path):
    # --graph: three eager steps, then the step (DDP's allreduces, clipping, fused AdamW and the
    # loss's all_reduce included) captured once and replayed for the other 17 batches.
    summary = run_job(tmp_path, "--strategy", strategy, "--graph", *flags, nproc=nproc,
                      env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    assert len(summary["losses"]) == STEPS
    assert summary["graph_replays"] == STEPS - 3
    for step, (got, want) in enumerate(zip(summary["losses"], cpu_reference["losses"])):
        assert got == pytest.approx(want, rel=2e-4, abs=2e-4), (strategy, step, got, want)


@pytest.mark.timeout(600)
def test_captured_step_with_bf16_autocast_matches_eager(tmp_path):
    # Autocast's weight cast cache is off under --graph: a replay casts the updated weights.
    eager = run_job(tmp_path / "eager", "--strategy", "ddp", "--bf16", nproc=2)
    graphed = run_job(tmp_path / "graph", "--strategy", "ddp", "--bf16", "--graph", nproc=2)
    assert graphed["graph_replays"] == STEPS - 3
    assert graphed["losses"] == pytest.approx(eager["losses"], rel=1e-5, abs=1e-5)


@pytest.mark.timeout(600)
def test_fsdp2_bf16_matches_to_bf16_tolerance(cpu_reference, tmp_path):
    summary = run_job(tmp_path, "--strategy", "fsdp2", "--bf16", nproc=4)
    for got, want in zip(summary["losses"], cpu_reference["losses"]):
        assert got == pytest.approx(want, rel=3e-2, abs=3e-2)


@pytest.mark.timeout(600)
def test_fsdp2_uses_less_memory_per_device_than_ddp(tmp_path):
    big = ["--n-embd", "256", "--n-layer", "4", "--steps", "3"]
    ddp = run_job(tmp_path / "ddp", "--strategy", "ddp", *big, nproc=4)
    fsdp2 = run_job(tmp_path / "fsdp2", "--strategy", "fsdp2", *big, nproc=4)
    # Sharding's gain (37 vs 84 MiB here): oreg_ccl keeps no buffer alive after
    # wait(), so a backward's all-gather and reduce-scatter buffers do not pile up.
    assert max(fsdp2["peak_memory_bytes_per_device"]) < 0.6 * min(ddp["peak_memory_bytes_per_device"])


@pytest.mark.timeout(600)
def test_checkpoint_resume_at_a_different_world_size(cpu_reference, tmp_path):
    ckpt = tmp_path / "ckpt"
    run_job(tmp_path / "a", "--strategy", "fsdp2", "--checkpoint-dir", str(ckpt),
            "--checkpoint-every", "10", "--steps", "10", nproc=4)
    resumed = run_job(tmp_path / "b", "--strategy", "fsdp2", "--checkpoint-dir", str(ckpt),
                      "--resume", nproc=2)
    assert resumed["first_step"] == 10
    for got, want in zip(resumed["losses"], cpu_reference["losses"][10:]):
        assert got == pytest.approx(want, rel=2e-4, abs=2e-4)


@pytest.mark.timeout(600)
def test_two_simulated_hosts_match_single_process_cpu(cpu_reference, tmp_path):
    # openreg-run --nodes 2: two torchrun agents, shared memory within a host,
    # ZeroMQ between them; HSDP replicates across the hosts.
    summary = run_job(tmp_path, "--strategy", "hsdp", nproc=2, nodes=2)
    assert summary["world_size"] == 4
    assert len(summary["losses"]) == STEPS
    assert summary["hosts"] == "host 0: 0 1 | host 1: 2 3"
    for step, (got, want) in enumerate(zip(summary["losses"], cpu_reference["losses"])):
        assert got == pytest.approx(want, rel=2e-4, abs=2e-4), (step, got, want)


@pytest.mark.timeout(120)
def test_launcher_help_lists_training_options_and_rejects_typos():
    import subprocess
    launcher = [sys.executable, "-m", "openreg.launcher"]
    r = subprocess.run(launcher + ["--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for option in ("--devices", "--nodes", "--strategy", "--checkpoint-dir", "--bf16"):
        assert option in r.stdout, option
    # A typo fails once, in the launcher, before torchrun starts any rank.
    r = subprocess.run(launcher + ["--stratgy", "ddp"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.count("unrecognized arguments: --stratgy ddp") == 1, r.stderr
    assert "torch.distributed" not in r.stderr and "rank" not in r.stderr.lower(), r.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("args,message", [
    (["--devices", "3"], "--global-batch (16) must divide by the data-parallel size 3"),
    (["--devices", "3", "--strategy", "tp"], "--n-head (4) must divide by the tensor-parallel size 3"),
    (["--devices", "1", "--strategy", "dp_tp"], "dp_tp needs an even number of devices"),
    (["--devices", "65"], "at most 64 devices"),
    (["--nodes", "500"], "at most 64 simulated hosts"),
    (["--steps", "0"], "--steps must be at least 1"),
    (["--n-embd", "100", "--n-head", "3"], "--n-embd (100) must divide by --n-head (3)"),
    (["--seq-len", "40000"], "--seq-len (40000) must be at most"),
    (["--backend", "gloo"], "--backend 'gloo' cannot move openreg tensors"),
    (["--lr", "-1"], "--lr must be a finite number, 0 or more, got -1.0"),
    (["--lr", "inf"], "--lr must be a finite number, 0 or more, got inf"),
    (["--seed", str(2**40)], f"--seed must be in 0 .. 2**32 - 1, got {2**40}"),
    (["--out-dir", ""], "--out-dir is an empty path: name a directory"),
    (["--checkpoint-dir", ""], "--checkpoint-dir is an empty path: name a directory"),
    (["--clip-grad", "nan"], "--clip-grad must be 0 (no clipping) or more, got nan"),
    (["--clip-grad", "-0.5"], "--clip-grad must be 0 (no clipping) or more, got -0.5"),
    (["--graph", "--strategy", "fsdp2"], "--graph supports strategies none, ddp, not fsdp2"),
    (["--graph", "--device-type", "cpu"], "--graph needs --device-type openreg"),
])
def test_launcher_rejects_layouts_the_job_cannot_run(args, message):
    import subprocess
    r = subprocess.run([sys.executable, "-m", "openreg.launcher", *args], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.count(message) == 1, r.stderr[-2000:]
    assert "Traceback" not in r.stderr, r.stderr[-2000:]


@pytest.mark.timeout(120)
def test_launcher_refuses_a_narrowed_device_view():
    import subprocess
    r = subprocess.run([sys.executable, "-m", "openreg.launcher", "--devices", "2"], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, OPENREG_VISIBLE_DEVICES="0"))
    assert r.returncode == 2, r.stderr[-2000:]
    assert "OPENREG_VISIBLE_DEVICES is set: openreg-run gives each rank a device of its own" in r.stderr


@pytest.mark.timeout(600)
def test_resume_under_another_strategy(cpu_reference, tmp_path):
    # A ddp checkpoint (fused AdamW) resumed with tp (foreach off: DTensors beside tensors):
    # the optimizer keeps this run's implementation, the state is the saved one.
    ckpt = tmp_path / "ckpt"
    r = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
             TRAIN, "--strategy", "ddp", "--steps", "5", "--checkpoint-every", "5", "--no-plot",
             "--checkpoint-dir", str(ckpt), "--resume", "--out-dir", str(tmp_path / "a")],
            timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stderr[-4000:]
    assert f"no checkpoint in {ckpt}: starting from step 0" in r.stdout, r.stdout[-2000:]
    resumed = run_job(tmp_path / "b", "--strategy", "tp", "--checkpoint-dir", str(ckpt),
                      "--resume", "--steps", "10", "--checkpoint-every", "5", nproc=2)
    assert resumed["first_step"] == 5
    for got, want in zip(resumed["losses"], cpu_reference["losses"][5:10]):
        assert got == pytest.approx(want, rel=2e-4, abs=2e-4)
    # Resuming a finished run trains nothing and keeps its summary.
    r = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
             TRAIN, "--strategy", "tp", "--steps", "10", "--checkpoint-every", "5", "--no-plot",
             "--checkpoint-dir", str(ckpt), "--resume", "--out-dir", str(tmp_path / "b")],
            timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stderr[-4000:]
    assert "at or past --steps 10: nothing to do" in r.stdout, r.stdout[-2000:]



@pytest.mark.timeout(600)
def test_checkpoint_directory_guards(tmp_path):
    # Single-process runs (train.py without torchrun), 5 steps saved every 2:
    # the end of the run is saved too, so the finished run resumes as finished.
    ckpt = tmp_path / "ckpt"
    first = run_job(tmp_path / "a", "--checkpoint-dir", str(ckpt), "--checkpoint-every", "2",
                    "--steps", "5")
    with open(ckpt / "latest.json") as f:
        assert json.load(f)["step"] == 5
    import shutil
    import subprocess
    launcher = [sys.executable, "-m", "openreg.launcher", "--devices", "1", "--no-plot",
                "--checkpoint-dir", str(ckpt)]
    refusals = [
        # Without --resume a new run would delete the checkpoint.
        ([], "pass --resume to continue it"),
        # DCP would load a 1-layer model from the 2-layer checkpoint silently.
        (["--resume", "--n-layer", "1"], "--n-layer 2 (checkpoint) vs 1 (this run)"),
    ]
    for args, message in refusals:
        r = subprocess.run(launcher + args, capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and r.stderr.count(message) == 1, r.stderr[-2000:]
    assert (ckpt / "step_00000005").is_dir()
    # A resume takes this run's --lr: at 0 the weights stay, the losses follow the batches.
    shutil.copytree(ckpt, tmp_path / "ckpt2")
    frozen = run_job(tmp_path / "b", "--checkpoint-dir", str(ckpt), "--resume", "--lr", "0",
                     "--steps", "8")
    trained = run_job(tmp_path / "c", "--checkpoint-dir", str(tmp_path / "ckpt2"), "--resume",
                      "--steps", "8")
    assert frozen["first_step"] == trained["first_step"] == 5
    assert frozen["losses"][0] == trained["losses"][0]  # computed before the first update
    assert frozen["losses"][1:] != trained["losses"][1:]
    assert len(first["losses"]) == 5


@pytest.mark.timeout(300)
def test_sigterm_to_the_launcher_stops_every_simulated_host(tmp_path):
    # openreg-run --nodes M starts M torchrun agents; a SIGTERM to it (a
    # scheduler, a closed terminal) must stop them and their ranks too.
    import signal
    import subprocess
    import time
    marker = str(tmp_path / "sigterm-run")
    cmd = [sys.executable, "-m", "openreg.launcher", "--nodes", "2", "--devices", "1",
           "--steps", "1000000", "--log-every", "1", "--no-plot", "--out-dir", marker]
    launcher = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=dict(os.environ, OMP_NUM_THREADS="1"))

    def ours():
        pids = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if marker.encode() in f.read() and int(pid) != launcher.pid:
                        pids.append(int(pid))
            except OSError:
                pass
        return pids

    try:
        for line in launcher.stdout:  # until the ranks train
            if line.startswith("step"):
                break
        assert len(ours()) >= 4, ours()  # 2 agents, 2 ranks
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(timeout=60) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 60
        while ours() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert ours() == [], "agents or ranks outlived the launcher"
    finally:
        for pid in ours():
            os.kill(pid, signal.SIGKILL)
        if launcher.poll() is None:
            launcher.kill()


@pytest.mark.timeout(300)
def test_tensor_parallel_strategy_runs_without_torchrun(cpu_reference, tmp_path):
    # train.py run directly (no process group): every strategy is a plain
    # one-device run, tp included (its mesh needed torchrun's environment).
    summary = run_job(tmp_path, "--strategy", "tp")
    assert summary["world_size"] == 1
    for got, want in zip(summary["losses"], cpu_reference["losses"]):
        assert got == pytest.approx(want, rel=2e-4, abs=2e-4)


# Options for the process tests below: the smallest model the job takes, a step logged
# every step, and steps enough to outlast any test.
TINY = ["--n-layer", "1", "--n-embd", "16", "--n-head", "1", "--seq-len", "8",
        "--global-batch", "2", "--log-every", "1", "--no-plot"]


def job_processes(marker, but=()):
    """Pids of the processes whose command line holds `marker` (a test's own path)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read() and int(pid) not in but:
                    pids.append(int(pid))
        except OSError:
            pass
    return pids


def start_training(marker, *launcher_args):
    """openreg-run in a session of its own (its process group is the test's to kill), until
    its ranks train; returns the Popen."""
    import subprocess
    cmd = [sys.executable, "-m", "openreg.launcher", *launcher_args, "--steps", "1000000000",
           *TINY, "--out-dir", marker]
    # SIGINT as a terminal's job has it: a suite started in the background of a script
    # (`cmd &`) inherits SIGINT ignored, and Python then never raises KeyboardInterrupt.
    import signal
    launcher = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    for line in launcher.stdout:
        if line.startswith("step"):
            # Keep reading: a full pipe would block the job's logging, and so its shutdown.
            import threading
            threading.Thread(target=launcher.stdout.read, daemon=True).start()
            return launcher
    code = launcher.wait()
    for pid in job_processes(marker):
        os.kill(pid, 9)
    raise AssertionError(f"the job never trained (exit code {code})")


def kill_training(launcher, marker):
    """What of a start_training job is still running, killed."""
    import signal
    for pid in job_processes(marker):
        os.kill(pid, signal.SIGKILL)
    if launcher.poll() is None:
        launcher.kill()
    launcher.stdout.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("nodes,target", [(1, "launcher"), (2, "launcher"), (2, "group")])
def test_sigkilled_launcher_takes_its_ranks_along(tmp_path, nodes, target):
    # torchrun starts each rank in a session of its own: nothing but the ranks' death
    # signal ends them once the launcher (or a whole process group: Ctrl-\, kill -9 -PGID)
    # is SIGKILLed, and an agent orphaned by the launcher's death must end too.
    import glob
    import signal
    import time
    marker = str(tmp_path / "sigkill-run")
    launcher = start_training(marker, "--nodes", str(nodes), "--devices", str(3 - nodes))
    try:
        job = job_processes(marker, but=(launcher.pid,))
        assert len(job) >= 2, job  # the ranks, and with --nodes 2 the agents
        if target == "group":
            os.killpg(launcher.pid, signal.SIGKILL)
        else:
            launcher.kill()
        launcher.wait(timeout=10)
        deadline = time.monotonic() + 10  # 0-1.5 s here: an orphaned agent stops its ranks
        while job_processes(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert job_processes(marker) == [], "agents or ranks outlived a SIGKILLed launcher"
        leftovers = [p for pid in job for p in glob.glob(f"/dev/shm/oreg_ccl_*_{pid}_*")]
        assert leftovers == []
    finally:
        kill_training(launcher, marker)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    """A single-process run's checkpoint of the TINY model after 2 steps."""
    root = tmp_path_factory.mktemp("tiny")
    r = run([sys.executable, TRAIN, *TINY, "--steps", "2", "--checkpoint-every", "2",
             "--checkpoint-dir", str(root / "ckpt"), "--out-dir", str(root / "out")],
            timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stderr[-3000:]
    return root / "ckpt"


def damage(ckpt, how):
    """Damages --checkpoint-dir `ckpt` as a save cut short (or a bad disk, or a hand edit)
    would; returns the file a clear error must name."""
    if how == "pointer to the root":
        (ckpt / "latest.json").write_text('{"step": 2, "dir": "."}')
        return ckpt / "latest.json"
    step_dir = ckpt / "step_00000002"
    shard = next(step_dir.glob("*.distcp"))
    if how == "truncated shard":
        os.truncate(shard, 100)
        return shard
    if how == "missing metadata":
        os.remove(step_dir / ".metadata")
        return step_dir / ".metadata"
    if how == "truncated metadata":
        os.truncate(step_dir / ".metadata", 1000)
        return step_dir / ".metadata"
    assert how == "zeroed shard"  # whole, but unreadable: found only when loading
    shard.write_bytes(bytes(shard.stat().st_size))
    return step_dir


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how,launcher", [
    ("truncated shard", True), ("missing metadata", True), ("truncated metadata", True),
    ("pointer to the root", True), ("truncated shard", False), ("zeroed shard", False)])
def test_damaged_checkpoint_fails_in_one_line_naming_the_file(tiny_checkpoint, tmp_path, how,
                                                              launcher):
    import shutil
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint, ckpt)
    culprit = damage(ckpt, how)
    cmd = [sys.executable, "-m", "openreg.launcher", "--devices", "1"] if launcher else \
        [sys.executable, TRAIN]
    r = run(cmd + [*TINY, "--steps", "4", "--checkpoint-dir", str(ckpt), "--resume",
                   "--out-dir", str(tmp_path / "out")],
            timeout=60, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == (2 if launcher else 1), r.stderr[-3000:]
    errors = [line for line in r.stderr.splitlines() if "Warning" not in line
              and not line.startswith(("  return", "usage:"))]
    assert len(errors) == 1 and str(culprit) in errors[0], r.stderr[-3000:]
    assert "error: train.py:" not in r.stderr, r.stderr[-3000:]  # the launcher's own prefix only


@pytest.mark.timeout(120)
@pytest.mark.parametrize("option", ["--out-dir", "--checkpoint-dir"])
@pytest.mark.parametrize("where", ["under a file", "read-only"])
@pytest.mark.parametrize("launcher", [True, False])
def test_unwritable_output_directory_fails_before_training(tmp_path, option, where, launcher):
    if where == "read-only":
        # sysfs refuses new files even to root (a 0500 directory would not).
        blocked = pathlib.Path("/sys")
        reason = f"cannot write in {blocked} ("  # EACCES, or EROFS where /sys is mounted read-only
    else:
        blocked = tmp_path / "file"
        blocked.write_text("")
        reason = f"{blocked} is not a directory"
    target = str(blocked / "sub" / "dir")
    paths = {"--out-dir": str(tmp_path / "out"), "--checkpoint-dir": str(tmp_path / "ckpt"),
             option: target}
    cmd = [sys.executable, "-m", "openreg.launcher", "--devices", "1"] if launcher else \
        [sys.executable, TRAIN]
    r = run(cmd + [*TINY, "--steps", "2", *(a for kv in paths.items() for a in kv)],
            timeout=60, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-3000:]
    assert r.stderr.count(f"error: {option} {target}: {reason}") == 1, r.stderr[-3000:]
    assert "step" not in r.stdout, r.stdout[-2000:]


@pytest.mark.timeout(120)
def test_failed_rank_ends_the_launcher_in_one_line(tmp_path):
    # A rank's own error (here OOM at a 1 MiB device) is the message; torchrun's
    # traceback and failure table are not repeated after it.
    r = run([sys.executable, "-m", "openreg.launcher", "--devices", "2", *TINY, "--steps", "2",
             "--out-dir", str(tmp_path / "out")], timeout=90,
            env=dict(os.environ, OMP_NUM_THREADS="1", OPENREG_DEVICE_MEMORY="1MiB"))
    assert r.returncode == 1, r.stderr[-3000:]
    assert "torch.OutOfMemoryError: openreg out of memory" in r.stderr, r.stderr[-3000:]
    # The rank that fails second may have been stopped by torchrun first (-15).
    assert re.fullmatch(r"openreg-run: training failed: rank 0 \(exit code (1|-15)\), rank 1 "
                        r"\(exit code (1|-15)\); the error is above", r.stderr.rstrip().splitlines()[-1])
    assert "(exit code 1)" in r.stderr.rstrip().splitlines()[-1]
    assert "ChildFailedError" not in r.stderr, r.stderr[-3000:]


@pytest.mark.timeout(120)
def test_checkpoint_dir_alone_saves_at_the_end(tmp_path):
    ckpt = tmp_path / "ckpt"
    r = run([sys.executable, TRAIN, *TINY, "--steps", "3", "--checkpoint-dir", str(ckpt),
             "--out-dir", str(tmp_path / "out")], timeout=60, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stderr[-3000:]
    with open(ckpt / "latest.json") as f:
        assert json.load(f)["step"] == 3
    assert sorted(p.name for p in ckpt.glob("step_*")) == ["step_00000003"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n_layer,message", [
    ("2", "model.blocks.1.attn.k.bias absent (checkpoint) vs (16,) (this run)"),
    ("1", None)])  # same shapes: resumes, as before the pointer named the model
def test_pointer_without_model_entry_still_checks_shapes(tiny_checkpoint, tmp_path, n_layer,
                                                         message):
    import shutil
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint, ckpt)
    latest = json.loads((ckpt / "latest.json").read_text())
    del latest["model"]
    (ckpt / "latest.json").write_text(json.dumps(latest))
    launcher = [sys.executable, "-m", "openreg.launcher", "--devices", "1"]
    r = run([*(launcher if message else [sys.executable, TRAIN]), *TINY, "--n-layer", n_layer,
             "--steps", "3", "--checkpoint-dir", str(ckpt), "--resume",
             "--out-dir", str(tmp_path / "out")],
            timeout=60, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if message:
        assert r.returncode == 2, r.stderr[-3000:]
        assert r.stderr.count(f"whose model differs: {message}") == 1, r.stderr[-3000:]
    else:
        assert r.returncode == 0, r.stderr[-3000:]
        assert "resumed from" in r.stdout and "at step 2" in r.stdout, r.stdout[-2000:]


@pytest.mark.timeout(120)
def test_collective_seconds_leave_out_the_summary_gather_and_checkpoints(tmp_path):
    # Strategy "none" on 2 ranks trains with no collective at all: anything counted would be
    # the all_gather_object that collects the summary after training, or a checkpoint save's.
    summary = run_job(tmp_path, *TINY, "--strategy", "none", "--steps", "4",
                      "--checkpoint-dir", str(tmp_path / "ckpt"), "--checkpoint-every", "1",
                      nproc=2, timeout=90)
    assert summary["world_size"] == 2
    assert (tmp_path / "ckpt" / "latest.json").exists()
    assert summary["collective_seconds"] == 0.0


@pytest.mark.timeout(120)
def test_cpu_runs_report_no_device_memory_or_collective_time(tmp_path):
    summary = run_job(tmp_path, *TINY, "--device-type", "cpu", "--steps", "2", nproc=2, timeout=90)
    assert summary["peak_memory_bytes_per_device"] == [None, None]
    assert summary["collective_seconds"] is None  # gloo does not tell


@pytest.mark.timeout(120)
def test_bf16_applies_to_fsdp2_on_one_device(tmp_path):
    # One device shards nothing: FSDP2's strategies autocast then, as ddp does.
    ddp = run_job(tmp_path / "ddp", *TINY, "--bf16", "--steps", "3", timeout=90)
    fsdp2 = run_job(tmp_path / "fsdp2", *TINY, "--strategy", "fsdp2", "--bf16", "--steps", "3",
                    timeout=90)
    fp32 = run_job(tmp_path / "fp32", *TINY, "--strategy", "fsdp2", "--steps", "3", timeout=90)
    assert fsdp2["losses"] == ddp["losses"]
    assert fsdp2["losses"] != fp32["losses"]


@pytest.mark.timeout(120)
def test_a_diverged_run_warns_and_writes_valid_json(tmp_path):
    r = run([sys.executable, TRAIN, *TINY, "--lr", "1e6", "--clip-grad", "0", "--steps", "4",
             "--out-dir", str(tmp_path)], timeout=90, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("training diverged (try a lower --lr, or --clip-grad)") == 1, r.stdout
    text = (tmp_path / "summary.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    summary = json.loads(text)
    assert summary["final_loss"] is None and None in summary["losses"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("target", ["launcher", "group"])
def test_sigint_stops_every_simulated_host(tmp_path, target):
    # kill -INT <openreg-run pid> must reach the agents too, not leave them training until the
    # launcher gives up waiting; a terminal's Ctrl-C (the whole process group) must still work.
    import signal
    import time
    marker = str(tmp_path / "sigint-run")
    launcher = start_training(marker, "--nodes", "2", "--devices", "1")
    try:
        started = time.monotonic()
        if target == "group":
            os.killpg(launcher.pid, signal.SIGINT)
        else:
            launcher.send_signal(signal.SIGINT)
        assert launcher.wait(timeout=60) == 128 + signal.SIGINT
        # Agents left training were stopped after 10 s; stopped by the SIGINT, in 1-2 s.
        assert time.monotonic() - started < 8, "the launcher waited for its agents to end alone"
        while job_processes(marker) and time.monotonic() < started + 10:
            time.sleep(0.1)
        assert job_processes(marker) == [], "agents or ranks outlived the launcher"
    finally:
        kill_training(launcher, marker)


@pytest.mark.timeout(600)
def test_profile_steps_write_a_trace_per_rank_with_device_work(tmp_path):
    # --profile-steps: torch.profiler after the warm-up; each rank's Chrome trace
    # holds its device's kernels and its collectives.
    run_job(tmp_path, "--strategy", "ddp", "--profile-steps", "2", nproc=2)
    for rank in range(2):
        events = json.loads((tmp_path / f"trace_rank{rank}.json").read_text())["traceEvents"]
        kernels = [e for e in events if e.get("cat") == "kernel"]
        names = {e["name"] for e in kernels}
        assert "kernel aten::mm" in names, sorted(names)
        assert any(n.startswith("oreg_ccl allreduce") for n in names), sorted(names)
        assert {e["pid"] for e in kernels} == {rank}
