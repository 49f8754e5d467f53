// Native reductions and softmax: sum, mean, (log_)softmax and their backward.
#include <ATen/ops/_log_softmax_backward_data_cpu_dispatch.h>
#include <ATen/ops/_log_softmax_backward_data_meta.h>
#include <ATen/ops/_log_softmax_cpu_dispatch.h>
#include <ATen/ops/_log_softmax_meta.h>
#include <ATen/ops/_softmax_backward_data_cpu_dispatch.h>
#include <ATen/ops/_softmax_backward_data_meta.h>
#include <ATen/ops/_softmax_cpu_dispatch.h>
#include <ATen/ops/_softmax_meta.h>
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

Tensor softmax(const Tensor& self, int64_t dim, bool half_to_float) {
  return structured<at::meta::structured__softmax>(
      "_softmax", [](Tensor& out, auto&... a) { at::cpu::_softmax_out(out, a...); }, self, dim,
      half_to_float);
}

Tensor log_softmax(const Tensor& self, int64_t dim, bool half_to_float) {
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
