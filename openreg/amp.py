"""Automatic mixed precision (the torch.cuda.amp surface, for openreg).

torch.autocast("openreg") asks the device module for get_amp_supported_dtype;
the cast policy itself is registered in C++ (csrc/aten/Autocast.cpp), with
CUDA's op lists. torch.amp.GradScaler("openreg") needs no glue: its
_amp_foreach_non_finite_check_and_unscale_ / _amp_update_scale_ kernels run
on openreg through the generic fallback. autocast, GradScaler, custom_fwd and
custom_bwd here are torch.cuda.amp's deprecated aliases, for scripts ported
from CUDA.
Tests: tests/ops/test_amp.py.
"""
import functools
import warnings
from typing import List

import torch


def _deprecated(name: str, replacement: str) -> None:
    warnings.warn(f"`torch.openreg.amp.{name}(args...)` is deprecated. Please use "
                  f"`{replacement}` instead.", FutureWarning, stacklevel=3)


class autocast(torch.amp.autocast):
    """torch.cuda.amp.autocast for openreg: torch.autocast("openreg", ...)."""

    def __init__(self, enabled: bool = True, dtype: torch.dtype = torch.float16,
                 cache_enabled: bool = True):
        _deprecated("autocast", "torch.amp.autocast('openreg', args...)")
        super().__init__("openreg", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """torch.cuda.amp.GradScaler for openreg: torch.amp.GradScaler("openreg", ...)."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True):
        _deprecated("GradScaler", "torch.amp.GradScaler('openreg', args...)")
        super().__init__("openreg", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)


def custom_fwd(fwd=None, *, cast_inputs=None):
    _deprecated("custom_fwd", "torch.amp.custom_fwd(args..., device_type='openreg')")
    return functools.partial(torch.amp.custom_fwd, device_type="openreg")(fwd=fwd, cast_inputs=cast_inputs)


def custom_bwd(bwd):
    _deprecated("custom_bwd", "torch.amp.custom_bwd(args..., device_type='openreg')")
    return functools.partial(torch.amp.custom_bwd, device_type="openreg")(bwd)


def get_amp_supported_dtype() -> List[torch.dtype]:
    """Low-precision dtypes openreg autocasts to (both, like CUDA on sm_80+)."""
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True
