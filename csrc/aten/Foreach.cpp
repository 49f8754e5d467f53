// Native _foreach_* kernels for the optimizers (AdamW / Adam / SGD with
// foreach=True) and clip_grad_norm_. The CPU runs these as a loop over the
// per-tensor op (ATen's *_slow kernels); here the loop is split in two: on the
// host, the per-tensor op's structured meta checks each element and allocates
// its output (so errors are the CPU's, raised on the host), and ONE kernel
// runs the per-tensor CPU implementations for the whole list.
#include <algorithm>
#include <limits>

#include <ATen/ScalarOps.h>
#include <ATen/native/ForeachUtils.h>

#include <ATen/ops/linalg_vector_norm_cpu_dispatch.h>
#include <ATen/ops/linalg_vector_norm_meta.h>
#include <ATen/ops/sqrt_cpu_dispatch.h>
#include <ATen/ops/sqrt_meta.h>

#include "ArithmeticOps.h"
#include "NativeKernels.h"
#include "Structured.h"

namespace openreg::kernels {

using at::Scalar;
using at::Tensor;
using at::TensorList;

namespace {

// Element i of a foreach call is the per-tensor op `Meta` over argsAt(i) (a
// tuple, self's element first). Functional: fresh outputs; in place: each
// self element is its own output. compute(out, kernel args...) runs for every
// element inside one kernel per device, on that device's current stream (a
// list spread over devices is CUDA's slow path: each element on its own
// device's stream).
template <class Meta, class ArgsAt, class Compute>
std::vector<Tensor> foreachStructured(const char* name, OutputMode mode, size_t n, ArgsAt argsAt,
                                      Compute compute) {
  std::vector<Tensor> outputs(n);
  std::vector<c10::Device> devices;  // of the elements, in order of first appearance
  std::vector<size_t> deviceOf(n);
  for (size_t i = 0; i < n; ++i) {
    c10::Device d = std::apply([&](const auto&... a) { return opDevice(name, a...); }, argsAt(i));
    auto it = std::find(devices.begin(), devices.end(), d);
    deviceOf[i] = static_cast<size_t>(it - devices.begin());
    if (it == devices.end()) devices.push_back(d);
  }
  auto bodyAt = [&](size_t i, std::vector<Tensor>& reads) {
    auto args = argsAt(i);
    if (mode == OutputMode::kInplace) outputs[i] = std::get<0>(args);
    return std::apply(
        [&](const auto&... a) { return structuredBody<Meta>(mode, compute, outputs[i], reads, a...); },
        args);
  };
  for (size_t k = 0; k < devices.size(); ++k) {
    c10::DeviceGuard guard(devices[k]);
    // Every element's body has the same type: one vector, no allocation per element.
    std::vector<decltype(bodyAt(0, std::declval<std::vector<Tensor>&>()))> bodies;
    bodies.reserve(n);
    std::vector<Tensor> reads, writes;
    for (size_t i = 0; i < n; ++i) {
      if (deviceOf[i] != k) continue;
      bodies.push_back(bodyAt(i, reads));
      writes.push_back(outputs[i]);
    }
    launchOnCurrentStream(
        writes[0],
        [bodies = std::move(bodies)]() mutable {
          for (auto& body : bodies) body();
        },
        reads, writes);
  }
  return outputs;
}

template <class Meta, class ArgsAt, class Compute>
void foreachInplace(const char* name, TensorList self, ArgsAt argsAt, Compute compute) {
  foreachStructured<Meta>(name, OutputMode::kInplace, self.size(), argsAt, compute);
}

template <class Meta, class ArgsAt, class Compute>
std::vector<Tensor> foreachFunctional(const char* name, TensorList self, ArgsAt argsAt,
                                      Compute compute) {
  return foreachStructured<Meta>(name, OutputMode::kFunctional, self.size(), argsAt, compute);
}

OPENREG_CPU_OUT(sqrt)
OPENREG_CPU_OUT(linalg_vector_norm)

// Tensor::add_(Scalar) and friends wrap the scalar into a 0-dim CPU tensor
// (wrapped number: it does not take part in type promotion as a tensor).
Tensor wrap(const Scalar& s) { return at::native::wrapped_scalar_tensor(s); }

// The *_slow kernels' check for the .Tensor overloads.
void checkScalarTensor(const Tensor& scalar) {
  TORCH_CHECK(scalar.dim() == 0 && scalar.numel() == 1,
              "scalar tensor expected to be 0 dim but it has ", scalar.dim(), " dimensions and ",
              scalar.numel(), " elements.");
}

}  // namespace

void foreach_add_scalar_(TensorList self, const Scalar& scalar) {
  at::native::check_foreach_api_restrictions(self);
  Tensor w = wrap(scalar);
  Scalar one(1);
  foreachInplace<AddMeta>("_foreach_add_", self, [&](size_t i) { return std::make_tuple(self[i], w, one); },
                          add_cpu);
}

std::vector<Tensor> foreach_add_scalar(TensorList self, const Scalar& scalar) {
  at::native::check_foreach_api_restrictions(self);
  Tensor w = wrap(scalar);
  Scalar one(1);
  return foreachFunctional<AddMeta>(
      "_foreach_add", self, [&](size_t i) { return std::make_tuple(self[i], w, one); }, add_cpu);
}

void foreach_add_list_(TensorList self, TensorList other, const Scalar& alpha) {
  at::native::check_foreach_api_restrictions(self, other);
  foreachInplace<AddMeta>(
      "_foreach_add_", self, [&](size_t i) { return std::make_tuple(self[i], other[i], alpha); }, add_cpu);
}

std::vector<Tensor> foreach_add_list(TensorList self, TensorList other, const Scalar& alpha) {
  at::native::check_foreach_api_restrictions(self, other);
  return foreachFunctional<AddMeta>(
      "_foreach_add", self, [&](size_t i) { return std::make_tuple(self[i], other[i], alpha); }, add_cpu);
}

void foreach_add_tensor_(TensorList self, const Tensor& other, const Scalar& alpha) {
  checkScalarTensor(other);
  at::native::check_foreach_api_restrictions(self);
  foreachInplace<AddMeta>(
      "_foreach_add_", self, [&](size_t i) { return std::make_tuple(self[i], other, alpha); }, add_cpu);
}

void foreach_mul_scalar_(TensorList self, const Scalar& scalar) {
  at::native::check_foreach_api_restrictions(self);
  Tensor w = wrap(scalar);
  foreachInplace<MulMeta>("_foreach_mul_", self, [&](size_t i) { return std::make_tuple(self[i], w); },
                          mul_cpu);
}

std::vector<Tensor> foreach_mul_scalar(TensorList self, const Scalar& scalar) {
  at::native::check_foreach_api_restrictions(self);
  Tensor w = wrap(scalar);
  return foreachFunctional<MulMeta>(
      "_foreach_mul", self, [&](size_t i) { return std::make_tuple(self[i], w); }, mul_cpu);
}

void foreach_mul_list_(TensorList self, TensorList other) {
  at::native::check_foreach_api_restrictions(self, other);
  foreachInplace<MulMeta>("_foreach_mul_", self,
                          [&](size_t i) { return std::make_tuple(self[i], other[i]); }, mul_cpu);
}

void foreach_mul_tensor_(TensorList self, const Tensor& other) {
  checkScalarTensor(other);
  at::native::check_foreach_api_restrictions(self);
  foreachInplace<MulMeta>("_foreach_mul_", self, [&](size_t i) { return std::make_tuple(self[i], other); },
                          mul_cpu);
}

void foreach_div_scalar_(TensorList self, const Scalar& scalar) {
  at::native::check_foreach_api_restrictions(self);
  Tensor w = wrap(scalar);
  foreachInplace<DivMeta>("_foreach_div_", self, [&](size_t i) { return std::make_tuple(self[i], w); },
                          div_cpu);
}

void foreach_div_scalarlist_(TensorList self, at::ArrayRef<Scalar> scalars) {
  at::native::check_foreach_api_restrictions(self, scalars);
  std::vector<Tensor> wrapped;
  for (const Scalar& s : scalars) wrapped.push_back(wrap(s));
  foreachInplace<DivMeta>("_foreach_div_", self,
                          [&](size_t i) { return std::make_tuple(self[i], wrapped[i]); }, div_cpu);
}

void foreach_lerp_scalar_(TensorList self, TensorList end, const Scalar& weight) {
  at::native::check_foreach_api_restrictions(self, end);
  foreachInplace<at::meta::structured_lerp_Scalar>(
      "_foreach_lerp_", self, [&](size_t i) { return std::make_tuple(self[i], end[i], weight); },
      lerp_cpu);
}

void foreach_addcmul_scalar_(TensorList self, TensorList t1, TensorList t2, const Scalar& value) {
  at::native::check_foreach_api_restrictions(self, t1, t2);
  foreachInplace<at::meta::structured_addcmul>(
      "_foreach_addcmul_", self,
      [&](size_t i) { return std::make_tuple(self[i], t1[i], t2[i], value); }, addcmul_cpu);
}

void foreach_addcdiv_scalar_(TensorList self, TensorList t1, TensorList t2, const Scalar& value) {
  at::native::check_foreach_api_restrictions(self, t1, t2);
  foreachInplace<at::meta::structured_addcdiv>(
      "_foreach_addcdiv_", self,
      [&](size_t i) { return std::make_tuple(self[i], t1[i], t2[i], value); }, addcdiv_cpu);
}

void foreach_addcdiv_scalarlist_(TensorList self, TensorList t1, TensorList t2,
                                 at::ArrayRef<Scalar> scalars) {
  at::native::check_foreach_api_restrictions(self, t1, t2, scalars);
  foreachInplace<at::meta::structured_addcdiv>(
      "_foreach_addcdiv_", self,
      [&](size_t i) { return std::make_tuple(self[i], t1[i], t2[i], scalars[i]); }, addcdiv_cpu);
}

void foreach_sqrt_(TensorList self) {
  at::native::check_foreach_api_restrictions(self);
  foreachInplace<at::meta::structured_sqrt>(
      "_foreach_sqrt_", self, [&](size_t i) { return std::make_tuple(self[i]); }, sqrt_cpu);
}

std::vector<Tensor> foreach_sqrt(TensorList self) {
  at::native::check_foreach_api_restrictions(self);
  return foreachFunctional<at::meta::structured_sqrt>(
      "_foreach_sqrt", self, [&](size_t i) { return std::make_tuple(self[i]); }, sqrt_cpu);
}

// foreach_tensor_norm_slow: linalg_vector_norm(t, ord, {}, false, dtype) per tensor.
std::vector<Tensor> foreach_norm(TensorList self, const Scalar& ord, std::optional<at::ScalarType> dtype) {
  at::native::check_foreach_api_restrictions(self);
  // The CPU's own check, made before any per-tensor norm (whose message differs).
  if (ord.isFloatingPoint() && ord.toDouble() == std::numeric_limits<double>::infinity())
    for (const Tensor& t : self)
      TORCH_CHECK(t.numel() > 0, "_foreach_norm cannot compute the infinity norm on an empty "
                  "tensor because the operation does not have an identity");
  at::OptionalIntArrayRef all_dims;
  return foreachFunctional<at::meta::structured_linalg_vector_norm>(
      "_foreach_norm", self,
      [&](size_t i) { return std::make_tuple(self[i], ord, all_dims, false, dtype); },
      linalg_vector_norm_cpu);
}

}  // namespace openreg::kernels
