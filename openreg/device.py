"""Device selection and properties (the torch.cuda device API, for openreg).

Backed by the PrivateUse1 hooks and DeviceGuardImpl in csrc/runtime. torch
calls some of these by name on the module given to
``torch._register_device_module`` (``_lazy_init``, ``is_initialized``,
``_is_in_bad_fork``, ``current_device``, ``device_count``, ...): the names are
the contract.
Tests: tests/runtime/test_device.py.
"""
import functools
import os
import uuid as uuidlib
from dataclasses import dataclass
from typing import Any, Union

import torch

from . import _C

_DeviceLike = Union[torch.device, str, int, None]


def _raise_if_forked() -> None:
    """Raises in a forked child of an initialised parent (CUDA's rule)."""
    if _C._is_forked_child():
        raise RuntimeError(
            "Cannot re-initialize openreg in forked subprocess. To use openreg with "
            "multiprocessing, you must use the 'spawn' start method"
        )


def _lazy_init() -> None:
    """Initialises the device runtime, as torch.cuda._lazy_init: PyTorch calls it
    (torch.accelerator.set_device_index, set_stream) and then expects
    is_initialized() to be true (DeviceMesh keeps a device chosen before it only
    then). Raises in a forked child of an initialised parent, and without a
    usable device (as torch.cuda's "No CUDA GPUs are available")."""
    _raise_if_forked()
    if _C._is_initialized():
        return
    if _C._config_error() or _C._device_count() == 0:
        _C._check_device(0)  # raises, naming the setting that left no usable device
    _C._init()


def init() -> None:
    """Initialises openreg's state (torch.cuda.init); a no-op once initialised."""
    _lazy_init()


def _get_device_index(device: _DeviceLike, optional: bool = True) -> int:
    if isinstance(device, _DeviceContext):  # as torch.cuda's accepts a torch.cuda.device
        device = device.idx
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "openreg":
            raise ValueError(f"Expected an openreg device, but got: {device}")
        index = device.index
    else:
        index = device
    if index is None or index == -1:
        if index is None and not optional:  # -1 is c10's "current device" anywhere
            raise ValueError("Expected a torch.device with a specified index or an integer, "
                             f"but got:{device}")
        return current_device()
    if not isinstance(index, int):
        raise TypeError(f"Invalid device {device!r}")
    _C._check_device(index)
    return index


def is_available() -> bool:
    # Never raises, as torch.cuda.is_available(); device_count() says what is wrong.
    return not _C._config_error() and device_count() > 0


def is_initialized() -> bool:
    return _C._is_initialized() and not _C._is_forked_child()


def device_count() -> int:
    error = _C._config_error()  # OPENREG_DEVICE_COUNT / OPENREG_DEVICE_MEMORY, checked once in C++
    if error:
        raise ValueError(error)
    return _C._device_count()


def current_device() -> int:
    if torch.compiler.is_compiling():
        # Dynamo folds this one to a constant it guards on, as torch.cuda.current_device.
        return torch.accelerator.current_device_index()
    _lazy_init()
    return _C._current_device()


def set_device(device: _DeviceLike) -> None:
    if isinstance(device, int) and device < 0:
        return  # a no-op, as torch.cuda.set_device
    _lazy_init()
    index = _get_device_index(device, optional=False)  # "openreg" alone is refused, as "cuda"
    _C._set_device(index)


class device:
    """Context manager that changes the current device (like torch.cuda.device)."""

    def __init__(self, device: Any):
        # None or a negative index: a no-op, as torch.cuda.device
        negative = isinstance(device, int) and device < 0
        self.idx = -1 if device is None or negative else _get_device_index(device)
        self.prev_idx = -1

    def __enter__(self):
        if self.idx < 0:
            return  # touches no device, as torch.cuda's (CPU code runs without one)
        _lazy_init()
        self.prev_idx = _C._exchange_device(self.idx)

    def __exit__(self, *args):
        if self.idx != -1:
            _C._set_device(self.prev_idx)
        return False


_DeviceContext = device


class device_of(device):
    """Sets the current device to that of the given tensor (no-op for CPU tensors)."""

    def __init__(self, obj):
        super().__init__(obj.get_device() if obj.device.type == "openreg" else None)


@dataclass(frozen=True)
class _DeviceProperties:
    """torch.cuda's device properties, with the values a simulated device has:
    its capacity (OPENREG_DEVICE_MEMORY), the host's L2 cache (kernels are CPU
    code) and its L1 data cache as "shared memory" (a core's fast local memory),
    one lane per "warp" and per block, and a stable uuid per physical device."""
    name: str
    total_memory: int
    major: int = 1
    minor: int = 0
    multi_processor_count: int = 1
    max_threads_per_multi_processor: int = 1
    warp_size: int = 1
    max_threads_per_block: int = 1
    L2_cache_size: int = 0
    shared_memory_per_block: int = 0
    shared_memory_per_block_optin: int = 0
    shared_memory_per_multiprocessor: int = 0
    is_integrated: bool = False  # device memory is the host's RAM, but the host cannot touch it
    is_multi_gpu_board: bool = False
    uuid: str = ""
    pci_bus_id: int = 0
    pci_device_id: int = 0
    pci_domain_id: int = 0

    def __repr__(self) -> str:
        return (f"_OpenRegDeviceProperties(name='{self.name}', major={self.major}, "
                f"minor={self.minor}, total_memory={self.total_memory // (1024 * 1024)}MB, "
                f"multi_processor_count={self.multi_processor_count})")


def get_device_properties(device: _DeviceLike = None) -> _DeviceProperties:
    if isinstance(device, (str, torch.device)) and torch.device(device).type == "openreg":
        device = torch.device(device).index  # range-checked below, in CUDA's words
    index = device if isinstance(device, int) else _get_device_index(device)
    if index < 0 or index >= device_count():
        raise AssertionError("Invalid device id")  # torch.cuda.get_device_properties' words
    l1 = _host_cache_size(1, "Data")
    # Named by the physical device, as CUDA's properties name the GPU whatever
    # CUDA_VISIBLE_DEVICES numbers it (OPENREG_VISIBLE_DEVICES).
    physical = _C._device_physical_index(index)
    return _DeviceProperties(name=f"openreg simulated device {physical}",
                             total_memory=_C._device_total_memory(),
                             L2_cache_size=_host_cache_size(2, "Unified"),
                             shared_memory_per_block=l1, shared_memory_per_block_optin=l1,
                             shared_memory_per_multiprocessor=l1,
                             uuid=str(uuidlib.uuid5(uuidlib.NAMESPACE_OID, f"openreg:{physical}")),
                             pci_bus_id=physical)


@functools.lru_cache(maxsize=None)  # the host's caches do not change: read sysfs once
def _host_cache_size(level: int, kind: str) -> int:
    """The first CPU's cache of `level` and `kind` ("Data", "Unified") in bytes
    (sysfs), 0 if unknown."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in sorted(os.listdir(base)):
            with open(os.path.join(base, entry, "level")) as f:
                if f.read().strip() != str(level):
                    continue
            with open(os.path.join(base, entry, "type")) as f:
                if f.read().strip() != kind:
                    continue
            with open(os.path.join(base, entry, "size")) as f:
                size = f.read().strip()
            units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
            return int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)
    except (OSError, ValueError):
        pass
    return 0


def can_device_access_peer(device: _DeviceLike, peer_device: _DeviceLike) -> bool:
    """Whether kernels on `device` can read `peer_device`'s memory directly, as
    torch.cuda.can_device_access_peer: any two distinct openreg devices of a
    process can (cross-device copies are one kernel)."""
    return _get_device_index(device) != _get_device_index(peer_device)  # both checked


def get_device_name(device: _DeviceLike = None) -> str:
    return get_device_properties(device).name


def get_device_capability(device: _DeviceLike = None) -> tuple:
    props = get_device_properties(device)
    return (props.major, props.minor)


def synchronize(device: _DeviceLike = None) -> None:
    """Waits for all streams of the device to finish their queued work."""
    _lazy_init()
    _C._synchronize(_get_device_index(device))


def set_sync_debug_mode(debug_mode: Union[int, str]) -> None:
    """Warns ("warn", 1) or raises ("error", 2) when an operation makes the host
    wait for the device (`.item()`, a blocking copy, an operator that runs
    synchronously such as `nonzero`, Stream.synchronize); "default" (0) turns it
    off. As torch.cuda.set_sync_debug_mode; the message names the operation."""
    if isinstance(debug_mode, str):
        modes = {"default": 0, "warn": 1, "error": 2}
        if debug_mode not in modes:
            raise RuntimeError(
                "invalid value of debug_mode, expected one of `default`, `warn`, `error`"
            )
        debug_mode = modes[debug_mode]
    _C._set_sync_debug_mode(debug_mode)


def get_sync_debug_mode() -> int:
    """The setting of set_sync_debug_mode: 0, 1 or 2."""
    return _C._get_sync_debug_mode()


def _is_in_bad_fork() -> bool:
    """True in a forked child of an initialised parent (torch.manual_seed checks this)."""
    return _C._is_forked_child()
