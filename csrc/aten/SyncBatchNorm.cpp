// PyTorch hook: TORCH_LIBRARY_IMPL(aten, PrivateUse1) for the ops below.
// Native kernels for the operators behind nn.SyncBatchNorm (CUDA has kernels
// for them and the CPU none, so the generic fallback cannot run them):
// batch_norm_stats, batch_norm_gather_stats(_with_counts), batch_norm_elemt,
// batch_norm_backward_reduce, batch_norm_backward_elemt. Each is composed of
// openreg operators (so it queues asynchronously on the current stream, like
// any op), in CUDA's formulas: statistics over every dimension but the
// channel one (dim 1), accumulated in float32 for half and bfloat16 inputs.
// Tests: tests/ops/test_sync_batch_norm.py, tests/distributed/test_ddp.py.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <tuple>
#include <vector>

namespace openreg::kernels {
namespace {

using at::Tensor;

at::ScalarType accumulateType(const Tensor& t) {
  return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16 ? at::kFloat
                                                                          : t.scalar_type();
}

// Every dimension but the channel one.
std::vector<int64_t> reducedDims(const Tensor& input) {
  TORCH_CHECK(input.dim() >= 2, "batch norm expects an input with at least 2 dimensions, got ",
              input.dim());
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  return dims;
}

// A per-channel vector shaped to broadcast against the input: [1, C, 1, ...].
Tensor perChannel(const Tensor& v, const Tensor& input) {
  std::vector<int64_t> shape(input.dim(), 1);
  shape[1] = v.numel();
  return v.reshape(shape);
}

std::tuple<Tensor, Tensor> batchNormStats(const Tensor& input, double eps) {
  const Tensor x = input.to(accumulateType(input));
  auto [var, mean] = at::var_mean(x, reducedDims(input), /*correction=*/0, /*keepdim=*/false);
  return {mean, (var + eps).rsqrt()};
}

// Combines per-rank (mean, invstd, count) into the global ones and updates
// the running statistics in place with the unbiased variance, as CUDA's.
std::tuple<Tensor, Tensor> gatherStatsWithCounts(const Tensor& input, const Tensor& mean,
                                                 const Tensor& invstd,
                                                 const std::optional<Tensor>& running_mean,
                                                 const std::optional<Tensor>& running_var,
                                                 double momentum, double eps, const Tensor& counts) {
  const auto acc = accumulateType(input);
  const Tensor n = counts.to(acc).reshape({-1, 1});  // [world, 1]
  const Tensor means = mean.to(acc), invstds = invstd.to(acc);
  const Tensor total = n.sum();
  const Tensor global_mean = (means * n).sum(0) / total;
  const Tensor vars = invstds.pow(-2) - eps;
  const Tensor global_var = ((vars + (means - global_mean).pow(2)) * n).sum(0) / total;
  if (running_mean.has_value() && running_mean->defined())
    running_mean->mul_(1 - momentum).add_(global_mean.to(running_mean->scalar_type()), momentum);
  if (running_var.has_value() && running_var->defined()) {
    const Tensor unbiased = global_var * total / (total - 1);
    running_var->mul_(1 - momentum).add_(unbiased.to(running_var->scalar_type()), momentum);
  }
  return {global_mean, (global_var + eps).rsqrt()};
}

std::tuple<Tensor, Tensor> gatherStats(const Tensor& input, const Tensor& mean, const Tensor& invstd,
                                       const std::optional<Tensor>& running_mean,
                                       const std::optional<Tensor>& running_var, double momentum,
                                       double eps, int64_t count) {
  const Tensor counts = at::full({mean.size(0)}, static_cast<double>(count),
                                 mean.options().dtype(accumulateType(input)));
  return gatherStatsWithCounts(input, mean, invstd, running_mean, running_var, momentum, eps, counts);
}

Tensor batchNormElemt(const Tensor& input, const std::optional<Tensor>& weight,
                      const std::optional<Tensor>& bias, const Tensor& mean, const Tensor& invstd,
                      double /*eps: invstd has it*/) {
  Tensor y = (input.to(accumulateType(input)) - perChannel(mean, input)) * perChannel(invstd, input);
  if (weight.has_value() && weight->defined()) y = y * perChannel(*weight, input);
  if (bias.has_value() && bias->defined()) y = y + perChannel(*bias, input);
  return y.to(input.scalar_type());
}

std::tuple<Tensor, Tensor, Tensor, Tensor> backwardReduce(
    const Tensor& grad_out, const Tensor& input, const Tensor& mean, const Tensor& invstd,
    const std::optional<Tensor>& weight, bool input_g, bool weight_g, bool bias_g) {
  const auto acc = accumulateType(input);
  const auto dims = reducedDims(input);
  const Tensor dy = grad_out.to(acc);
  const Tensor sum_dy = dy.sum(dims);
  const Tensor sum_dy_xmu = (dy * (input.to(acc) - perChannel(mean, input))).sum(dims);
  const bool has_weight = weight.has_value() && weight->defined();
  Tensor grad_weight, grad_bias;
  if (weight_g && has_weight) grad_weight = (sum_dy_xmu * invstd).to(weight->scalar_type());
  if (bias_g && has_weight) grad_bias = sum_dy.to(weight->scalar_type());
  return {input_g ? sum_dy : Tensor(), input_g ? sum_dy_xmu : Tensor(), grad_weight, grad_bias};
}

Tensor backwardElemt(const Tensor& grad_out, const Tensor& input, const Tensor& mean,
                     const Tensor& invstd, const std::optional<Tensor>& weight,
                     const Tensor& sum_dy, const Tensor& sum_dy_xmu, const Tensor& count) {
  const auto acc = accumulateType(input);
  const Tensor total = count.to(acc).sum();
  const Tensor mean_dy = perChannel(sum_dy / total, input);
  const Tensor mean_dy_xmu = perChannel(sum_dy_xmu / total, input);
  const Tensor inv = perChannel(invstd.to(acc), input);
  const Tensor xmu = input.to(acc) - perChannel(mean, input);
  Tensor grad = (grad_out.to(acc) - mean_dy - xmu * inv * inv * mean_dy_xmu) * inv;
  if (weight.has_value() && weight->defined()) grad = grad * perChannel(weight->to(acc), input);
  return grad.to(input.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("batch_norm_stats", TORCH_FN(batchNormStats));
  m.impl("batch_norm_gather_stats", TORCH_FN(gatherStats));
  m.impl("batch_norm_gather_stats_with_counts", TORCH_FN(gatherStatsWithCounts));
  m.impl("batch_norm_elemt", TORCH_FN(batchNormElemt));
  m.impl("batch_norm_backward_reduce", TORCH_FN(backwardReduce));
  m.impl("batch_norm_backward_elemt", TORCH_FN(backwardElemt));
}

}  // namespace openreg::kernels
