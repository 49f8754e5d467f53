// Native pointwise kernels (arithmetic, activations and their backward):
// structured meta on the host, at::cpu::*_out on the stream (see Structured.h).
#include <ATen/ops/add_cpu_dispatch.h>
#include <ATen/ops/add_meta.h>
#include <ATen/ops/clamp_min_cpu_dispatch.h>
#include <ATen/ops/clamp_min_meta.h>
#include <ATen/ops/div_cpu_dispatch.h>
#include <ATen/ops/div_meta.h>
#include <ATen/ops/exp_cpu_dispatch.h>
#include <ATen/ops/exp_meta.h>
#include <ATen/ops/gelu_backward_cpu_dispatch.h>
#include <ATen/ops/gelu_backward_meta.h>
#include <ATen/ops/gelu_cpu_dispatch.h>
#include <ATen/ops/gelu_meta.h>
#include <ATen/ops/mul_cpu_dispatch.h>
#include <ATen/ops/mul_meta.h>
#include <ATen/ops/neg_cpu_dispatch.h>
#include <ATen/ops/neg_meta.h>
#include <ATen/ops/pow_cpu_dispatch.h>
#include <ATen/ops/pow_meta.h>
#include <ATen/ops/rsqrt_cpu_dispatch.h>
#include <ATen/ops/rsqrt_meta.h>
#include <ATen/ops/sigmoid_backward_cpu_dispatch.h>
#include <ATen/ops/sigmoid_backward_meta.h>
#include <ATen/ops/sigmoid_cpu_dispatch.h>
#include <ATen/ops/sigmoid_meta.h>
#include <ATen/ops/silu_backward_cpu_dispatch.h>
#include <ATen/ops/silu_backward_meta.h>
#include <ATen/ops/silu_cpu_dispatch.h>
#include <ATen/ops/silu_meta.h>
#include <ATen/ops/sqrt_cpu_dispatch.h>
#include <ATen/ops/sqrt_meta.h>
#include <ATen/ops/sub_cpu_dispatch.h>
#include <ATen/ops/sub_meta.h>
#include <ATen/ops/tanh_backward_cpu_dispatch.h>
#include <ATen/ops/tanh_backward_meta.h>
#include <ATen/ops/tanh_cpu_dispatch.h>
#include <ATen/ops/tanh_meta.h>
#include <ATen/ops/threshold_backward_cpu_dispatch.h>
#include <ATen/ops/threshold_backward_meta.h>

#include "Kernels.h"
#include "NativeKernels.h"
#include "Structured.h"

namespace openreg::kernels {

using at::Scalar;
using at::Tensor;

// Binary arithmetic: functional and in-place.
#define OPENREG_BINARY_ALPHA(op, STRUCT)                                                      \
  Tensor op(const Tensor& self, const Tensor& other, const Scalar& alpha) {                \
    return structured<at::meta::STRUCT>(                                                      \
        #op, [](Tensor& out, auto&... a) { at::cpu::op##_out(out, a...); }, self, other, alpha); \
  }                                                                                         \
  Tensor& op##_(Tensor& self, const Tensor& other, const Scalar& alpha) {                   \
    return structuredInplace<at::meta::STRUCT>(                                               \
        #op "_", [](Tensor& out, auto&... a) { at::cpu::op##_out(out, a...); }, self, other, alpha); \
  }
OPENREG_BINARY_ALPHA(add, structured_add_Tensor)
OPENREG_BINARY_ALPHA(sub, structured_sub_Tensor)
#undef OPENREG_BINARY_ALPHA

#define OPENREG_BINARY(op, STRUCT)                                                             \
  Tensor op(const Tensor& self, const Tensor& other) {                                      \
    return structured<at::meta::STRUCT>(                                                       \
        #op, [](Tensor& out, auto&... a) { at::cpu::op##_out(out, a...); }, self, other);     \
  }                                                                                          \
  Tensor& op##_(Tensor& self, const Tensor& other) {                                         \
    return structuredInplace<at::meta::STRUCT>(                                                \
        #op "_", [](Tensor& out, auto&... a) { at::cpu::op##_out(out, a...); }, self, other); \
  }
OPENREG_BINARY(mul, structured_mul_Tensor)
OPENREG_BINARY(div, structured_div_Tensor)
#undef OPENREG_BINARY

#define OPENREG_UNARY(op)                                                                 \
  Tensor op(const Tensor& self) {                                                         \
    return structured<at::meta::structured_##op>(                                         \
        #op, [](Tensor& out, auto&... a) { at::cpu::op##_out(out, a...); }, self);         \
  }
OPENREG_UNARY(exp)
OPENREG_UNARY(neg)
OPENREG_UNARY(rsqrt)
OPENREG_UNARY(sqrt)
OPENREG_UNARY(sigmoid)
OPENREG_UNARY(tanh)
OPENREG_UNARY(silu)
#undef OPENREG_UNARY

#define OPENREG_GRAD(op)                                                                    \
  Tensor op(const Tensor& grad_output, const Tensor& x) {                                   \
    return structured<at::meta::structured_##op>(                                           \
        #op, [](Tensor& out, auto&... a) { at::cpu::op##_out(out, a...); }, grad_output, x); \
  }
OPENREG_GRAD(sigmoid_backward)
OPENREG_GRAD(tanh_backward)
OPENREG_GRAD(silu_backward)
#undef OPENREG_GRAD

Tensor gelu(const Tensor& self, c10::string_view approximate) {
  return structured<at::meta::structured_gelu>(
      "gelu", [](Tensor& out, auto&... a) { at::cpu::gelu_out(out, a...); }, self, approximate);
}

Tensor gelu_backward(const Tensor& grad_output, const Tensor& self, c10::string_view approximate) {
  return structured<at::meta::structured_gelu_backward>(
      "gelu_backward", [](Tensor& out, auto&... a) { at::cpu::gelu_backward_out(out, a...); },
      grad_output, self, approximate);
}

Tensor threshold_backward(const Tensor& grad_output, const Tensor& self, const Scalar& threshold) {
  return structured<at::meta::structured_threshold_backward>(
      "threshold_backward",
      [](Tensor& out, auto&... a) { at::cpu::threshold_backward_out(out, a...); }, grad_output,
      self, threshold);
}

Tensor pow_tensor_scalar(const Tensor& self, const Scalar& exponent) {
  return structured<at::meta::structured_pow_Tensor_Scalar>(
      "pow", [](Tensor& out, auto&... a) { at::cpu::pow_out(out, a...); }, self, exponent);
}

// relu is clamp_min(x, 0) on the CPU too.
Tensor relu(const Tensor& self) {
  TORCH_CHECK(self.scalar_type() != at::kBool, "Boolean inputs not supported for relu");
  return structured<at::meta::structured_clamp_min>(
      "relu", [](Tensor& out, auto&... a) { at::cpu::clamp_min_out(out, a...); }, self, Scalar(0));
}

Tensor& relu_(Tensor& self) {
  TORCH_CHECK(self.scalar_type() != at::kBool, "Boolean inputs not supported for relu");
  return structuredInplace<at::meta::structured_clamp_min>(
      "relu_", [](Tensor& out, auto&... a) { at::cpu::clamp_min_out(out, a...); }, self, Scalar(0));
}

Tensor& zero_(Tensor& self) { return fill_scalar_(self, 0); }

}  // namespace openreg::kernels
