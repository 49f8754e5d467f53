// Inductor's C++ kernels on openreg streams (openreg/_inductor): the launch
// binding, openreg._C._CompiledKernel (CompiledKernels.cpp).
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace openreg {

void bindCompiledKernels(py::module& m);

}  // namespace openreg
