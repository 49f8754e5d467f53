// What the generic fallback (Fallback.cpp) cannot know for a few operators,
// added around it: argument checks that their Meta kernels leave to the CPU
// kernel (where they would fail the stream instead of raising at the call),
// and outputs the CPU kernel leaves undefined. RegisterFallbackRoutes.cpp
// routes the operators here. Tests: tests/ops/test_error_inputs.py,
// tests/ops/test_fallback_checks.py.
#include <ATen/core/dispatch/Dispatcher.h>

#include "Kernels.h"

namespace openreg::kernels {
namespace {

using c10::IValue;

const IValue* argumentsOf(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  return stack->data() + stack->size() - op.schema().arguments().size();
}

// convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, ...)
void checkConvolutionArguments(const IValue* args) {
  auto any = [](const IValue& v, auto bad) {
    if (!v.isIntList()) return false;
    for (int64_t x : v.toIntVector())
      if (bad(x)) return true;
    return false;
  };
  TORCH_CHECK(!any(args[4], [](int64_t x) { return x < 0; }), "negative padding is not supported");
  TORCH_CHECK(!any(args[7], [](int64_t x) { return x < 0; }),
              "negative output_padding is not supported");
  TORCH_CHECK(!any(args[3], [](int64_t x) { return x <= 0; }), "non-positive stride is not supported");
  TORCH_CHECK(!any(args[5], [](int64_t x) { return x < 0; }), "dilation should be greater than zero");
  TORCH_CHECK(!any(args[5], [](int64_t x) { return x == 0; }),
              "dilation should be greater than zero, but got ", args[5].toDimVector());
}

// _amp_update_scale_(self, growth_tracker, found_inf, ...): the CPU and CUDA
// kernels check on the host, in these words (GradScaler's state tensors).
void checkAmpUpdateScaleArguments(const IValue* args) {
  const at::Tensor& scale = args[0].toTensor();
  const at::Tensor& tracker = args[1].toTensor();
  const at::Tensor& found_inf = args[2].toTensor();
  TORCH_CHECK(tracker.numel() == 1, "growth_tracker must be a 1-element tensor.");
  TORCH_CHECK(scale.numel() == 1, "current_scale must be a 1-element tensor.");
  TORCH_CHECK(found_inf.numel() == 1, "found_inf must be a 1-element tensor.");
  TORCH_CHECK(tracker.scalar_type() == at::kInt, "growth_tracker must be an int tensor.");
  TORCH_CHECK(scale.scalar_type() == at::kFloat, "current_scale must be a float tensor.");
  TORCH_CHECK(found_inf.scalar_type() == at::kFloat, "found_inf must be a float tensor.");
}

}  // namespace

void convolutionFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  checkConvolutionArguments(argumentsOf(op, stack));
  fallback(op, stack);
}

void ampUpdateScaleFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  checkAmpUpdateScaleArguments(argumentsOf(op, stack));
  fallback(op, stack);
}

// _native_multi_head_attention(..., need_weights, ...) -> (out, weights): the
// CPU kernel returns undefined weights (None in Python) when they are not
// needed; the fallback's outputs, sized by the Meta kernel, hold an empty tensor.
void multiHeadAttentionFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  static const size_t kNeedWeights = *op.schema().argumentIndexWithName("need_weights");
  const bool need_weights = argumentsOf(op, stack)[kNeedWeights].toBool();
  fallback(op, stack);
  if (!need_weights) stack->back() = at::Tensor();
}

}  // namespace openreg::kernels
