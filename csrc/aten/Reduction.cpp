// Native reductions and softmax: sum, mean, max, amax, argmax, vector norm,
// (log_)softmax and their backward.
#include <ATen/ops/_log_softmax_backward_data_cpu_dispatch.h>
#include <ATen/ops/_log_softmax_backward_data_meta.h>
#include <ATen/ops/_log_softmax_cpu_dispatch.h>
#include <ATen/ops/_log_softmax_meta.h>
#include <ATen/ops/_softmax_backward_data_cpu_dispatch.h>
#include <ATen/ops/_softmax_backward_data_meta.h>
#include <ATen/ops/_softmax_cpu_dispatch.h>
#include <ATen/ops/_softmax_meta.h>
#include <ATen/ops/amax_cpu_dispatch.h>
#include <ATen/ops/amax_meta.h>
#include <ATen/ops/argmax_cpu_dispatch.h>
#include <ATen/ops/argmax_meta.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/linalg_vector_norm_cpu_dispatch.h>
#include <ATen/ops/linalg_vector_norm_meta.h>
#include <ATen/ops/max_cpu_dispatch.h>
#include <ATen/ops/max_meta.h>
#include <ATen/ops/mean_cpu_dispatch.h>
#include <ATen/ops/mean_meta.h>
#include <ATen/ops/sum_cpu_dispatch.h>
#include <ATen/ops/sum_meta.h>

#include "NativeKernels.h"
#include "Structured.h"

namespace openreg::kernels {

using at::Tensor;

Tensor sum_dim(const Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
               std::optional<at::ScalarType> dtype) {
  return structured<at::meta::structured_sum_dim_IntList>(
      "sum", [](Tensor& out, auto&... a) { at::cpu::sum_out(out, a...); }, self, dim, keepdim, dtype);
}

Tensor mean_dim(const Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                std::optional<at::ScalarType> dtype) {
  return structured<at::meta::structured_mean_dim>(
      "mean", [](Tensor& out, auto&... a) { at::cpu::mean_out(out, a...); }, self, dim, keepdim, dtype);
}

namespace {

// Checks the CPU kernel makes inside its dtype dispatch (e.g. complex input):
// run it on a one-element host tensor of the same dtype, so the error is the
// CPU's own and is raised on the host, not in a kernel.
template <class Fn>
void probeDtype(const Tensor& self, Fn cpu_fn) {
  if (!self.is_complex()) return;
  cpu_fn(at::zeros({1}, self.options().device(c10::kCPU)));
}

}  // namespace

Tensor max(const Tensor& self) {
  c10::Device device = opDevice("max", self);
  c10::DeviceGuard guard(device);
  // ReduceAllOps.cpp's check, made before any output exists.
  TORCH_CHECK(self.numel() > 0,
              "max(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
              "reduction dim with the 'dim' argument.");
  probeDtype(self, [](const Tensor& t) { at::cpu::max(t); });
  Tensor out = allocateOutput({}, {}, self.options());
  checkDispatch(
      std::array<Tensor, 1>{out},
      [](std::array<Tensor, 1>& o, const Tensor& s) { at::cpu::max_out(o[0], s); }, self);
  launchOnCurrentStream(
      out, [o = kernelView(out), s = kernelView(self)]() mutable { at::cpu::max_out(o, s); },
      {self}, {out});
  return out;
}

std::tuple<Tensor, Tensor> max_dim(const Tensor& self, int64_t dim, bool keepdim) {
  probeDtype(self, [&](const Tensor& t) { at::cpu::max(t, 0, keepdim); });
  auto out = structuredN<at::meta::structured_max_dim, 2>(
      "max", [](std::array<Tensor, 2>& o, auto&... a) { at::cpu::max_out(o[0], o[1], a...); },
      self, dim, keepdim);
  return {out[0], out[1]};
}

Tensor amax(const Tensor& self, at::IntArrayRef dim, bool keepdim) {
  probeDtype(self, [&](const Tensor& t) { at::cpu::amax(t, {}, keepdim); });
  return structured<at::meta::structured_amax>(
      "amax", [](Tensor& out, auto&... a) { at::cpu::amax_out(out, a...); }, self, dim, keepdim);
}

Tensor argmax(const Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  probeDtype(self, [&](const Tensor& t) { at::cpu::argmax(t, std::nullopt, keepdim); });
  return structured<at::meta::structured_argmax>(
      "argmax", [](Tensor& out, auto&... a) { at::cpu::argmax_out(out, a...); }, self, dim, keepdim);
}

Tensor linalg_vector_norm(const Tensor& self, const at::Scalar& ord, at::OptionalIntArrayRef dim,
                          bool keepdim, std::optional<at::ScalarType> dtype) {
  return structured<at::meta::structured_linalg_vector_norm>(
      "linalg_vector_norm",
      [](Tensor& out, auto&... a) { at::cpu::linalg_vector_norm_out(out, a...); }, self, ord, dim,
      keepdim, dtype);
}

// The CPU kernels' check, made at the call (in the kernel it would fail the stream).
void checkNoHalfToFloat(bool half_to_float) {
  TORCH_CHECK(!half_to_float, "softmax with half to float conversion is not supported on CPU");
}

Tensor softmax(const Tensor& self, int64_t dim, bool half_to_float) {
  checkNoHalfToFloat(half_to_float);
  return structured<at::meta::structured__softmax>(
      "_softmax", [](Tensor& out, auto&... a) { at::cpu::_softmax_out(out, a...); }, self, dim,
      half_to_float);
}

Tensor log_softmax(const Tensor& self, int64_t dim, bool half_to_float) {
  checkNoHalfToFloat(half_to_float);
  return structured<at::meta::structured__log_softmax>(
      "_log_softmax", [](Tensor& out, auto&... a) { at::cpu::_log_softmax_out(out, a...); }, self,
      dim, half_to_float);
}

Tensor softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim,
                        at::ScalarType input_dtype) {
  return structured<at::meta::structured__softmax_backward_data>(
      "_softmax_backward_data",
      [](Tensor& out, auto&... a) { at::cpu::_softmax_backward_data_out(out, a...); }, grad_output,
      output, dim, input_dtype);
}

Tensor log_softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim,
                            at::ScalarType input_dtype) {
  return structured<at::meta::structured__log_softmax_backward_data>(
      "_log_softmax_backward_data",
      [](Tensor& out, auto&... a) { at::cpu::_log_softmax_backward_data_out(out, a...); },
      grad_output, output, dim, input_dtype);
}

}  // namespace openreg::kernels
