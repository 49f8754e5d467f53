"""Inductor's backend for openreg (torch.compile's default).

Loaded on first use (importing Inductor costs about a second): torch finds the
code generators through ``torch.openreg.Scheduling`` etc. (``openreg.__getattr__``).
Dynamo's device interface (openreg/_device_interface.py) is registered earlier, when
``torch._dynamo`` is imported (openreg/_registration.py).
Inductor's FX graph cache does not key on this package: a cached graph calls
``kernels.build`` with the arguments it was generated with, so keep that
signature stable.
"""

import torch._inductor.config
from torch._inductor.codegen.common import register_device_op_overrides

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

__all__ = ["CppWrapperCodegen", "PythonWrapperCodegen", "Scheduling", "WrapperFxCodegen"]
