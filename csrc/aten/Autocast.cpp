// PyTorch hook: automatic mixed precision for openreg (dispatch key
// AutocastPrivateUse1), with CUDA's cast policy. The op lists are PyTorch's
// own (ATen/autocast_mode.h), the same macros CUDA's registration expands, so
// `torch.autocast("openreg", ...)` casts exactly what `torch.autocast("cuda")`
// casts. The Python side (openreg/amp.py) reports the supported dtypes.
// Tests: tests/ops/test_amp.py.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace openreg::kernels {
namespace {

using at::Tensor;

// CUDA bans binary_cross_entropy under autocast (unsafe in half precision);
// openreg follows with CUDA's message.
Tensor binary_cross_entropy_banned(const Tensor&, const Tensor&, const std::optional<Tensor>&,
                                   int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
              "autocast.\nMany models use a sigmoid layer right before the binary cross entropy "
              "layer.\nIn this case, combine the two layers using "
              "torch.nn.functional.binary_cross_entropy_with_logits\nor torch.nn.BCEWithLogitsLoss."
              "  binary_cross_entropy_with_logits and BCEWithLogits are\nsafe to autocast.");
}

}  // namespace

// Ops without an autocast rule run unchanged.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  using at::IntArrayRef;
  using at::Scalar;
  using at::ScalarType;
  // lower_precision_fp: run in the autocast dtype (matmuls, convolutions, ...)
#define OPENREG_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(OPENREG_LOWER_PRECISION_FP)
  KERNEL_PRIVATEUSEONE(cudnn_convolution, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(cudnn_convolution_transpose, lower_precision_fp)
#undef OPENREG_LOWER_PRECISION_FP

  // fp32: numerically sensitive ops (pow, softmax-like losses, norms, ...)
#define OPENREG_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(OPENREG_FP32)
#undef OPENREG_FP32

  // fp32_set_opt_dtype: reductions that take an optional dtype get float32.
#define OPENREG_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(OPENREG_FP32_SET_OPT_DTYPE)
#undef OPENREG_FP32_SET_OPT_DTYPE

  // fp32_append_dtype: norm overloads redispatched with an explicit dtype.
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)

  // promote: mixed-dtype inputs run in the widest input dtype.
#define OPENREG_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(OPENREG_PROMOTE)
#undef OPENREG_PROMOTE

  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"),
         TORCH_FN((&binary_cross_entropy_banned)));
}

}  // namespace openreg::kernels
