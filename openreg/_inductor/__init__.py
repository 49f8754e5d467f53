"""Inductor's backend for openreg (torch.compile's default).

Loaded on first use (importing Inductor costs about a second):
openreg/_registration.py calls ``register_backend()`` below once Inductor's
compile_fx is imported (``torch.openreg.Scheduling`` etc., which torch's
``init_backend_registration`` would find otherwise, are only the fallback).
Dynamo's device interface (openreg/_device_interface.py) is registered earlier, when
``torch._dynamo`` is imported (openreg/_registration.py).
Inductor's FX graph cache keys on a digest of this package (cache_key.py), so
a change to the code generators misses the cache.
"""

import torch._inductor.config
from torch._inductor.codegen.common import register_backend_for_device, register_device_op_overrides

from . import cache_key
from .codegen import CppWrapperCodegen, PythonWrapperCodegen, Scheduling, WrapperFxCodegen
from .device_op_overrides import OpenRegDeviceOpOverrides

# Three fusion passes treat every node that is not the CPU's as a Triton
# (SIMD) kernel, and fail on or mis-handle the C++ kernels openreg generates;
# the CPU skips them. torch has no per-device switch, so they are turned off
# for the process (on a CPU-only torch they change nothing else).
torch._inductor.config.loop_ordering_after_fusion = False
torch._inductor.config.loop_reindexing_after_fusion = False
torch._inductor.config.loop_index_inversion_in_fusion = False

register_device_op_overrides("openreg", OpenRegDeviceOpOverrides())


def register_backend() -> None:
    """Registers the code generators with Inductor, with the cache key. Called
    once Inductor's compile_fx is imported (openreg/_registration.py), before
    Inductor registers its backends: it would otherwise find the classes as
    ``torch.openreg.Scheduling`` etc. and register them without the key."""
    register_backend_for_device("openreg", Scheduling, PythonWrapperCodegen, CppWrapperCodegen,
                                WrapperFxCodegen, device_custom_config=cache_key)

__all__ = ["CppWrapperCodegen", "PythonWrapperCodegen", "Scheduling", "WrapperFxCodegen"]
