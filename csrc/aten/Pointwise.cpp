// Native pointwise kernels (arithmetic, activations and their backward):
// structured meta on the host, at::cpu::*_out on the stream (see Structured.h).
#include <ATen/core/Tensor.h>
#include <ATen/ops/clamp_cpu_dispatch.h>
#include <ATen/ops/clamp_meta.h>
#include <ATen/ops/clamp_min_cpu_dispatch.h>
#include <ATen/ops/clamp_min_meta.h>
#include <ATen/ops/cos_cpu_dispatch.h>
#include <ATen/ops/cos_meta.h>
#include <ATen/ops/sin_cpu_dispatch.h>
#include <ATen/ops/sin_meta.h>
#include <ATen/ops/log_cpu_dispatch.h>
#include <ATen/ops/log_meta.h>
#include <ATen/ops/erf_cpu_dispatch.h>
#include <ATen/ops/erf_meta.h>
#include <ATen/ops/exp_cpu_dispatch.h>
#include <ATen/ops/exp_meta.h>
#include <ATen/ops/gelu_backward_cpu_dispatch.h>
#include <ATen/ops/gelu_backward_meta.h>
#include <ATen/ops/gelu_cpu_dispatch.h>
#include <ATen/ops/gelu_meta.h>
#include <ATen/ops/neg_cpu_dispatch.h>
#include <ATen/ops/neg_meta.h>
#include <ATen/ops/pow_cpu_dispatch.h>
#include <ATen/ops/pow_meta.h>
#include <ATen/ops/reciprocal_cpu_dispatch.h>
#include <ATen/ops/reciprocal_meta.h>
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
#include <ATen/ops/tanh_backward_cpu_dispatch.h>
#include <ATen/ops/tanh_backward_meta.h>
#include <ATen/ops/tanh_cpu_dispatch.h>
#include <ATen/ops/tanh_meta.h>
#include <ATen/ops/threshold_backward_cpu_dispatch.h>
#include <ATen/ops/threshold_backward_meta.h>

#include <ATen/native/Activation.h>

#include "ArithmeticOps.h"
#include "Kernels.h"
#include "NativeKernels.h"
#include "Structured.h"

namespace openreg::kernels {

using at::Scalar;
using at::Tensor;


// Binary arithmetic: functional, in-place and out= (optimizers' foreach
// fallbacks call the out= forms).
Tensor add(const Tensor& self, const Tensor& other, const Scalar& alpha) {
  return structured<AddMeta>("add", add_cpu, self, other, alpha);
}
Tensor& add_(Tensor& self, const Tensor& other, const Scalar& alpha) {
  return structuredInplace<AddMeta>("add_", add_cpu, self, other, alpha);
}
Tensor& add_out(const Tensor& self, const Tensor& other, const Scalar& alpha, Tensor& out) {
  return structuredOut<AddMeta>("add.out", add_cpu, out, self, other, alpha);
}
Tensor sub(const Tensor& self, const Tensor& other, const Scalar& alpha) {
  return structured<SubMeta>("sub", sub_cpu, self, other, alpha);
}
Tensor& sub_(Tensor& self, const Tensor& other, const Scalar& alpha) {
  return structuredInplace<SubMeta>("sub_", sub_cpu, self, other, alpha);
}
Tensor& sub_out(const Tensor& self, const Tensor& other, const Scalar& alpha, Tensor& out) {
  return structuredOut<SubMeta>("sub.out", sub_cpu, out, self, other, alpha);
}
Tensor mul(const Tensor& self, const Tensor& other) {
  return structured<MulMeta>("mul", mul_cpu, self, other);
}
Tensor& mul_(Tensor& self, const Tensor& other) {
  return structuredInplace<MulMeta>("mul_", mul_cpu, self, other);
}
Tensor& mul_out(const Tensor& self, const Tensor& other, Tensor& out) {
  return structuredOut<MulMeta>("mul.out", mul_cpu, out, self, other);
}
Tensor div(const Tensor& self, const Tensor& other) {
  return structured<DivMeta>("div", div_cpu, self, other);
}
Tensor& div_(Tensor& self, const Tensor& other) {
  return structuredInplace<DivMeta>("div_", div_cpu, self, other);
}
Tensor& div_out(const Tensor& self, const Tensor& other, Tensor& out) {
  return structuredOut<DivMeta>("div.out", div_cpu, out, self, other);
}

// Optimizer arithmetic (Adam/AdamW): lerp, addcmul, addcdiv.
Tensor lerp(const Tensor& self, const Tensor& end, const Scalar& weight) {
  return structured<LerpMeta>("lerp", lerp_cpu, self, end, weight);
}
Tensor& lerp_(Tensor& self, const Tensor& end, const Scalar& weight) {
  return structuredInplace<LerpMeta>("lerp_", lerp_cpu, self, end, weight);
}
Tensor& lerp_out(const Tensor& self, const Tensor& end, const Scalar& weight, Tensor& out) {
  return structuredOut<LerpMeta>("lerp.out", lerp_cpu, out, self, end, weight);
}
Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, const Scalar& value) {
  return structured<AddcmulMeta>("addcmul", addcmul_cpu, self, t1, t2, value);
}
Tensor& addcmul_(Tensor& self, const Tensor& t1, const Tensor& t2, const Scalar& value) {
  return structuredInplace<AddcmulMeta>("addcmul_", addcmul_cpu, self, t1, t2, value);
}
Tensor& addcmul_out(const Tensor& self, const Tensor& t1, const Tensor& t2, const Scalar& value,
                    Tensor& out) {
  return structuredOut<AddcmulMeta>("addcmul.out", addcmul_cpu, out, self, t1, t2, value);
}
Tensor addcdiv(const Tensor& self, const Tensor& t1, const Tensor& t2, const Scalar& value) {
  return structured<AddcdivMeta>("addcdiv", addcdiv_cpu, self, t1, t2, value);
}
Tensor& addcdiv_(Tensor& self, const Tensor& t1, const Tensor& t2, const Scalar& value) {
  return structuredInplace<AddcdivMeta>("addcdiv_", addcdiv_cpu, self, t1, t2, value);
}
Tensor& addcdiv_out(const Tensor& self, const Tensor& t1, const Tensor& t2, const Scalar& value,
                    Tensor& out) {
  return structuredOut<AddcdivMeta>("addcdiv.out", addcdiv_cpu, out, self, t1, t2, value);
}

#define OPENREG_UNARY(op)                                                                 \
  Tensor op(const Tensor& self) {                                                         \
    return structured<at::meta::structured_##op>(                                         \
        #op, [](Tensor& out, auto&... a) { at::cpu::op##_out(out, a...); }, self);         \
  }
OPENREG_UNARY(exp)
OPENREG_UNARY(neg)
OPENREG_UNARY(reciprocal)
OPENREG_UNARY(rsqrt)
OPENREG_UNARY(sqrt)
OPENREG_UNARY(sigmoid)
OPENREG_UNARY(tanh)
OPENREG_UNARY(silu)
// Python Meta references on Meta (their first call imports torch._dynamo):
// rotary embeddings' cos/sin, losses' log.
OPENREG_UNARY(cos)
OPENREG_UNARY(sin)
OPENREG_UNARY(log)
OPENREG_UNARY(erf)
#undef OPENREG_UNARY

// clamp's meta takes OptionalScalarRef (a pointer); the queued kernel keeps
// its own std::optional<Scalar> copies (clip_grad_norm_'s coefficient).
struct ClampMeta : at::meta::structured_clamp {
  void meta(const Tensor& self, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi) {
    structured_clamp::meta(self, lo ? at::OptionalScalarRef(&*lo) : at::OptionalScalarRef(),
                           hi ? at::OptionalScalarRef(&*hi) : at::OptionalScalarRef());
  }
};
Tensor clamp(const Tensor& self, const std::optional<Scalar>& min,
             const std::optional<Scalar>& max) {
  return structured<ClampMeta>(
      "clamp", [](Tensor& out, auto&... a) { at::cpu::clamp_out(out, a...); }, self, min, max);
}

#define OPENREG_GRAD(op)                                                                    \
  Tensor op(const Tensor& grad_output, const Tensor& x) {                                   \
    return structured<at::meta::structured_##op>(                                           \
        #op, [](Tensor& out, auto&... a) { at::cpu::op##_out(out, a...); }, grad_output, x); \
  }
OPENREG_GRAD(sigmoid_backward)
OPENREG_GRAD(tanh_backward)
OPENREG_GRAD(silu_backward)
#undef OPENREG_GRAD

// Checks the CPU kernels make in their bodies run here, on the host: inside a
// kernel they would be asynchronous errors that leave the stream failed.
Tensor gelu(const Tensor& self, c10::string_view approximate) {
  at::native::get_gelutype_enum(approximate);
  return structured<at::meta::structured_gelu>(
      "gelu", [](Tensor& out, auto&... a) { at::cpu::gelu_out(out, a...); }, self, approximate);
}

Tensor gelu_backward(const Tensor& grad_output, const Tensor& self, c10::string_view approximate) {
  at::native::get_gelutype_enum(approximate);
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
  TORCH_CHECK(!(at::isIntegralType(self.scalar_type(), true) && exponent.isIntegral(true) &&
                exponent.toLong() < 0),
              "Integers to negative integer powers are not allowed.");
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
