"""Inductor's code generation for openreg: CPU kernels, launched on streams.

What ``torch._inductor.codegen.common.register_backend_for_device`` takes for a
device: a Scheduling (which kernels to generate) and wrapper code generators
(the Python that allocates buffers and calls the kernels). openreg generates
Inductor's C++ CPU kernels (``CppScheduling``) and changes two things in the
Python wrapper: each kernel is built by ``kernels.build`` instead of
the CPU's Python binding (calling it queues it on the current stream), and
buffers are allocated on their own openreg device.
They are registered by ``register_backend()`` (openreg/_inductor/__init__.py),
with the FX graph cache key, once Inductor's compile_fx is imported.
"""

import torch
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen import wrapper, wrapper_fxir
from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
from torch._inductor.virtualized import V

# Prepended to every openreg kernel's source: keeps an openreg kernel apart
# from a CPU kernel with the same code (Inductor shares kernels by source) and
# tells the wrapper which kernel definitions to build with kernels.build.
_KERNEL_MARK = "// openreg kernel\n"
_CPU_BINDING = "async_compile.cpp_pybinding("
_OPENREG_BUILD = "openreg_build_kernel(async_compile, {name!r}, "

_CPU = torch.device("cpu")


class Scheduling(CppScheduling):
    """Inductor's C++ kernels, generated exactly as for the CPU.

    Kernel code generation asks "the current device" which backend it is
    (``get_current_backend``: every device but the CPU's maps to Triton) and
    what code to write, so openreg nodes are generated as CPU nodes; only the
    buffers they use stay on their openreg device. (codegen_template, the C++
    GEMM templates of max-autotune, is left alone: Inductor offers them to the
    CPU only.)
    """

    def codegen_node(self, node):
        with V.graph.set_current_device(_CPU):
            super().codegen_node(node)

    def flush(self):
        with V.graph.set_current_device(_CPU):
            super().flush()

    def define_kernel(self, src_code, nodes, kernel_args=None):
        return super().define_kernel(_KERNEL_MARK + src_code, nodes, kernel_args)


class _OpenRegKernelCalls:
    """What the openreg wrappers change in PythonWrapperCodegen."""

    def write_header(self) -> None:
        super().write_header()
        self.imports.writeline("from openreg._inductor.kernels import build as openreg_build_kernel")

    def define_kernel(self, kernel_name, kernel_body, metadata=None, gpu=True,
                      cpp_definition=None):
        if _KERNEL_MARK in kernel_body and kernel_body.startswith(_CPU_BINDING):
            kernel_body = _OPENREG_BUILD.format(name=kernel_name) + kernel_body[len(_CPU_BINDING):]
        super().define_kernel(kernel_name, kernel_body, metadata, gpu, cpp_definition)

    def make_allocation(self, name, device, dtype, shape, stride, allocation_shape=None,
                        is_pinned=False):
        line = super().make_allocation(name, device, dtype, shape, stride, allocation_shape,
                                       is_pinned)
        # Inductor allocates on "the current device" of devices it does not
        # guard (it guards only GPU types); name the buffer's device instead.
        if device.type == "openreg" and device.index is not None:
            line = line.replace("device='openreg'", f"device='openreg:{device.index}'")
        return line


class PythonWrapperCodegen(_OpenRegKernelCalls, wrapper.PythonWrapperCodegen):
    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        if is_subgraph:
            return SubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return PythonWrapperCodegen()


class SubgraphWrapperCodegen(_OpenRegKernelCalls, wrapper.SubgraphPythonWrapperCodegen):
    pass


def _not_built(mode: str):
    def create(*args, **kwargs):
        raise NotImplementedError(
            f"openreg: Inductor's {mode} is not supported; use the default Python wrapper"
        )

    return staticmethod(create)


class CppWrapperCodegen(CppWrapperCpu):
    """torch._inductor.config.cpp_wrapper: its C++ would pass kernels raw device pointers."""

    create = _not_built("cpp_wrapper mode")


class WrapperFxCodegen(wrapper_fxir.WrapperFxCodegen):
    """torch._inductor.config.fx_wrapper."""

    create = _not_built("fx_wrapper mode")
