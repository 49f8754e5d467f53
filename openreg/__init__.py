"""openreg: a simulated PyTorch accelerator on the CPU.

``import torch`` loads this package through the ``torch.backends`` entry point
(``_autoload``); ``import openreg`` works as well. Afterwards the device type
``"openreg"`` exists and ``torch.openreg`` is this module, with the same
surface as ``torch.cuda`` for devices, streams, events, memory and RNG.
"""


def _autoload():
    """Entry point for torch's device-backend autoloading (importing does the work).

    Defined before ``import torch``: when openreg is imported first, torch's
    autoload re-enters this partially initialised module and calls it.
    """


import atexit  # noqa: E402

import torch  # noqa: E402

from . import _C  # noqa: F401  (registers the device with PyTorch's hooks)
from .device import (
    _is_in_bad_fork,
    _lazy_init,
    can_device_access_peer,
    current_device,
    device,
    device_count,
    device_of,
    get_device_capability,
    get_device_name,
    get_device_properties,
    get_sync_debug_mode,
    init,
    is_available,
    is_initialized,
    set_device,
    set_sync_debug_mode,
    synchronize,
)
from .streams import (
    _sleep,
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    is_current_stream_capturing,
    set_stream,
    stream,
)
from .memory import (
    MemPool,
    caching_allocator_alloc,
    caching_allocator_delete,
    device_memory_used,
    empty_cache,
    get_allocator_backend,
    get_per_process_memory_fraction,
    host_memory_stats,
    host_memory_stats_as_nested_dict,
    list_gpu_processes,
    max_memory_allocated,
    max_memory_cached,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_cached,
    memory_reserved,
    memory_snapshot,
    memory_stats,
    memory_stats_as_nested_dict,
    memory_summary,
    reset_accumulated_host_memory_stats,
    reset_accumulated_memory_stats,
    reset_max_memory_allocated,
    reset_max_memory_cached,
    reset_peak_host_memory_stats,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
    use_mem_pool,
)
from .random import (
    default_generators,
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .amp import get_amp_supported_dtype, is_bf16_supported
from .graphs import Graph, graph, graph_pool_handle, make_graphed_callables
from . import rnn  # noqa: F401  (registers the fused RNN cell kernels)
from . import sanitizer  # noqa: F401  (torch.openreg.sanitizer, the race checker)
from . import _registration
from . import _ccl
from . import _sharing
from ._sharing import ipc_collect

_registration.register()
_ccl.register()
_sharing.register()
# Before finalisation, while the autograd engine's device threads can still
# take the GIL (see _drain_autograd_device_threads in csrc/python/Module.cpp).
atexit.register(_C._drain_autograd_device_threads)


def _end_a_profile_left_running() -> None:
    """A kernel error inside `with torch.profiler.profile()` makes the profiler's
    exit raise at its device synchronize (the sticky error, as CUDA's), before it
    turns itself off; torch's profiler state then crashes the process at exit
    (a segfault in ~ProfilerStateBase). Turned off here, the process ends with
    the script's own exit code. torch's own flag also tells of a profile left
    running by another thread, which the exiting thread's state does not show."""
    if torch._C._autograd._profiler_enabled() or torch.autograd.profiler._is_profiler_enabled:
        try:
            torch.autograd._disable_profiler()
        except Exception:  # nothing more to save at exit
            pass


atexit.register(_end_a_profile_left_running)

OutOfMemoryError = torch.OutOfMemoryError  # what an allocation beyond capacity raises


def __getattr__(name):
    # torch.utils.checkpoint saves and restores a device's RNG state only if
    # its module's `_initialized` is true (torch.cuda keeps such a flag); without
    # it a checkpointed block with dropout recomputes another mask.
    if name == "_initialized":
        return is_initialized()
    # Inductor's code generators for openreg, which torch looks up here when
    # torch.compile first needs them (not imported before: Inductor is heavy).
    if name in ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen"):
        from . import _inductor

        return getattr(_inductor, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Event", "Graph", "MemPool", "OutOfMemoryError", "Stream", "StreamContext", "caching_allocator_alloc",
    "caching_allocator_delete", "can_device_access_peer", "current_device", "current_stream",
    "default_stream", "device", "device_count", "device_memory_used", "device_of", "empty_cache",
    "get_allocator_backend", "get_amp_supported_dtype", "get_device_capability", "get_device_name",
    "get_device_properties", "get_per_process_memory_fraction", "get_rng_state",
    "get_rng_state_all", "get_sync_debug_mode", "graph", "graph_pool_handle", "init",
    "initial_seed", "ipc_collect", "is_available", "is_bf16_supported", "is_current_stream_capturing",
    "is_initialized", "list_gpu_processes", "make_graphed_callables", "manual_seed",
    "manual_seed_all", "max_memory_allocated", "max_memory_cached", "max_memory_reserved",
    "mem_get_info", "memory_allocated", "memory_cached", "memory_reserved", "memory_snapshot",
    "memory_stats", "memory_stats_as_nested_dict", "memory_summary",
    "reset_accumulated_memory_stats", "reset_max_memory_allocated", "reset_max_memory_cached",
    "reset_peak_memory_stats", "seed", "seed_all", "set_device", "set_per_process_memory_fraction",
    "set_rng_state", "set_rng_state_all", "set_stream", "set_sync_debug_mode", "stream",
    "synchronize", "use_mem_pool",
]
