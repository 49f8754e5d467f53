"""torch.compile on openreg: Dynamo's device interface and Inductor's backend.

Loaded on first use (importing Inductor costs about a second): torch finds the
code generators through ``torch.openreg.Scheduling`` etc. (``openreg.__getattr__``),
and Dynamo's device interface is registered once ``torch._dynamo`` is imported.
"""

import torch._inductor.config
from torch._dynamo.device_interface import register_interface_for_device
from torch._inductor.codegen.common import register_device_op_overrides

from .codegen import CppWrapperCodegen, PythonWrapperCodegen, Scheduling, WrapperFxCodegen
from .device_op_overrides import OpenRegDeviceOpOverrides

from .device_interface import OpenRegInterface

# Three fusion passes treat every node that is not the CPU's as a Triton
# (SIMD) kernel, and fail on or mis-handle the C++ kernels openreg generates;
# the CPU skips them. torch has no per-device switch, so they are turned off
# for the process (on a CPU-only torch they change nothing else).
torch._inductor.config.loop_ordering_after_fusion = False
torch._inductor.config.loop_reindexing_after_fusion = False
torch._inductor.config.loop_index_inversion_in_fusion = False

register_device_op_overrides("openreg", OpenRegDeviceOpOverrides())
register_interface_for_device("openreg", OpenRegInterface)

__all__ = ["CppWrapperCodegen", "PythonWrapperCodegen", "Scheduling", "WrapperFxCodegen"]
