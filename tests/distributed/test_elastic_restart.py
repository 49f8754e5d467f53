"""`torchrun --max-restarts=1`: a DDP job over oreg_ccl survives a SIGKILLed rank.

The training script (this file run as a script by torchrun) trains a small
model on openreg:LOCAL_RANK with DDP over oreg_ccl on seeded data, saving a
checkpoint per rank every few steps. Once per job, one rank SIGKILLs itself in
the middle of the run; torchrun restarts the group, every rank resumes from its
last checkpoint and finishes. Asserted: torchrun exits 0, every rank ran again
and resumed from a step > 0, the losses after it and the final parameters
equal (bit for bit) those of the same job run without a failure, and /dev/shm
holds no oreg_ccl object of any worker of either attempt.

Two layouts: one torchrun agent with 4 workers (--standalone), and two agents
on simulated hosts (--nnodes=2, c10d rendezvous on a free local port, a
different OREG_CCL_HOST_ID each: shared memory within a host, ZeroMQ between),
where the workers also check that oreg_ccl saw two hosts. The reference run
uses the same layout (the hierarchical reduction order differs from the
single-host one, so results are only bit-identical within a layout).
"""
import datetime
import os
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _torchrun import (  # noqa: E402
    free_port, kill_pids, kill_tree, pids_in, tail, torchrun_cmd, wait_all, worker_env)

WORLD = 4
STEPS, EVERY, KILL_AT, VICTIM = 12, 3, 7, 2  # VICTIM kills itself before step KILL_AT


# ---------------------------------------------------------------- worker side


def _batch(step, rank):
    import torch

    g = torch.Generator().manual_seed(10_000 * step + rank)
    x = torch.randn(16, 8, generator=g)
    return x, x.sum(1, keepdim=True).sin() + 0.1 * torch.randn(16, 1, generator=g)


def _train(out, fail):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    # Files are named by pid, not TORCHELASTIC_RESTART_COUNT: with several
    # agents, one restarting for another's failure keeps its count.
    with open(os.path.join(out, f"pid.{rank}.{os.getpid()}"), "w") as f:
        f.write(str(os.getpid()))
    dev = torch.device("openreg", local)
    torch.openreg.set_device(dev)
    dist.init_process_group("oreg_ccl", device_id=dev, timeout=datetime.timedelta(seconds=60))
    assert dist.get_world_size() == WORLD

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ckpt = os.path.join(out, "ckpt", f"rank{rank}.pt")
    start = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt, map_location=dev)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    ddp = DDP(model)
    if os.environ.get("OREG_TEST_HOSTS") == "2":
        # oreg_ccl's own view: two hosts, so ZeroMQ between them.
        hosts = dist.group.WORLD._get_backend(dev)._hosts
        assert len(hosts) == 2 and sorted(sum(hosts, [])) == list(range(WORLD)), hosts

    losses = {}
    for step in range(start, STEPS):
        killed = os.path.join(out, "killed")
        if fail and rank == VICTIM and step == KILL_AT and not os.path.exists(killed):
            open(killed, "w").close()  # once per job
            os.kill(os.getpid(), signal.SIGKILL)
        x, y = (t.to(dev) for t in _batch(step, rank))
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total, op=dist.ReduceOp.AVG)
        losses[step] = total.item()
        if (step + 1) % EVERY == 0:
            os.makedirs(os.path.dirname(ckpt), exist_ok=True)
            torch.save({"step": step + 1, "model": model.state_dict(), "opt": opt.state_dict()},
                       ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
            dist.barrier()  # every rank holds this checkpoint before anyone goes on
    params = {k: v.cpu() for k, v in model.state_dict().items()}
    torch.save({"losses": losses, "params": params, "start": start},
               os.path.join(out, f"final.{rank}.pt"))
    dist.destroy_process_group()


# ------------------------------------------------------------------ test side


def _launch(out, fail, hosts):
    """Start the job; returns its torchrun processes (one per simulated host)."""
    os.makedirs(out, exist_ok=True)
    args = [os.path.abspath(__file__), out, "fail" if fail else "clean"]
    common = ["--max-restarts=1", "--monitor-interval=0.1"]
    if hosts == 1:
        # --standalone: c10d rendezvous on a port the OS picks (no clash under xdist).
        cmds = [(torchrun_cmd("--standalone", f"--nproc-per-node={WORLD}", *common, *args), {})]
    else:
        port = free_port()
        run_id = f"oreg-elastic-{os.getpid()}-{port}"
        cmds = [(torchrun_cmd(
            f"--nnodes={hosts}", f"--nproc-per-node={WORLD // hosts}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={run_id}",
            f"--rdzv-conf=is_host={int(i == 0)}", *common, *args),
            {"OREG_CCL_HOST_ID": f"elastic-{os.getpid()}-{i}", "OREG_TEST_HOSTS": hosts})
            for i in range(hosts)]
    procs = []
    for i, (cmd, extra) in enumerate(cmds):
        log = open(os.path.join(out, f"torchrun.{i}.log"), "w")
        procs.append(subprocess.Popen(cmd, env=worker_env(**extra), stdout=log,
                                      stderr=subprocess.STDOUT, cwd=out, start_new_session=True))
        log.close()
    return procs


@pytest.mark.timeout(360)
@pytest.mark.parametrize("hosts", [1, 2], ids=["1host", "2hosts"])
def test_torchrun_restart_resumes_from_checkpoint(tmp_path, hosts):
    import torch

    from _harness import shm_objects

    runs = {"clean": str(tmp_path / "clean"), "fail": str(tmp_path / "fail")}
    procs = {}
    script = os.path.abspath(__file__)
    try:
        # Both jobs at once: the reference run without failure and the one that fails.
        for name, out in runs.items():
            for i, p in enumerate(_launch(out, name == "fail", hosts)):
                procs[f"{name}.{i}"] = p
        hung = wait_all(procs, timeout=300)
        logs = "".join(f"\n--- {n} ---\n{tail(os.path.join(runs[n.split('.')[0]], f'torchrun.{n[-1]}.log'))}"
                       for n in procs)
        assert not hung, f"{hung} still running after 300 s (killed){logs}"
        codes = {n: p.returncode for n, p in procs.items()}
        assert set(codes.values()) == {0}, f"torchrun exit codes {codes}{logs}"
    finally:
        for p in procs.values():
            kill_tree(p)
        for out in runs.values():
            if os.path.isdir(out):
                kill_pids(pids_in(out), script)

    fail = runs["fail"]
    # The victim died, every rank ran again, and the clean run ran once.
    assert os.path.exists(os.path.join(fail, "killed")), logs
    for r in range(WORLD):
        assert len([f for f in os.listdir(fail) if f.startswith(f"pid.{r}.")]) >= 2, (r, logs)
        assert len([f for f in os.listdir(runs["clean"]) if f.startswith(f"pid.{r}.")]) == 1
    resumed = (KILL_AT // EVERY) * EVERY
    assert resumed > 0

    ref = torch.load(os.path.join(runs["clean"], "final.0.pt"))
    assert sorted(ref["losses"]) == list(range(STEPS))
    for r in range(WORLD):
        got = torch.load(os.path.join(fail, f"final.{r}.pt"))
        assert got["start"] == resumed
        assert sorted(got["losses"]) == list(range(resumed, STEPS))
        for step, loss in got["losses"].items():
            assert loss == ref["losses"][step], (r, step, loss, ref["losses"][step])
        for k, v in ref["params"].items():
            assert torch.equal(got["params"][k], v), (r, k)

    pids = pids_in(fail) + pids_in(runs["clean"])
    leaked = shm_objects(pids)
    assert not leaked, f"shared memory left behind: {leaked}"


def _recreate_over_stale_store(rank, n, tmp, counts):
    import torch
    import torch.distributed as dist
    from openreg import _C

    store = dist.FileStore(os.path.join(tmp, "shared_store"), n)
    timeout = datetime.timedelta(seconds=30)
    for attempt, count in enumerate(counts):
        # What an agent restarting for another node's failure hands its
        # workers: the same restart count as before (and the same store).
        os.environ["TORCHELASTIC_RESTART_COUNT"] = str(count[rank])
        if attempt and rank == 0:
            time.sleep(0.5)  # the others read the store before rank 0 wrote anything
        backend = _C._OregCCLBackend(store, rank, n, timeout)
        t = torch.full((1000,), float(rank + attempt))
        backend.allreduce([t]).wait()
        assert torch.equal(t, torch.full((1000,), float(sum(range(n)) + n * attempt)))
        backend.shutdown()


def test_group_recreated_over_the_previous_attempts_keys(tmp_path):
    """A restarted job creates its group again over a store that still holds the
    previous attempt's keys, with restart counts that need not agree across
    ranks (torchrun's shared c10d store; pytorch/pytorch#135712): oreg_ccl must
    not pick up the old attempt's keys."""
    from _harness import spawn

    spawn(_recreate_over_stale_store, 3, tmp_path, str(tmp_path),
          [(0, 0, 0), (1, 0, 1), (1, 0, 1)], init=False, timeout=120)


if __name__ == "__main__":
    _train(sys.argv[1], sys.argv[2] == "fail")
