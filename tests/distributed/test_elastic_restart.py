"""`torchrun --max-restarts=1`: a DDP job over oreg_ccl survives a SIGKILLed rank.

The training script (this file run as a script by torchrun) trains a small
model on openreg:LOCAL_RANK with DDP over oreg_ccl on seeded data, saving a
checkpoint per rank every few steps. On the first attempt
(TORCHELASTIC_RESTART_COUNT == 0) one rank SIGKILLs itself in the middle of the
run; torchrun restarts the group, every rank resumes from its last checkpoint
and finishes. Asserted: torchrun exits 0, the second attempt resumed from a
step > 0, its losses and final parameters equal (bit for bit) those of the same
job run without a failure, and /dev/shm holds no oreg_ccl object of any worker
of either attempt.
"""
import datetime
import os
import signal
import subprocess
import sys

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
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    with open(os.path.join(out, f"pid.{rank}.{attempt}"), "w") as f:
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
    with open(os.path.join(out, f"start.{rank}.{attempt}"), "w") as f:
        f.write(str(start))

    losses = {}
    for step in range(start, STEPS):
        if fail and attempt == 0 and rank == VICTIM and step == KILL_AT:
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


def _launch(out, fail, name):
    os.makedirs(out, exist_ok=True)
    cmd = torchrun_cmd(
        "--standalone", f"--nproc-per-node={WORLD}", "--max-restarts=1",
        "--monitor-interval=0.1", os.path.abspath(__file__), out, "fail" if fail else "clean")
    log = open(os.path.join(out, "torchrun.log"), "w")
    # --standalone: c10d rendezvous on a port the OS picks (no clash under xdist).
    p = subprocess.Popen(cmd, env=worker_env(), stdout=log, stderr=subprocess.STDOUT, cwd=out,
                         start_new_session=True)
    log.close()
    return p


@pytest.mark.timeout(200)
def test_torchrun_restart_resumes_from_checkpoint(tmp_path):
    import torch

    from _harness import shm_objects

    runs = {"clean": str(tmp_path / "clean"), "fail": str(tmp_path / "fail")}
    procs = {}
    script = os.path.abspath(__file__)
    try:
        # Both jobs at once: the reference run without failure and the one that fails.
        for name, out in runs.items():
            procs[name] = _launch(out, name == "fail", name)
        hung = wait_all(procs, timeout=150)
        logs = "".join(f"\n--- {n} ---\n{tail(os.path.join(o, 'torchrun.log'))}"
                       for n, o in runs.items())
        assert not hung, f"{hung} still running after 150 s (killed){logs}"
        codes = {n: p.returncode for n, p in procs.items()}
        assert codes == {"clean": 0, "fail": 0}, f"torchrun exit codes {codes}{logs}"
    finally:
        for p in procs.values():
            kill_tree(p)
        for out in runs.values():
            if os.path.isdir(out):
                kill_pids(pids_in(out), script)

    fail = runs["fail"]
    # The victim died on the first attempt, and a second attempt ran.
    assert os.path.exists(os.path.join(fail, f"start.{VICTIM}.0")), logs
    assert sorted(f for f in os.listdir(fail) if f.startswith("start.") and f.endswith(".1")) == [
        f"start.{r}.1" for r in range(WORLD)], logs
    assert not os.path.exists(os.path.join(runs["clean"], "pid.0.1")), "the clean run restarted"
    resumed = (KILL_AT // EVERY) * EVERY
    for r in range(WORLD):
        with open(os.path.join(fail, f"start.{r}.1")) as f:
            assert int(f.read()) == resumed > 0

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
    assert len(pids_in(fail)) == 2 * WORLD
    leaked = shm_objects(pids)
    assert not leaked, f"shared memory left behind: {leaked}"


if __name__ == "__main__":
    _train(sys.argv[1], sys.argv[2] == "fail")
