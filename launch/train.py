"""Train a small GPT on simulated openreg devices under torchrun.

    torchrun --nproc-per-node=4 launch/train.py --strategy fsdp2
    openreg-run --strategy ddp            # the same, with sensible defaults

Each process drives openreg:LOCAL_RANK and joins the "oreg_ccl" process group.
Strategies: ddp, fsdp (FSDP1), fsdp2 (fully_shard), hsdp (replicate x shard),
tp (tensor parallel), dp_tp (FSDP2 across, tensor parallel within).
The global batch is the same for every world size and strategy, so losses can
be compared with a single-process run (--devices 1, or --device-type cpu).
"""
import argparse
import json
import math
import os
import signal
import sys
import tempfile
import time
from contextlib import nullcontext


def _libc():
    import ctypes
    return ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


_LIBC = _libc()  # loaded here, not in a forked child (openreg-run's agents' preexec_fn)


def tie_to_parent(sig, parent):
    """Have Linux send `sig` to this process when its parent (pid `parent`) exits,
    SIGKILLed included: torchrun starts each rank in a session of its own, so a
    SIGKILLed torchrun (or openreg-run, or its process group) would otherwise
    leave ranks training. Used by ranks and by openreg-run's --nodes agents."""
    PR_SET_PDEATHSIG = 1
    if _LIBC is None or _LIBC.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0:
        return  # not Linux, or not allowed here (a seccomp filter): run as before
    # A parent that exited before prctl() took effect sends no signal: we were reparented.
    if os.getppid() != parent:
        os.kill(os.getpid(), sig)


if __name__ == "__main__" and "TORCHELASTIC_RUN_ID" in os.environ:  # a torchrun rank
    tie_to_parent(signal.SIGKILL, os.getppid())  # before `import torch`: a second or more

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models.gpt import GPT, GPTConfig  # noqa: E402

STRATEGIES = ("none", "ddp", "fsdp", "fsdp2", "hsdp", "tp", "dp_tp")
WARMUP_STEPS = 10
# --graph: eager steps before the capture (DDP rebuilds its buckets after the
# first; the optimizer creates its state in the first step).
GRAPH_EAGER_STEPS = 3
GRAPH_STRATEGIES = ("none", "ddp")
CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "corpus.txt")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--strategy", choices=STRATEGIES, default="ddp",
                   help="none: no parallelism (each process trains the whole batch alone)")
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--global-batch", type=int, default=16, help="sequences per step, all ranks together")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--clip-grad", type=float, default=1.0,
                   help="clip the gradients' total norm to this (0: no clipping)")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (FSDP2: MixedPrecisionPolicy)")
    p.add_argument("--activation-checkpointing", action="store_true")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile (Inductor) each transformer block")
    p.add_argument("--graph", action="store_true",
                   help="openreg, strategies none and ddp: capture the training step as an "
                        "openreg graph after a few eager steps and replay it (as CUDA graphs are "
                        "used when small models' steps are bound by launch cost)")
    p.add_argument("--device-type", default="openreg", choices=("openreg", "cpu"))
    p.add_argument("--backend", default=None, help="default: oreg_ccl on openreg, gloo on cpu")
    p.add_argument("--checkpoint-dir", default=None,
                   help="save DCP checkpoints here: at the end of the run, and every "
                        "--checkpoint-every steps")
    p.add_argument("--checkpoint-every", type=int, default=0,
                   help="steps between checkpoints (default 0: at the end of the run only)")
    p.add_argument("--resume", action="store_true", help="resume from --checkpoint-dir if present")
    p.add_argument("--out-dir", default="runs/latest", help="where the plot and summary go")
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--seed", type=int, default=0, help="0 .. 2**32 - 1")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--profile-steps", type=int, default=0,
                   help="profile this many steps after the warm-up with torch.profiler (device "
                        "kernels and collectives included): a Chrome trace per rank in --out-dir, "
                        "rank 0 prints where the time went")
    p.add_argument("--no-pin-cores", action="store_true",
                   help="do not pin each rank to one core when ranks outnumber cores")
    args = p.parse_args(argv)
    for name in ("steps", "global_batch", "seq_len", "n_layer", "n_embd", "n_head", "log_every"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.n_embd % args.n_head:
        p.error(f"--n-embd ({args.n_embd}) must divide by --n-head ({args.n_head})")
    if args.graph and args.device_type != "openreg":
        p.error("--graph needs --device-type openreg (the CPU has no graphs)")
    if args.graph and args.strategy not in GRAPH_STRATEGIES:
        p.error(f"--graph supports strategies {', '.join(GRAPH_STRATEGIES)}, not {args.strategy} "
                "(sharded strategies read DTensor norms on the host while clipping)")
    if args.checkpoint_every < 0:
        p.error("--checkpoint-every must be 0 (never) or more")
    if args.profile_steps < 0:
        p.error("--profile-steps must be 0 (no profile) or more")
    if not 0 <= args.lr < math.inf:
        p.error(f"--lr must be a finite number, 0 or more, got {args.lr}")
    if not 0 <= args.seed < 2**32:  # each step's batch is drawn from seed * 100003 + step
        p.error(f"--seed must be in 0 .. 2**32 - 1, got {args.seed}")
    if not args.clip_grad >= 0:  # nan too: it compares false, so it would turn clipping off
        p.error(f"--clip-grad must be 0 (no clipping) or more, got {args.clip_grad}")
    corpus_bytes = os.path.getsize(CORPUS)
    if args.seq_len > corpus_bytes - 2:
        p.error(f"--seq-len ({args.seq_len}) must be at most {corpus_bytes - 2} "
                f"(the corpus has {corpus_bytes} bytes)")
    backends = {"openreg": ("oreg_ccl",), "cpu": ("gloo", "oreg_ccl")}[args.device_type]
    if args.backend is not None and args.backend not in backends:
        p.error(f"--backend {args.backend!r} cannot move {args.device_type} tensors; "
                f"use one of {', '.join(backends)}")
    if (args.resume or args.checkpoint_every) and not args.checkpoint_dir:
        p.error("--resume and --checkpoint-every need --checkpoint-dir")
    # Found here, not by the summary at the end of the run or by the first save.
    for option, path in (("--out-dir", args.out_dir), ("--checkpoint-dir", args.checkpoint_dir)):
        if path == "":
            p.error(f"{option} is an empty path: name a directory")
        reason = path is not None and unwritable(path)
        if reason:
            p.error(f"{option} {path}: {reason}")
    return args


def unwritable(path):
    """Why files cannot be written in directory `path` (which the job makes if missing), or None.
    Probed with a temporary file in it or its nearest existing ancestor: os.access() says yes to
    root even on a read-only mount."""
    existing = os.path.abspath(path)
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return f"{existing} is not a directory"
    try:
        tempfile.TemporaryFile(dir=existing).close()
    except OSError as e:
        return f"cannot write in {existing} ({e.strerror})"
    return None


def pin_to_core():
    """When this machine runs at least as many ranks as it has cores (4 on a 2-core CI runner),
    keep each rank's threads (host, stream workers, collective worker) on core LOCAL_RANK % cores.
    Threads of one rank then stop migrating between cores and share its caches: 15-25% more
    steps/s on this 2-core VM, for the CPU run and openreg alike. Simulated hosts have equal rank
    counts, so LOCAL_RANK spreads them evenly too."""
    if not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    if int(os.environ.get("LOCAL_WORLD_SIZE", "1")) < len(cores):
        return
    os.sched_setaffinity(0, {cores[int(os.environ.get("LOCAL_RANK", "0")) % len(cores)]})


# ---- data ------------------------------------------------------------------

def load_corpus() -> torch.Tensor:
    with open(CORPUS, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long()


def global_batch(data: torch.Tensor, step: int, batch: int, seq_len: int, seed: int):
    """The step's global batch: identical on every rank and world size."""
    g = torch.Generator().manual_seed(seed * 100003 + step)
    starts = torch.randint(0, data.numel() - seq_len - 1, (batch,), generator=g)
    x = torch.stack([data[s:s + seq_len] for s in starts.tolist()])
    y = torch.stack([data[s + 1:s + seq_len + 1] for s in starts.tolist()])
    return x, y


# ---- parallelism -----------------------------------------------------------

def tp_plan():
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    return {"attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
            "attn.proj": RowwiseParallel(), "fc1": ColwiseParallel(), "fc2": RowwiseParallel()}


def apply_activation_checkpointing(model):
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        apply_activation_checkpointing as apply_ac, checkpoint_wrapper)
    from models.gpt import Block
    apply_ac(model, checkpoint_wrapper_fn=checkpoint_wrapper, check_fn=lambda m: isinstance(m, Block))


def hsdp_replicas(world: int, local: int) -> int:
    """Replicate across hosts and shard within one (on a single host: 2 replicas)."""
    return world // local if local < world else 2


def layout_error(args, world: int, local: int):
    """Why `world` ranks (`local` per host) cannot run args' strategy, or None: the checks
    wrap() and the batch split rely on, made before any process starts."""
    s = args.strategy
    tp = {"tp": world, "dp_tp": 2}.get(s, 1)
    if s == "hsdp" and world > 1:
        replicas = hsdp_replicas(world, local)
        if world % replicas:
            return f"hsdp on {world} devices: they must split into {replicas} replicas"
    if s == "dp_tp" and world % 2:
        return f"dp_tp needs an even number of devices (2-way tensor parallel), got {world}"
    if tp > 1 and args.n_head % tp:
        return f"{s}: --n-head ({args.n_head}) must divide by the tensor-parallel size {tp}"
    dp = 1 if s in ("none", "tp") or world == 1 else world // tp
    if args.global_batch % dp:
        return f"--global-batch ({args.global_batch}) must divide by the data-parallel size {dp}"
    return None


def wrap(model, args, world, device):
    """Returns (model, data-parallel size, data-parallel rank). Activation
    checkpointing and compilation go after tensor parallelism (whose plan names
    the blocks' own submodules) and before data parallelism, as in torchtitan."""
    from torch.distributed.device_mesh import init_device_mesh
    rank = dist.get_rank() if dist.is_initialized() else 0
    s = args.strategy

    def per_block(model):
        """Activation checkpointing, then compilation: torchtitan's order (TP, AC, compile, DP)."""
        if args.activation_checkpointing:
            apply_activation_checkpointing(model)
        if args.compile:
            for block in model.blocks:
                block.compile()

    if s not in ("tp", "dp_tp"):
        per_block(model)
    # One process: nothing to replicate or shard (tp without torchrun has no
    # process group for its mesh either).
    if s == "none" or world == 1 and (s in ("ddp", "fsdp", "fsdp2", "hsdp") or not dist.is_initialized()):
        if s in ("tp", "dp_tp"):
            per_block(model)
        return model, 1, 0
    if s == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        return DDP(model), world, rank
    if s == "fsdp":
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        return FSDP(model, device_id=device, use_orig_params=True), world, rank
    if s in ("fsdp2", "hsdp"):
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        if s == "hsdp":
            replicas = hsdp_replicas(world, int(os.environ.get("LOCAL_WORLD_SIZE", world)))
            mesh = init_device_mesh(args.device_type, (replicas, world // replicas),
                                    mesh_dim_names=("replicate", "shard"))
        else:
            mesh = init_device_mesh(args.device_type, (world,), mesh_dim_names=("shard",))
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if args.bf16 else None
        kw = {"mesh": mesh} | ({"mp_policy": mp} if mp else {})
        for block in model.blocks:
            fully_shard(block, **kw)
        fully_shard(model, **kw)
        return model, world, rank
    from torch.distributed.tensor.parallel import parallelize_module
    if s == "tp":
        mesh = init_device_mesh(args.device_type, (world,), mesh_dim_names=("tp",))
        for block in model.blocks:
            parallelize_module(block, mesh, tp_plan())
        per_block(model)
        return model, 1, 0
    if s == "dp_tp":
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh(args.device_type, (world // 2, 2), mesh_dim_names=("dp", "tp"))
        for block in model.blocks:
            parallelize_module(block, mesh["tp"], tp_plan())
        per_block(model)
        for block in model.blocks:
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
        return model, world // 2, mesh["dp"].get_local_rank()
    raise ValueError(s)


def clip_grad_norm(model, max_norm: float, strategy: str):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    if isinstance(model, FSDP):
        model.clip_grad_norm_(max_norm)  # FSDP1 knows the norm is over sharded flat params
        return
    if strategy not in ("tp", "dp_tp"):
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        return
    # Tensor-parallel models mix DTensors of different meshes and plain
    # parameters, which PyTorch's clip_grad_norm_ refuses. Each DTensor's norm
    # is computed on its shards and reduced as one scalar (full_tensor() of the
    # norm, not of the gradient).
    from torch.distributed.tensor import DTensor
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norms = [torch.linalg.vector_norm(g, dtype=torch.float32) for g in grads]
    squares = [(n.full_tensor() if isinstance(n, DTensor) else n).pow(2) for n in norms]
    total = torch.stack(squares).sum().sqrt()
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(scale.to(g.dtype) if not isinstance(g, DTensor) else scale.item())


# ---- checkpoints -----------------------------------------------------------

# Each save goes to a directory of its own; LATEST names the newest complete
# one and is replaced atomically after every rank has written its shards
# (dcp.save returns on the coordinator only then), so a rank killed mid-save
# leaves the previous checkpoint whole for torchrun's restart to resume from.
LATEST = "latest.json"


def model_config(args) -> dict:
    """What a checkpoint's weights are only valid for."""
    return {"n_layer": args.n_layer, "n_embd": args.n_embd, "n_head": args.n_head,
            "seq_len": args.seq_len}


def save_checkpoint(root, model, opt, step, config):
    import shutil

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    msd, osd = get_state_dict(model, opt)
    name = f"step_{step:08d}"
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=os.path.join(root, name))
    if dist.is_initialized() and dist.get_rank() != 0:
        return
    previous = (read_latest(root) or {}).get("dir")
    tmp = os.path.join(root, LATEST + ".tmp")
    with open(tmp, "w") as f:
        json.dump({"step": step, "dir": name, "model": config}, f)
    os.replace(tmp, os.path.join(root, LATEST))
    # Keep the previous complete one too; older ones (and a crashed save's) go.
    for d in os.listdir(root):
        if d.startswith("step_") and d not in (name, previous):
            shutil.rmtree(os.path.join(root, d), ignore_errors=True)


def read_latest(root):
    """What LATEST says ({"step": int, "dir": a directory in root, ...}), or None without a
    checkpoint."""
    path = os.path.join(root, LATEST) if root else None
    if not path or not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            latest = json.load(f)
        step, name = int(latest["step"]), latest["dir"]
        if not isinstance(name, str) or os.path.basename(name) != name or name in ("", ".", ".."):
            raise ValueError(f"'dir' must name a directory in {root}, got {name!r}")
        if not isinstance(latest.get("model", {}), dict):
            raise ValueError(f"'model' must map options to values, got {latest['model']!r}")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"train.py: {path} is not a checkpoint pointer ({e}); "
                         "remove it to start from scratch") from e
    where = os.path.join(root, name)
    if not os.path.isdir(where):
        raise SystemExit(f"train.py: {path} names step {step} in {where}, which does not exist")
    return dict(latest, step=step)


def checkpoint_files_error(where):
    """What is wrong with the DCP checkpoint directory `where`, or None: its .metadata must load
    and every file it names must hold the bytes it says. Checked before loading, so a save cut
    short fails in one line naming the file, not in a traceback from every rank."""
    from torch.distributed.checkpoint import FileSystemReader
    metadata_path = os.path.join(where, ".metadata")
    if not os.path.exists(metadata_path):
        return f"{metadata_path} is missing: the save did not finish"
    try:
        metadata = FileSystemReader(where).read_metadata()
    except Exception as e:  # any unpickling error: a truncated or foreign file
        return f"{metadata_path} cannot be read ({type(e).__name__}: {e})"
    needed = {}
    for info in (metadata.storage_data or {}).values():
        end = info.offset + info.length
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), end)
    for name, end in sorted(needed.items()):
        path = os.path.join(where, name)
        if not os.path.exists(path):
            return f"{path} is missing (named by {metadata_path})"
        size = os.path.getsize(path)
        if size < end:
            return f"{path} is truncated: {size} bytes, its metadata needs {end}"
    return None


def checkpoint_error(args):
    """Why args' --checkpoint-dir cannot be used as asked, or None: a checkpoint there
    without --resume (a new run would delete it), one of another model (DCP loads only
    the keys the model asks for: fewer layers would load silently), or a damaged one."""
    latest = read_latest(args.checkpoint_dir)
    if not latest:
        return None
    if not args.resume:
        return (f"{args.checkpoint_dir} holds a checkpoint (step {latest['step']}): pass --resume "
                "to continue it, or another --checkpoint-dir (a new run would delete it)")
    saved, config = latest.get("model"), model_config(args)
    if saved is not None and saved != config:
        differ = ", ".join(f"--{k.replace('_', '-')} {saved.get(k)} (checkpoint) vs {v} (this run)"
                           for k, v in config.items() if saved.get(k) != v)
        return f"cannot resume from {args.checkpoint_dir}, whose model differs: {differ}"
    where = os.path.join(args.checkpoint_dir, latest["dir"])
    damage = checkpoint_files_error(where)
    if damage:
        return f"cannot resume from {args.checkpoint_dir}: {damage}"
    # The pointer's "model" may be missing (or edited): the saved shapes are the truth.
    differ = model_shapes_error(where, args)
    if differ:
        return f"cannot resume from {args.checkpoint_dir}, whose model differs: {differ}"
    return None


def model_shapes_error(where, args):
    """Which of the model's parameters the DCP checkpoint in `where` holds with other shapes, or
    lacks, or has beyond the model's, or None. (--n-head changes no shape: the pointer's "model"
    entry checks it.)"""
    from torch.distributed.checkpoint import FileSystemReader
    saved = {k: tuple(v.size) for k, v in FileSystemReader(where).read_metadata()
             .state_dict_metadata.items() if k.startswith("model.") and hasattr(v, "size")}
    cfg = GPTConfig(block_size=args.seq_len, n_layer=args.n_layer, n_head=args.n_head,
                    n_embd=args.n_embd)
    with torch.device("meta"):  # shapes only: no memory, no initialization
        mine = {f"model.{k}": tuple(v.shape) for k, v in GPT(cfg).state_dict().items()}
    names = sorted(n for n in saved.keys() | mine.keys() if saved.get(n) != mine.get(n))
    if not names:
        return None
    shown = ", ".join(f"{n} {saved.get(n, 'absent')} (checkpoint) vs {mine.get(n, 'absent')} "
                      "(this run)" for n in names[:3])
    return shown + (f", and {len(names) - 3} more" if len(names) > 3 else "")


def load_checkpoint(root, model, opt, lr) -> int:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    latest = read_latest(root)
    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd}
    where = os.path.join(root, latest["dir"])
    try:
        dcp.load(state, checkpoint_id=where)
    except CheckpointException as e:
        # checkpoint_error() found every file whole: their contents are damaged. DCP's
        # message holds every rank's traceback; one line of the first failure says enough.
        rank, (exc, _) = min(e.failures.items())
        reason = str(exc).strip().split("\n")[0].split(". ")[0]
        raise SystemExit(f"train.py: cannot load the checkpoint in {where} "
                         f"(rank {rank}: {type(exc).__name__}: {reason})") from None
    # How this run steps its optimizer (fused, or foreach off under tp; capturable under
    # --graph) is its own, not the
    # saved run's: another strategy's flags would make AdamW mix DTensors and tensors.
    impl = [{k: g[k] for k in ("fused", "foreach", "capturable") if k in g} for g in opt.param_groups]
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    for group, flags in zip(opt.param_groups, impl):
        group.update(flags, lr=lr)  # --lr is this run's (a resume may change it)
    return latest["step"]


# ---- the job ---------------------------------------------------------------

def collective_seconds() -> float:
    """Wall time this process spent with an oreg_ccl collective running, over all groups (0 for
    other backends, which do not tell)."""
    try:
        from openreg import _C
        return _C._ccl_busy_seconds()
    except (ImportError, AttributeError):
        return 0.0


def let_gloo_drop(tensors, timeout=5.0):
    """Waits until gloo's worker threads dropped these tensors of finished collectives. They do
    so a moment after wait() returned; during interpreter exit, dropping a tensor's Python object
    ends the thread inside a destructor and aborts the process ("terminate called without an
    active exception", from torch's ProcessGroupGloo::runLoop; 1 CPU run in 5 here). Held by
    Python until then, the tensors' last reference is Python's. (oreg_ccl drops them on a
    thread of its own: csrc/c10d/Releaser.h.)"""
    deadline = time.monotonic() + timeout
    while any(t._use_count() > 1 for t in tensors) and time.monotonic() < deadline:
        time.sleep(0.001)


def collectives_timed() -> bool:
    return dist.is_initialized() and dist.get_backend() == "oreg_ccl"


def local_parameter_elements(model) -> int:
    from torch.distributed.tensor import DTensor
    return sum((p.to_local() if isinstance(p, DTensor) else p).numel() for p in model.parameters())


def device_peak_memory(device):
    """Bytes, or None on the CPU (which keeps no such statistic)."""
    if device.type == "openreg":
        return torch.openreg.max_memory_allocated(device)
    return None


def mib(nbytes) -> str:
    return "n/a" if nbytes is None else f"{nbytes / 2**20:.1f} MiB"


def finite_or_none(value):
    """JSON has no NaN or infinity: a diverged loss is written as null."""
    return value if math.isfinite(value) else None


def host_layout(device):
    """oreg_ccl's view of which ranks share a (possibly simulated) host."""
    if dist.get_backend() != "oreg_ccl":
        return "n/a"
    return dist.group.WORLD._get_backend(device)._network_info()["topology"]


def main(argv=None):
    args = parse_args(argv)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    error = layout_error(args, world if "RANK" in os.environ else 1,
                         int(os.environ.get("LOCAL_WORLD_SIZE", world)))
    if error:
        raise SystemExit(f"train.py: {error}")
    if not args.no_pin_cores:
        pin_to_core()  # before any thread starts: they inherit it
    if args.device_type == "openreg":
        import openreg  # noqa: F401  (autoloaded by torch too; explicit for clarity)
        torch.openreg.set_device(local_rank)
        if args.graph:  # see CapturedStep
            torch.openreg.set_stream(torch.openreg.Stream())
        device = torch.device("openreg", local_rank)
    else:
        device = torch.device("cpu")
    distributed = "RANK" in os.environ
    if distributed:
        backend = args.backend or ("oreg_ccl" if args.device_type == "openreg" else "gloo")
        dist.init_process_group(backend, device_id=device if args.device_type == "openreg" else None)
    rank = dist.get_rank() if distributed else 0

    torch.manual_seed(args.seed)  # identical initial weights on every rank
    cfg = GPTConfig(block_size=args.seq_len, n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd)
    model = GPT(cfg).to(device)
    model, dp_size, dp_rank = wrap(model, args, world if distributed else 1, device)
    # The fused AdamW kernel (one pass per parameter; native on openreg and the
    # CPU alike). Plain tensor parallelism leaves some parameters as plain
    # tensors beside DTensors, which neither fused nor foreach can mix.
    impl = {"foreach": False} if args.strategy == "tp" else {"fused": True}
    if args.graph:
        impl["capturable"] = True  # its step count and bias corrections stay on the device
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0, **impl)
    local_batch = args.global_batch // dp_size  # layout_error() checked it divides

    start_step = 0
    error = checkpoint_error(args)  # the launcher checked it once already
    if error:
        raise SystemExit(f"train.py: {error}")
    if args.resume and read_latest(args.checkpoint_dir):
        start_step = load_checkpoint(args.checkpoint_dir, model, opt, args.lr)
        if rank == 0:
            print(f"resumed from {args.checkpoint_dir} at step {start_step}", flush=True)
        if start_step >= args.steps:
            # Nothing to train: keep the finished run's summary and plot.
            if rank == 0:
                print(f"the checkpoint is at step {start_step}, at or past --steps {args.steps}: "
                      "nothing to do (raise --steps to train further)", flush=True)
            if distributed:
                dist.destroy_process_group()
            return
    elif args.resume and rank == 0:
        print(f"no checkpoint in {args.checkpoint_dir}: starting from step 0", flush=True)

    data = load_corpus()
    # FSDP2 casts through its MixedPrecisionPolicy; everything else (FSDP2's
    # strategies on one device included, where nothing is sharded) autocasts.
    from torch.distributed.fsdp import FSDPModule
    # A captured step must cast the weights every replay: no autocast cache.
    autocast = (torch.autocast(args.device_type, dtype=torch.bfloat16, cache_enabled=not args.graph)
                if args.bf16 and not isinstance(model, FSDPModule) else nullcontext())
    losses, t0, tokens, comm0 = [], time.perf_counter(), 0, collective_seconds()
    # Steady-state speed leaves out the first steps (allocator warm-up, DDP's
    # bucket rebuild after step one), as nccl-tests leaves out warm-up iterations.
    warmup = min(WARMUP_STEPS, (args.steps - start_step) // 2)
    t_warm, cpu_warm = t0, time.process_time()
    profiler = StepProfiler(args, device, start_step + warmup, rank)
    # Checkpoint saves and the profiler's start, stop and export are no part
    # of training: their time (and the collectives DCP runs) is left out of
    # the speed figures.
    untimed = {"seconds": 0.0, "collectives": 0.0}

    def outside_timing(fn, *a):
        t, c = time.perf_counter(), collective_seconds()
        fn(*a)
        untimed["seconds"] += time.perf_counter() - t
        untimed["collectives"] += collective_seconds() - c

    def train_step(x, y):
        """One step on this rank's batch; returns the global batch's mean loss (identical on
        all ranks)."""
        with autocast:
            logits = model(x)
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if args.clip_grad > 0:
            clip_grad_norm(model, args.clip_grad, args.strategy)
        opt.step()
        report = loss.detach().clone()
        if distributed and dp_size > 1:
            dist.all_reduce(report, op=dist.ReduceOp.AVG)
        return report

    captured = None  # --graph: the CapturedStep, once taken
    if args.graph and args.steps - start_step <= GRAPH_EAGER_STEPS and rank == 0:
        print(f"note: --graph captures the step after {GRAPH_EAGER_STEPS} eager steps; this run "
              f"has {args.steps - start_step}: nothing is captured", flush=True)
    untimed_at_warm = 0.0
    diverged = False
    for step in range(start_step, args.steps):
        outside_timing(profiler.before, step)
        x, y = global_batch(data, step, args.global_batch, args.seq_len, args.seed)
        x = x[dp_rank * local_batch:(dp_rank + 1) * local_batch]
        y = y[dp_rank * local_batch:(dp_rank + 1) * local_batch]
        if captured is None and args.graph and step - start_step >= GRAPH_EAGER_STEPS:
            captured = CapturedStep(train_step, x.to(device), y.to(device), opt)
        report = captured(x, y) if captured else train_step(x.to(device), y.to(device))
        value = report.item()
        losses.append(value)
        if not math.isfinite(value) and not diverged:
            diverged = True
            if rank == 0:
                print(f"warning: the loss is {value} at step {step}: training diverged (try a "
                      "lower --lr, or --clip-grad)", flush=True)
        if step - start_step + 1 == warmup:
            t_warm, cpu_warm = time.perf_counter(), time.process_time()
            untimed_at_warm = untimed["seconds"]
        tokens += args.global_batch * args.seq_len
        if rank == 0 and (step % args.log_every == 0 or step == args.steps - 1):
            elapsed = time.perf_counter() - t0 - untimed["seconds"]
            comm = (f"{collective_seconds() - comm0 - untimed['collectives']:6.2f}s"
                    if collectives_timed() else "n/a")
            print(f"step {step:4d}  loss {value:.4f}  tokens/s {tokens / elapsed:8.0f}  "
                  f"peak mem {mib(device_peak_memory(device)):>11}  collectives {comm}", flush=True)
        # Every --checkpoint-every steps, and at the end: a finished run resumes as finished
        # (and a --checkpoint-dir alone is not a silent no-op).
        if args.checkpoint_dir and (step + 1 == args.steps or
                                    args.checkpoint_every and (step + 1) % args.checkpoint_every == 0):
            outside_timing(save_checkpoint, args.checkpoint_dir, model, opt, step + 1,
                           model_config(args))
        outside_timing(profiler.after, step)

    t_end = time.perf_counter()
    elapsed = t_end - t0 - untimed["seconds"]
    steady_elapsed = t_end - t_warm - (untimed["seconds"] - untimed_at_warm)
    # Read before the summary's own all_gather_object below, which is no part of training.
    comm_seconds = collective_seconds() - comm0 - untimed["collectives"]
    # CPU time of the steady steps, every thread of the process (kernels,
    # collectives, autograd): with the wall time it shows how busy the cores were.
    peak = device_peak_memory(device)
    mine = torch.tensor([-1 if peak is None else peak, time.process_time() - cpu_warm],
                        dtype=torch.float64)
    per_rank = [mine]
    if distributed:
        per_rank = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(per_rank, mine)
        if dist.get_backend() == "gloo":
            let_gloo_drop([report, mine, *per_rank])
    per_rank = [t.tolist() for t in per_rank]  # [peak bytes (-1: none), CPU seconds] per rank
    peaks = [None if p < 0 else int(p) for p, _ in per_rank]
    final_loss = losses[-1] if losses else math.nan
    steady_steps = args.steps - start_step - warmup
    if rank == 0:
        summary = {"strategy": args.strategy, "world_size": world if distributed else 1,
                   "steps": args.steps - start_step, "first_step": start_step,
                   "losses": [finite_or_none(v) for v in losses],
                   "final_loss": finite_or_none(final_loss), "seconds": elapsed,
                   "steps_per_second": (args.steps - start_step) / elapsed if elapsed else 0.0,
                   "steady_steps_per_second": steady_steps / steady_elapsed
                   if steady_elapsed > 0 else 0.0,
                   "steady_cpu_seconds_per_step": sum(c for _, c in per_rank) / steady_steps
                   if steady_steps > 0 else 0.0,
                   "tokens_per_second": tokens / elapsed if elapsed else 0.0,
                   "peak_memory_bytes_per_device": peaks, "bf16": args.bf16,
                   "compiled": args.compile,
                   "graph_replays": captured.replays if captured else 0,
                   # rank 0's share of the parameters (tensor parallelism and
                   # sharding shrink it)
                   "local_parameter_elements": local_parameter_elements(model),
                   # rank 0's oreg_ccl worker time in collectives (overlaps
                   # compute); null for backends that do not tell
                   "collective_seconds": comm_seconds if collectives_timed() else None,
                   "profiled_steps": len(profiler.steps),
                   "hosts": host_layout(device) if distributed else "1 host"}
        os.makedirs(args.out_dir, exist_ok=True)
        with open(os.path.join(args.out_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=1, allow_nan=False)
        if not args.no_plot:
            write_plot(os.path.join(args.out_dir, "loss.png"), losses, start_step, args)
        print(f"done: {summary['steps']} steps in {elapsed:.1f}s, final loss {final_loss:.4f}; "
              f"summary in {args.out_dir}/summary.json", flush=True)
    if distributed:
        dist.destroy_process_group()


class CapturedStep:
    """--graph: the training step captured as an openreg graph (forward, backward, clipping,
    the optimizer and the loss's all_reduce: NCCL-style collectives are capturable) and
    replayed for each batch, copied into the capture's static inputs first. As with CUDA
    graphs, the host then launches one graph per step instead of every kernel; the caller
    runs the whole job on a side stream (a capture must not use the default stream)."""

    def __init__(self, train_step, x, y, opt):
        self.x, self.y, self.replays = x, y, 0
        # Gradients set to None: backward allocates them in the graph's pool, and every
        # replay writes them there again (torch's whole-network capture recipe).
        opt.zero_grad(set_to_none=True)
        self.graph = torch.openreg.Graph()
        with torch.openreg.graph(self.graph, stream=torch.openreg.current_stream()):
            self.loss = train_step(self.x, self.y)

    def __call__(self, x, y):
        self.x.copy_(x)
        self.y.copy_(y)
        self.graph.replay()
        self.replays += 1
        return self.loss


class StepProfiler:
    """--profile-steps N: torch.profiler over steps [first, first + N) (CPU
    operators, and on openreg each kernel and collective as device work), a
    Chrome trace per rank, and rank 0's operators by self time."""

    def __init__(self, args, device, first, rank):
        self.steps = range(first, min(first + args.profile_steps, args.steps))
        self.args, self.device, self.rank, self.prof = args, device, rank, None

    def before(self, step):
        if step != self.steps.start or not self.steps:
            return
        from torch.profiler import ProfilerActivity, profile
        activities = [ProfilerActivity.CPU]
        if self.device.type == "openreg":
            activities.append(ProfilerActivity.PrivateUse1)
        self.prof = profile(activities=activities)
        self.prof.__enter__()

    def after(self, step):
        if self.prof is None or step != self.steps[-1]:
            return
        if self.device.type == "openreg":
            torch.openreg.synchronize()
        self.prof.__exit__(None, None, None)
        os.makedirs(self.args.out_dir, exist_ok=True)
        path = os.path.join(self.args.out_dir, f"trace_rank{self.rank}.json")
        self.prof.export_chrome_trace(path)
        if self.rank == 0:
            device_time = self.device.type == "openreg"
            sort = "self_device_time_total" if device_time else "self_cpu_time_total"
            print(f"profile of steps {self.steps.start}-{self.steps[-1]} (Chrome traces: "
                  f"{self.args.out_dir}/trace_rank*.json):", flush=True)
            print(self.prof.key_averages().table(sort_by=sort, row_limit=15), flush=True)
        self.prof = None


def write_plot(path, losses, start, args):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed; skipping the loss plot", flush=True)
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    # A line through one point draws nothing: mark the points of a short run.
    ax.plot(range(start, start + len(losses)), losses, marker="o" if len(losses) < 20 else None)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(f"GPT on {args.device_type}, strategy {args.strategy}")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    main()
