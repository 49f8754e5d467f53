// PyTorch hook: operators sent to the generic fallback (Fallback.cpp) although
// PyTorch has a CompositeExplicitAutograd kernel that PrivateUse1 would pick
// over a backend fallback, and operators that need a check or fix-up around
// the fallback (FallbackChecks.cpp). Every route is registered from the block
// below; the checked operators' names are FallbackChecks.cpp's table
// (checkedOperators), which registerCheckedFallbacks walks.
//
// Why each group is routed (tests: tests/ops/test_opinfo.py):
//  - (_)convolution, convolution_backward: the composite kernels end in
//    convolution_overrideable, which throws for backends other than CPU/CUDA.
//    The forward ones first check stride / padding / dilation on the host
//    (convolutionFallback), which their Meta kernel leaves to the CPU kernel.
//  - index.Tensor: masks become positions first (indexFallback), as CUDA's
//    index does, so only nonzero waits for the device.
//  - addr, native_group_norm, linalg__powsum: the composite kernels are math
//    decompositions that round differently from the CPU kernels; openreg
//    promises CPU-exact numbers. (native_layer_norm has a native kernel, Nn.cpp.)
//    native_group_norm also has checks (registerCheckedFallbacks, FallbackChecks.cpp).
//  - mode.values (out=): the composite kernel accepts only CPU, CUDA and XPU
//    tensors.
//  - conj_physical_: the composite kernel calls the CPU's DispatchStub
//    directly, which has no openreg entry (an internal assert on complex input).
//  - _amp_update_scale_: its CPU kernel checks the state tensors' dtypes and
//    sizes, which the fallback would only meet on the stream.
//  - _native_multi_head_attention: without need_weights, the CPU kernel returns
//    undefined weights (None), the fallback an empty tensor.
//  - the operators of FallbackChecks.cpp's table (registerCheckedFallbacks:
//    _index_put_impl_, masked_fill_, normal with a std tensor, the fused
//    optimizers, ...): their Meta kernels leave argument checks to the CPU
//    kernel, where they would fail the stream instead of raising at the call,
//    as CUDA does; or (native_group_norm with float32 parameters for a
//    reduced-precision input) give some results other dtypes than the CPU's.
//  - mse_loss, smooth_l1_loss: the composite kernel calls the .out op with the
//    reduced 0-dim output, and the CPU .out kernel first sizes it elementwise,
//    warning about resizing a non-empty out= on every call.
#include <torch/library.h>

#include "Kernels.h"

namespace openreg::kernels {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  const auto route = [] { return torch::CppFunction::makeFromBoxedFunction<&fallback>(); };
  for (const char* name : {"convolution", "_convolution", "_convolution.deprecated"})
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&convolutionFallback>());
  m.impl("_amp_update_scale_", torch::CppFunction::makeFromBoxedFunction<&ampUpdateScaleFallback>());
  m.impl("index.Tensor", torch::CppFunction::makeFromBoxedFunction<&indexFallback>());
  m.impl("_native_multi_head_attention",
         torch::CppFunction::makeFromBoxedFunction<&multiHeadAttentionFallback>());
  registerCheckedFallbacks(m);
  for (const char* name : {"convolution_backward", "addr", "addr.out", "linalg__powsum",
                           "mode.values", "mse_loss", "smooth_l1_loss", "conj_physical_"})
    m.impl(name, route());
}

}  // namespace openreg::kernels
