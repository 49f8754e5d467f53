// The C++ Meta kernels (ATen's at::meta::<op>, ATen/MetaFunctions.h) of
// operators whose Meta key `import torch` hands to a Python kernel
// (torch/_meta_registrations.py), for the generic fallback's output
// inference (Fallback.cpp). A Python Meta kernel's first call imports sympy
// (about 0.3 s once per process), and a torch._refs reference wrapped in
// _disable_dynamo imports torch._dynamo too (about 1 s more): every rank of a
// job paid that at its first such operator (torch.randn on the device, a
// masked_fill, a sort). The C++ kernel is what ATen's Meta key ran before
// Python replaced it; for a structured operator it is the meta function its
// CPU kernel runs. Convolution, batch norm and group norm have none: their
// meta kernels here are openreg's own (MetaFunctions.cpp). Tests: tests/ops/test_native_kernels.py (nothing
// imported), tests/ops/test_opinfo.py (results).
#pragma once

#include <ATen/core/boxing/KernelFunction.h>
#include <ATen/core/operator_name.h>

namespace openreg::kernels {

// The operator's C++ Meta kernel, if it is listed (MetaFunctions.cpp), else null.
const c10::KernelFunction* cppMetaKernel(const c10::OperatorName& op);

}  // namespace openreg::kernels
