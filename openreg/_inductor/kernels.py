"""Inductor's C++ kernels, compiled for openreg and launched on its streams.

Inductor's CPU code generator writes each fused kernel as
``extern "C" void kernel(const float* in_ptr0, float* out_ptr0, ...)`` and, for
the CPU, calls it through a Python binding that passes ``tensor.data_ptr()``.
Device memory is not host-accessible here, and a kernel must run in its
stream's order, so an openreg kernel is built with an entry that takes one
``void*`` per argument instead; ``openreg._C._CompiledKernel`` queues
it on the current stream with kernel-visible addresses, declaring the tensors
it reads (``const T*``) and writes (``T*``) to the race checker, under a
RecordFunction named after the kernel (``cpp_fused_relu_sum_0``), which the
profiler shows as the kernel's operator.
"""

import ctypes

from torch._inductor.async_compile import get_compile_threads
from torch._inductor.codecache import CppCodeCache, LambdaFuture

from .. import _C

# The scalar parameter types Inductor's C++ kernels take (sizes, and values
# read from tensors with .item()), and how the launch binding stores each
# (csrc/python/CompiledKernels.cpp).
_SCALAR_KINDS = {"int64_t": "i", "float": "f"}


def _argument_kind(arg_type: str) -> str:
    arg_type = arg_type.strip()
    if arg_type.endswith("*"):
        return "r" if arg_type.startswith("const ") else "w"
    base = arg_type.removeprefix("const ").strip()
    if base not in _SCALAR_KINDS:
        raise NotImplementedError(
            f"openreg: Inductor kernel parameter of type {arg_type!r} is not supported"
        )
    return _SCALAR_KINDS[base]


def _entry_source(arg_types: list) -> str:
    """``openreg_kernel_entry(void** args)``: unpacks args and calls ``kernel``."""
    casts = []
    for i, arg_type in enumerate(arg_types):
        if arg_type.strip().endswith("*"):
            casts.append(f"static_cast<{arg_type}>(args[{i}])")
        else:
            base = arg_type.removeprefix("const ").strip()
            casts.append(f"*static_cast<{base}*>(args[{i}])")
    return (
        'extern "C" void openreg_kernel_entry(void** args) {\n'
        f"  kernel({', '.join(casts)});\n}}\n"
    )


class CompiledKernel:
    """One compiled kernel; calling it queues a run on the current stream."""

    def __init__(self, name: str, arg_types: list, library):
        self._library = library  # keeps the entry's code loaded
        entry = ctypes.cast(library.openreg_kernel_entry, ctypes.c_void_p).value
        self._launch = _C._CompiledKernel(entry, name, "".join(map(_argument_kind, arg_types)))

    def __call__(self, *args) -> None:
        self._launch(*args)


def build(async_compile, name: str, arg_types: list, source: str):
    """What generated code calls in place of ``async_compile.cpp_pybinding``:
    a CompiledKernel, or a future of one that ``async_compile.wait`` resolves
    when Inductor compiles in worker processes."""
    source = source + "\n" + _entry_source(arg_types)
    if get_compile_threads() <= 1:
        return CompiledKernel(name, arg_types, CppCodeCache.load(source))
    get_library = CppCodeCache.load_async(source, submit_fn=async_compile.submit)
    return LambdaFuture(lambda: CompiledKernel(name, arg_types, get_library()))
