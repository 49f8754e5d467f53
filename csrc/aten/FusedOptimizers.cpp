// Native _fused_adamw_ (torch.optim.AdamW(fused=True)): ONE kernel on the
// current stream runs the CPU's fused AdamW over kernel views of every list.
// Meta has no kernel for it, so without this it would take the generic
// fallback's synchronous path (the host would wait for the stream each step).
// The host checks what the CPU kernel would reject (list lengths, devices,
// shapes and dtypes per element), so those errors are raised on the host.
#include <ATen/ops/_fused_adamw.h>

#include "DispatchProbe.h"
#include "NativeKernels.h"
#include "Structured.h"

namespace openreg::kernels {

using at::Tensor;
using at::TensorList;

namespace {

// The CPU kernel's dtype dispatch, made on the host (DispatchProbe.h), so an
// unsupported dtype raises NotImplementedError at the call, as CUDA's launch
// does, instead of failing the stream. It dispatches per element on the
// parameter's and step's dtypes: each distinct signature is probed once.
void checkFusedAdamwDispatch(TensorList params, TensorList state_steps, bool amsgrad,
                             bool maximize, const std::optional<Tensor>& grad_scale,
                             const std::optional<Tensor>& found_inf) {
  std::string previous;
  for (size_t i = 0; i < params.size(); ++i) {
    std::string key;
    dispatch_probe::appendKey(key, params[i]);
    dispatch_probe::appendKey(key, state_steps[i]);
    dispatch_probe::appendKey(key, grad_scale);
    dispatch_probe::appendKey(key, found_inf);
    dispatch_probe::appendKey(key, amsgrad);
    dispatch_probe::appendKey(key, maximize);
    if (key == previous || key.find(dispatch_probe::kEmpty) != std::string::npos) continue;
    previous = key;
    struct Site {};
    dispatch_probe::check<Site>(key, [&] {
      auto probe = [](const Tensor& t) { return dispatch_probe::probeTensor(t); };
      std::vector<Tensor> p{probe(params[i])}, g{probe(params[i])}, m{probe(params[i])},
          v{probe(params[i])}, steps{probe(state_steps[i])}, vmax;
      if (amsgrad) vmax.push_back(probe(params[i]));
      std::optional<Tensor> scale, inf;
      if (grad_scale.has_value()) scale = probe(*grad_scale);
      if (found_inf.has_value()) inf = probe(*found_inf);
      at::_fused_adamw_(p, g, m, v, vmax, steps, 0.1, 0.9, 0.999, 0.0, 1e-8, amsgrad, maximize,
                        scale, inf);
    });
  }
}

}  // namespace

void fused_adamw_(TensorList params, TensorList grads, TensorList exp_avgs,
                  TensorList exp_avg_sqs, TensorList max_exp_avg_sqs, TensorList state_steps,
                  double lr, double beta1, double beta2, double weight_decay, double eps,
                  bool amsgrad, bool maximize, const std::optional<Tensor>& grad_scale,
                  const std::optional<Tensor>& found_inf) {
  const size_t n = params.size();
  TORCH_CHECK(grads.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n &&
                  state_steps.size() == n && (!amsgrad || max_exp_avg_sqs.size() == n),
              "_fused_adamw_: all tensor lists must have the same length");
  if (n == 0) return;
  c10::Device device = opDevice("_fused_adamw_", params, grads, exp_avgs, exp_avg_sqs,
                                max_exp_avg_sqs, state_steps, grad_scale, found_inf);
  // Every list on the device, as CUDA's fused kernel requires: opDevice lets
  // 0-dim CPU tensors through as scalars, and the kernel writes most lists.
  for (TensorList list : {params, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps})
    for (const Tensor& t : list)
      TORCH_CHECK(t.device() == device,
                  "Expected all tensors to be on the same device, but found at least two "
                  "devices, ", device, " and ", t.device(), "! (in _fused_adamw_)");
  for (size_t i = 0; i < n; ++i) {
    for (TensorList list : {grads, exp_avgs, exp_avg_sqs}) {
      TORCH_CHECK(list[i].sizes() == params[i].sizes() &&
                      list[i].scalar_type() == params[i].scalar_type(),
                  "_fused_adamw_: element ", i, " of every list must match the parameter's shape ",
                  params[i].sizes(), " and dtype ", params[i].scalar_type());
    }
  }
  checkFusedAdamwDispatch(params, state_steps, amsgrad, maximize, grad_scale, found_inf);
  std::vector<Tensor> reads;
  for (const auto& arg : {grads, state_steps}) collectTensor(reads, arg);
  collectTensor(reads, grad_scale);
  collectTensor(reads, found_inf);
  std::vector<Tensor> writes(params.begin(), params.end());
  writes.insert(writes.end(), exp_avgs.begin(), exp_avgs.end());
  writes.insert(writes.end(), exp_avg_sqs.begin(), exp_avg_sqs.end());
  writes.insert(writes.end(), max_exp_avg_sqs.begin(), max_exp_avg_sqs.end());
  launchOnCurrentStream(
      params[0],
      [p = kernelViews(params), g = kernelViews(grads), m = kernelViews(exp_avgs),
       v = kernelViews(exp_avg_sqs), vmax = kernelViews(max_exp_avg_sqs),
       steps = kernelViews(state_steps), scale = toKernelArg(grad_scale),
       inf = toKernelArg(found_inf), lr, beta1, beta2, weight_decay, eps, amsgrad, maximize] {
        at::_fused_adamw_(p, g, m, v, vmax, steps, lr, beta1, beta2, weight_decay, eps, amsgrad,
                          maximize, scale, inf);
      },
      reads, writes);
}

}  // namespace openreg::kernels
