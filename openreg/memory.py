"""Device memory statistics and cache control (the torch.cuda memory API).

Statistics come from the caching allocator in csrc/runtime/OpenRegCachingAllocator.cpp
through torch.accelerator, with the same key names as torch.cuda.memory_stats.
Tests: tests/runtime/test_memory.py, test_memory_history.py, test_mem_pool.py.
"""
import contextlib
import os
import pickle
import sys
import warnings
from collections import OrderedDict
from typing import Any, Optional

import torch

from . import _C
from .device import _get_device_index, _lazy_init, current_device, device_count, is_initialized


# The statistics come from the allocator through torch.accelerator, which
# already flattens them into torch.cuda.memory_stats' key names. Before the
# device is initialised (and in a forked child of an initialised parent)
# there is nothing to report: torch.cuda then returns {} / 0 without raising.

def memory_stats(device=None) -> "OrderedDict[str, Any]":
    if not is_initialized():
        return OrderedDict()
    return torch.accelerator.memory_stats(_get_device_index(device))


def memory_stats_as_nested_dict(device=None) -> dict:
    """memory_stats() before flattening: ``{"allocated_bytes": {"all": {"current": ...}}}``."""
    nested: dict = {}
    for key, value in memory_stats(device).items():
        *path, leaf = key.split(".")
        node = nested
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def _record_memory_history(
    enabled: Optional[str] = "all",
    context: Optional[str] = "all",
    stacks: str = "all",
    max_entries: int = sys.maxsize,
    device=None,
    clear_history: bool = False,
) -> None:
    """Records the allocator's actions (`enabled="all"`; `"state"`: only live
    blocks' tracebacks; None: stop) with the Python and, for `stacks="all"`, C++
    traceback of each (`context`: "state", "alloc", "all" or None), as
    torch.cuda.memory._record_memory_history. For every device (CUDA's setting
    is process-wide too); `device` is accepted for the same signature. Stopping
    drops the trace, as CUDA's does. A bool `enabled` is the legacy form (True:
    live blocks' tracebacks only, False: stop)."""
    if isinstance(enabled, bool):  # legacy: tracebacks of live blocks only
        enabled, context = ("state", "state") if enabled else (None, None)
    _C._record_memory_history(enabled, context, stacks, max_entries, clear_history)


def _snapshot(device=None) -> dict:
    """The allocator's state and recorded actions: {"segments": [...],
    "device_traces": [[...] per device]}, torch.cuda.memory._snapshot()'s
    dictionary, which torch.cuda._memory_viz reads."""
    if not is_initialized():
        return {"segments": [], "device_traces": [[] for _ in range(device_count())]}
    return _C._snapshot()


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Pickles _snapshot() to `filename` (for pytorch.org/memory_viz)."""
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)


def memory_snapshot(mempool_id=None, include_traces=True) -> list:
    """Every segment of every device with its blocks, as torch.cuda.memory_snapshot();
    only those of the pool `mempool_id` (a MemPool's or a graph's id) if given
    (other than (0, 0), which means all, as for CUDA).
    `include_traces` is accepted for torch.cuda's signature: segments carry no traces."""
    segments = _C._snapshot()["segments"] if is_initialized() else []
    mempool_id = None if mempool_id is None else tuple(mempool_id)
    if mempool_id is None or mempool_id == (0, 0):  # (0, 0): every segment, as CUDA's
        return segments
    return [s for s in segments if tuple(s["segment_pool_id"]) == mempool_id]


class MemPool(_C._MemPool):
    """A pool of the caching allocator, as torch.cuda.MemPool: only allocations
    routed to it (`use_mem_pool`, or a graph captured with ``pool=pool.id``) use
    its memory, which empty_cache() leaves alone while the pool lives; when the
    pool is deleted (which does not wait for the device) its unused memory goes
    back to the device and its blocks still allocated become ordinary ones,
    once the work queued on the device at that moment has run.

    use_on_oom: an allocation outside the pool that finds no memory may take a
    free block of the pool (one its stream allocated). no_split: the pool's
    blocks are never split. Custom allocators (`allocator=`, CUDA's pluggable
    allocators) are not built for openreg."""

    def __init__(self, allocator=None, use_on_oom: bool = False, no_split: bool = False):
        if allocator is not None:
            raise NotImplementedError(
                "openreg's MemPool takes no allocator: pluggable allocators are not built for openreg")
        _lazy_init()
        super().__init__(use_on_oom, no_split)

    @property
    def allocator(self):
        """None: the pool's memory comes from the caching allocator."""
        return None

    def snapshot(self, include_traces=True) -> list:
        """The pool's segments, as memory_snapshot(self.id)."""
        return memory_snapshot(self.id, include_traces=include_traces)


@contextlib.contextmanager
def use_mem_pool(pool: MemPool, device=None):
    """Routes the calling thread's allocations on `device` (the current device
    if None) to `pool` inside the block, as torch.cuda.use_mem_pool. Other
    threads (autograd's backward threads included) allocate as before."""
    if not isinstance(pool, MemPool):
        raise TypeError(f"use_mem_pool expects a torch.openreg.MemPool, got {type(pool).__name__}")
    index = current_device() if device is None else _get_device_index(device)
    _C._begin_allocate_current_thread_to_pool(index, pool.id)
    try:
        yield
    finally:
        _C._end_allocate_current_thread_to_pool(index, pool.id)


def set_per_process_memory_fraction(fraction, device=None) -> None:
    """Limits what the cache may reserve on the device to fraction x its capacity."""
    _lazy_init()
    index = _get_device_index(device)
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if not 0 <= fraction <= 1:  # NaN too
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    _C._set_memory_fraction(fraction, index)


def get_per_process_memory_fraction(device=None) -> float:
    _lazy_init()
    return _C._get_memory_fraction(_get_device_index(device))


def caching_allocator_alloc(size, device=None, stream=None) -> int:
    """A block of device memory from the cache, for `stream` (default: the device's current one)."""
    _lazy_init()
    index = _get_device_index(device)
    if stream is None:
        stream = torch.openreg.current_stream(index)
    if not isinstance(stream, torch.Stream) or stream.device.type != "openreg":
        raise TypeError("Invalid type for stream argument, must be `torch.openreg.Stream`")
    if device is not None and stream.device_index != index:
        raise ValueError(f"stream is on openreg:{stream.device_index}, not on openreg:{index}")
    return _C._raw_alloc(size, stream.stream_id, stream.device_index)


def caching_allocator_delete(mem_ptr: int) -> None:
    """Frees a block from caching_allocator_alloc (stream-ordered, like a tensor's memory)."""
    _C._raw_delete(mem_ptr)


def _stat(query, device) -> int:
    return query(_get_device_index(device)) if is_initialized() else 0


def memory_allocated(device=None) -> int:
    return _stat(torch.accelerator.memory_allocated, device)


def max_memory_allocated(device=None) -> int:
    return _stat(torch.accelerator.max_memory_allocated, device)


def memory_reserved(device=None) -> int:
    return _stat(torch.accelerator.memory_reserved, device)


def max_memory_reserved(device=None) -> int:
    return _stat(torch.accelerator.max_memory_reserved, device)


def reset_peak_memory_stats(device=None) -> None:
    torch.accelerator.reset_peak_memory_stats(_get_device_index(device))


def reset_accumulated_memory_stats(device=None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_get_device_index(device))


def empty_cache() -> None:
    """Returns cached, unused device memory to the (simulated) driver."""
    if is_initialized():
        _C._empty_cache()


# Pinned host memory (Tensor.pin_memory(), DataLoader(pin_memory=True)) comes
# from PyTorch's caching host allocator (csrc/runtime/OpenRegHostAllocator.cpp):
# blocks of power-of-two sizes are kept for reuse, as CUDA's are.

def host_memory_stats_as_nested_dict() -> dict:
    """The pinned allocator's statistics, as torch.cuda.host_memory_stats_as_nested_dict()
    (pinning needs no device: unlike the device's, these count before initialisation)."""
    return _C._host_memory_stats()


def host_memory_stats() -> "OrderedDict[str, Any]":
    """torch.cuda.host_memory_stats(): "allocations.current", "num_host_alloc", ..."""
    flat = []

    def add(prefix, value):
        if isinstance(value, dict):
            for key, inner in value.items():
                add(f"{prefix}.{key}" if prefix else key, inner)
        else:
            flat.append((prefix, value))

    add("", host_memory_stats_as_nested_dict())
    return OrderedDict(sorted(flat))


def reset_accumulated_host_memory_stats() -> None:
    _C._reset_accumulated_host_memory_stats()


def reset_peak_host_memory_stats() -> None:
    _C._reset_peak_host_memory_stats()


def mem_get_info(device=None) -> tuple:
    """(free, total) bytes of the device, as torch.cuda.mem_get_info."""
    device_count()  # raises for a bad OPENREG_DEVICE_MEMORY, as every device API does
    # A device given must name its index, as torch.cuda.mem_get_info's.
    index = _get_device_index(device, optional=device is None)
    total = _C._device_total_memory()
    return total - _C._device_used_memory(index), total


def _fmt(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A human-readable table of the allocator's statistics for one device."""
    index = _get_device_index(device)
    stats = memory_stats(index)
    rows = [
        ("Allocated memory", "allocated_bytes", True),
        ("Active memory", "active_bytes", True),
        ("Requested memory", "requested_bytes", True),
        ("Reserved memory", "reserved_bytes", True),
        ("Allocations", "allocation", False),
        ("Active allocs", "active", False),
        ("Segments", "segment", False),
        # Cached parts of segments in part allocated: empty_cache() cannot return them.
        ("Non-releasable memory", "inactive_split_bytes", True),
        ("Non-releasable allocs", "inactive_split", False),
        # Blocks of at least max_split_size_mb (PYTORCH_ALLOC_CONF), never split.
        ("Oversize allocations", "oversize_allocations", False),
        ("Oversize segments", "oversize_segments", False),
    ]
    lines = ["=" * 75,
             f" openreg memory summary, device ID {index:<3d}",
             "-" * 75,
             f"{'Metric':<24}|{'Cur Usage':>12} |{'Peak Usage':>12} |{'Tot Alloc':>12} |{'Tot Freed':>12}",
             "-" * 75]
    for title, key, is_bytes in rows:
        fmt = _fmt if is_bytes else str
        # Unabbreviated, as torch.cuda's: each pooled row split by pool as well.
        pools = [("all", title)] if key.startswith("oversize") or abbreviated else \
            [("all", title), ("large_pool", "      from large pool"), ("small_pool", "      from small pool")]
        for pool, label in pools:
            prefix = key if key.startswith("oversize") else f"{key}.{pool}"
            vals = [stats.get(f"{prefix}.{k}", 0) for k in ("current", "peak", "allocated", "freed")]
            lines.append(f"{label:<24}|" + "|".join(f"{fmt(v):>12} " for v in vals))
    lines.append("-" * 75)
    lines.append(f"OOMs: {stats.get('num_ooms', 0)}   alloc retries: {stats.get('num_alloc_retries', 0)}"
                 f"   device capacity: {_fmt(_C._device_total_memory())}")
    lines.append("=" * 75)
    return "\n".join(lines) + "\n"


# torch.cuda's deprecated names, with its warnings.
def memory_cached(device=None) -> int:
    warnings.warn("torch.openreg.memory_cached has been renamed to torch.openreg.memory_reserved",
                  FutureWarning, stacklevel=2)
    return memory_reserved(device)


def max_memory_cached(device=None) -> int:
    warnings.warn("torch.openreg.max_memory_cached has been renamed to "
                  "torch.openreg.max_memory_reserved", FutureWarning, stacklevel=2)
    return max_memory_reserved(device)


def reset_max_memory_allocated(device=None) -> None:
    warnings.warn("torch.openreg.reset_max_memory_allocated now calls "
                  "torch.openreg.reset_peak_memory_stats, which resets /all/ peak memory stats.",
                  FutureWarning, stacklevel=2)
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device=None) -> None:
    warnings.warn("torch.openreg.reset_max_memory_cached now calls "
                  "torch.openreg.reset_peak_memory_stats, which resets /all/ peak memory stats.",
                  FutureWarning, stacklevel=2)
    reset_peak_memory_stats(device)


def get_allocator_backend() -> str:
    """The allocator behind openreg tensors: always the native caching allocator
    (CUDA's alternative, cudaMallocAsync, has no counterpart)."""
    return "native"


def device_memory_used(device=None) -> int:
    """Bytes of device memory in use on the device, by the driver's count (what
    nvidia-smi reports for a GPU): the cache's reservations."""
    free, total = mem_get_info(device)
    return total - free


def list_gpu_processes(device=None) -> str:
    """Which processes use the device and how much memory, in
    torch.cuda.list_gpu_processes' format. Devices are per process, so the
    only user of this process's devices is the process itself."""
    index = _get_device_index(device)
    lines = [f"GPU:{index}"]
    used = device_memory_used(index) if is_initialized() else 0
    if used == 0:
        lines.append("no processes are running")
    else:
        lines.append(f"process {os.getpid():>10d} uses {used / (1024 * 1024):>12.3f} MB GPU memory")
    return "\n".join(lines)
