"""Automatic mixed precision (the torch.cuda.amp surface, for openreg).

torch.autocast("openreg") asks the device module for get_amp_supported_dtype;
the cast policy itself is registered in C++ (csrc/aten/Autocast.cpp), with
CUDA's op lists. torch.amp.GradScaler("openreg") needs no glue: its
_amp_foreach_non_finite_check_and_unscale_ / _amp_update_scale_ kernels run
on openreg through the generic fallback.
Tests: tests/ops/test_amp.py.
"""
from typing import List

import torch


def get_amp_supported_dtype() -> List[torch.dtype]:
    """Low-precision dtypes openreg autocasts to (both, like CUDA on sm_80+)."""
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True
