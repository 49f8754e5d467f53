// PyTorch hook: _fused_sdp_choice_stub for PrivateUse1 (REGISTER_PRIVATEUSE1_DISPATCH):
// scaled_dot_product_attention on openreg takes the path it takes on the CPU.
//
// SDPA (CompositeImplicitAutograd) asks _fused_sdp_choice_stub for the
// query's device type and, for a device without an entry, decomposes into the
// math path (~20 small ops, some through the generic fallback, and numbers
// different from the CPU's). Registering the CPU's own choice for PrivateUse1
// makes openreg pick what the CPU picks: the CPU flash kernel
// (_scaled_dot_product_flash_attention_for_cpu and its backward, native
// kernels below) when its constraints hold, else the same math path.
//
// The kernels mirror ATen's _scaled_dot_product_flash_attention_cpu(_backward):
// its checks and output layout on the host; on the stream, the CPU op itself
// (the flash_attention_kernel stubs are not exported), its results copied into
// the device outputs. Results equal the CPU's bit for bit.
#include <ATen/OpMathType.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_ops.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward_cpu_dispatch.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_cpu_dispatch.h>

#include "NativeKernels.h"
#include "Structured.h"

namespace at::native {
namespace {

// The CPU's choice (its kernel only reads the arguments' metadata). The
// stub's own CPU entry is not exported, so go through the operator.
int64_t fusedSdpChoiceLikeCpu(const Tensor& query, const Tensor& key, const Tensor& value,
                              const std::optional<Tensor>& attn_mask, double dropout_p,
                              bool is_causal, std::optional<double> scale, bool enable_gqa) {
  return at::_ops::_fused_sdp_choice::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), query,
                                                 key, value, attn_mask, dropout_p, is_causal, scale,
                                                 enable_gqa);
}

}  // namespace

REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &fusedSdpChoiceLikeCpu)

}  // namespace at::native

namespace openreg::kernels {

using at::Tensor;

std::tuple<Tensor, Tensor> sdpa_flash_cpu(const Tensor& query, const Tensor& key,
                                          const Tensor& value, double dropout_p, bool is_causal,
                                          const std::optional<Tensor>& attn_mask,
                                          std::optional<double> scale) {
  c10::Device device = opDevice("_scaled_dot_product_flash_attention_for_cpu", query, key, value,
                                attn_mask.value_or(Tensor()));
  c10::DeviceGuard guard(device);
  const auto dtype = query.scalar_type();
  TORCH_CHECK(c10::isFloatingType(dtype),
              "scaled_dot_product_attention_flash_attention: Expected data type in FP32, FP64, "
              "BF16, FP16, but got ", dtype, " instead.");
  TORCH_CHECK(query.dim() == 4 && key.dim() == 4 && value.dim() == 4,
              "scaled_dot_product_attention_flash_attention: Accept only 4 dims inputs shape of "
              "{B, H, T, K}");
  TORCH_CHECK(dropout_p == 0.0,
              "scaled_dot_product_attention_flash_attention: Currently do not support dropout > 0");
  TORCH_CHECK((query.size(3) == value.size(3)) && (key.size(3) == value.size(3)),
              "scaled_dot_product_attention_flash_attention: Q/K/V should have the same head size");
  TORCH_CHECK(!attn_mask.has_value() || attn_mask->scalar_type() == at::kFloat ||
                  dtype == attn_mask->scalar_type(),
              "scaled_dot_product_attention_flash_attention: Attention mask is the same data type "
              "as query");
  TORCH_CHECK(!attn_mask.has_value() || (attn_mask->dim() == 2 || attn_mask->dim() == 4),
              "scaled_dot_product_attention_flash_attention: Attention mask dim in {2, 4}");
  // The CPU's layout: output is empty_like(query) seen as {B, T, H, K}, the
  // log-sum-exp a contiguous {B, T, H}; both are returned transposed back.
  Tensor output = allocateOutput(query.sizes(), query.strides(), query.options());
  if (!query.is_non_overlapping_and_dense())
    output = allocateOutput(query.sizes(), {}, query.options());
  output = output.transpose(1, 2);
  Tensor logsumexp = allocateOutput({query.size(0), query.size(2), query.size(1)}, {},
                                    query.options().dtype(at::toOpMathType(dtype)));
  launchIntoOutputs(
      std::array<Tensor, 2>{output, logsumexp},
      [dropout_p, is_causal, scale](const Tensor& q, const Tensor& k, const Tensor& v,
                                    const std::optional<Tensor>& mask) {
        auto [out, lse] = at::cpu::_scaled_dot_product_flash_attention_for_cpu(
            q, k, v, dropout_p, is_causal, mask, scale);
        return std::array<Tensor, 2>{out.transpose(1, 2), lse.transpose(1, 2)};
      },
      query, key, value, attn_mask);
  return {output.transpose(1, 2), logsumexp.transpose(1, 2)};
}

std::tuple<Tensor, Tensor, Tensor> sdpa_flash_cpu_backward(
    const Tensor& grad_out, const Tensor& query, const Tensor& key, const Tensor& value,
    const Tensor& out, const Tensor& logsumexp, double dropout_p, bool is_causal,
    const std::optional<Tensor>& attn_mask, std::optional<double> scale) {
  if (!grad_out.defined()) return {};
  c10::Device device = opDevice("_scaled_dot_product_flash_attention_for_cpu_backward", grad_out,
                                query, key, value, out, logsumexp, attn_mask.value_or(Tensor()));
  c10::DeviceGuard guard(device);
  // Gradients are {B, T, H, K} buffers returned as {B, H, T, K} views, as on the CPU.
  auto grad = [](const Tensor& like) {
    return allocateOutput(like.transpose(1, 2).sizes(), {}, like.options());
  };
  Tensor grad_q = grad(query), grad_k = grad(key), grad_v = grad(value);
  launchIntoOutputs(
      std::array<Tensor, 3>{grad_q, grad_k, grad_v},
      [dropout_p, is_causal, scale](const Tensor& g, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const Tensor& o, const Tensor& l,
                                    const std::optional<Tensor>& mask) {
        auto [dq, dk, dv] = at::cpu::_scaled_dot_product_flash_attention_for_cpu_backward(
            g, q, k, v, o, l, dropout_p, is_causal, mask, scale);
        return std::array<Tensor, 3>{dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)};
      },
      grad_out, query, key, value, out, logsumexp, attn_mask);
  return {grad_q.transpose(1, 2), grad_k.transpose(1, 2), grad_v.transpose(1, 2)};
}

}  // namespace openreg::kernels
