// PyTorch hook: operator registration for the PrivateUse1 dispatch key (and
// the Conjugate / Negative fallthroughs _copy_from needs, below).
// Only TORCH_LIBRARY_IMPL blocks live here; kernels are in the family files
// declared in Kernels.h. Registered elsewhere, beside what they need:
// native_dropout (Dropout.cpp), the SyncBatchNorm ops (SyncBatchNorm.cpp),
// nested buffer views and the NestedTensorPrivateUse1 kernels and fallback
// (NestedFallback.cpp), ops routed to the fallback over a composite kernel
// (RegisterFallbackRoutes.cpp), AutocastPrivateUse1 (Autocast.cpp), the SDPA
// choice stub (Attention.cpp), _cummax_helper / _cummin_helper /
// _logcumsumexp (CumulativeOps.cpp), fused RNN cells (openreg/rnn.py).
// Everything else goes to the boxed fallback.
// Tests: tests/ops/.
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

#include "Kernels.h"
#include "NativeKernels.h"

namespace openreg::kernels {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // Factories
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  // Copies
  m.impl("_copy_from", TORCH_FN(_copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(_copy_from_and_resize));
  // Views: device-generic metadata-only implementations from ATen
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("alias", TORCH_FN(at::native::alias));
  // Storage binding and resizing
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_));
  m.impl("set_.source_Storage", TORCH_FN(set_source_storage_));
  m.impl("set_.source_Tensor", TORCH_FN(set_source_tensor_));
  m.impl("set_", TORCH_FN(set_empty_));
  m.impl("is_set_to", TORCH_FN(is_set_to));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(_has_compatible_shallow_copy_type));
  // Scalars and streams
  m.impl("fill_.Scalar", TORCH_FN(fill_scalar_));
  m.impl("fill_.Tensor", TORCH_FN(fill_tensor_));
  m.impl("_local_scalar_dense", TORCH_FN(_local_scalar_dense));
  m.impl("record_stream", TORCH_FN(record_stream));
}

// The hot set of a training step (NativeKernels.h): no Meta dispatch, no fallback.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("add.Tensor", TORCH_FN(add));
  m.impl("add_.Tensor", TORCH_FN(add_));
  m.impl("sub.Tensor", TORCH_FN(sub));
  m.impl("sub_.Tensor", TORCH_FN(sub_));
  m.impl("mul.Tensor", TORCH_FN(mul));
  m.impl("mul_.Tensor", TORCH_FN(mul_));
  m.impl("div.Tensor", TORCH_FN(div));
  m.impl("div_.Tensor", TORCH_FN(div_));
  m.impl("add.out", TORCH_FN(add_out));
  m.impl("sub.out", TORCH_FN(sub_out));
  m.impl("mul.out", TORCH_FN(mul_out));
  m.impl("div.out", TORCH_FN(div_out));
  m.impl("lerp.Scalar", TORCH_FN(lerp));
  m.impl("lerp_.Scalar", TORCH_FN(lerp_));
  m.impl("lerp.Scalar_out", TORCH_FN(lerp_out));
  m.impl("addcmul", TORCH_FN(addcmul));
  m.impl("addcmul_", TORCH_FN(addcmul_));
  m.impl("addcmul.out", TORCH_FN(addcmul_out));
  m.impl("addcdiv", TORCH_FN(addcdiv));
  m.impl("addcdiv_", TORCH_FN(addcdiv_));
  m.impl("addcdiv.out", TORCH_FN(addcdiv_out));
  m.impl("exp", TORCH_FN(exp));
  m.impl("cos", TORCH_FN(cos));
  m.impl("sin", TORCH_FN(sin));
  m.impl("log", TORCH_FN(log));
  m.impl("erf", TORCH_FN(erf));
  m.impl("neg", TORCH_FN(neg));
  m.impl("reciprocal", TORCH_FN(reciprocal));
  m.impl("rsqrt", TORCH_FN(rsqrt));
  m.impl("clamp", TORCH_FN(clamp));
  m.impl("sqrt", TORCH_FN(sqrt));
  m.impl("sigmoid", TORCH_FN(sigmoid));
  m.impl("tanh", TORCH_FN(tanh));
  m.impl("silu", TORCH_FN(silu));
  m.impl("sigmoid_backward", TORCH_FN(sigmoid_backward));
  m.impl("tanh_backward", TORCH_FN(tanh_backward));
  m.impl("silu_backward", TORCH_FN(silu_backward));
  m.impl("gelu", TORCH_FN(gelu));
  m.impl("gelu_backward", TORCH_FN(gelu_backward));
  m.impl("threshold_backward", TORCH_FN(threshold_backward));
  m.impl("pow.Tensor_Scalar", TORCH_FN(pow_tensor_scalar));
  m.impl("relu", TORCH_FN(relu));
  m.impl("relu_", TORCH_FN(relu_));
  m.impl("zero_", TORCH_FN(zero_));
  m.impl("mm", TORCH_FN(mm));
  m.impl("bmm", TORCH_FN(bmm));
  m.impl("addmm", TORCH_FN(addmm));
  m.impl("baddbmm", TORCH_FN(baddbmm));
  m.impl("sum.dim_IntList", TORCH_FN(sum_dim));
  m.impl("mean.dim", TORCH_FN(mean_dim));
  m.impl("_softmax", TORCH_FN(softmax));
  m.impl("_log_softmax", TORCH_FN(log_softmax));
  m.impl("_softmax_backward_data", TORCH_FN(softmax_backward));
  m.impl("_log_softmax_backward_data", TORCH_FN(log_softmax_backward));
  m.impl("max", TORCH_FN(max));
  m.impl("max.dim", TORCH_FN(max_dim));
  m.impl("amax", TORCH_FN(amax));
  m.impl("argmax", TORCH_FN(argmax));
  m.impl("linalg_vector_norm", TORCH_FN(linalg_vector_norm));
  m.impl("cat", TORCH_FN(cat));
  m.impl("cat.out", TORCH_FN(cat_out));
  m.impl("split_with_sizes_copy", TORCH_FN(split_with_sizes_copy));
  m.impl("split_with_sizes_copy.out", TORCH_FN(split_with_sizes_copy_out));
  m.impl("_chunk_cat", TORCH_FN(_chunk_cat));
  m.impl("_chunk_cat.out", TORCH_FN(_chunk_cat_out));
  m.impl("_foreach_add_.Scalar", TORCH_FN(foreach_add_scalar_));
  m.impl("_foreach_add.Scalar", TORCH_FN(foreach_add_scalar));
  m.impl("_foreach_add_.List", TORCH_FN(foreach_add_list_));
  m.impl("_foreach_add.List", TORCH_FN(foreach_add_list));
  m.impl("_foreach_add_.Tensor", TORCH_FN(foreach_add_tensor_));
  m.impl("_foreach_mul_.Scalar", TORCH_FN(foreach_mul_scalar_));
  m.impl("_foreach_mul.Scalar", TORCH_FN(foreach_mul_scalar));
  m.impl("_foreach_mul_.List", TORCH_FN(foreach_mul_list_));
  m.impl("_foreach_mul_.Tensor", TORCH_FN(foreach_mul_tensor_));
  m.impl("_foreach_div_.Scalar", TORCH_FN(foreach_div_scalar_));
  m.impl("_foreach_div_.ScalarList", TORCH_FN(foreach_div_scalarlist_));
  m.impl("_foreach_lerp_.Scalar", TORCH_FN(foreach_lerp_scalar_));
  m.impl("_foreach_addcmul_.Scalar", TORCH_FN(foreach_addcmul_scalar_));
  m.impl("_foreach_addcdiv_.Scalar", TORCH_FN(foreach_addcdiv_scalar_));
  m.impl("_foreach_addcdiv_.ScalarList", TORCH_FN(foreach_addcdiv_scalarlist_));
  m.impl("_foreach_sqrt_", TORCH_FN(foreach_sqrt_));
  m.impl("_foreach_sqrt", TORCH_FN(foreach_sqrt));
  m.impl("_foreach_norm.Scalar", TORCH_FN(foreach_norm));
  m.impl("_fused_adamw_", TORCH_FN(fused_adamw_));
  m.impl("_scaled_dot_product_flash_attention_for_cpu", TORCH_FN(sdpa_flash_cpu));
  m.impl("_scaled_dot_product_flash_attention_for_cpu_backward", TORCH_FN(sdpa_flash_cpu_backward));
  m.impl("native_layer_norm", TORCH_FN(native_layer_norm));
  m.impl("native_layer_norm_backward", TORCH_FN(native_layer_norm_backward));
  m.impl("nll_loss_forward", TORCH_FN(nll_loss_forward));
  m.impl("nll_loss_backward", TORCH_FN(nll_loss_backward));
  m.impl("embedding_dense_backward", TORCH_FN(embedding_dense_backward));
  m.impl("index_select", TORCH_FN(index_select));
  m.impl("where.self", TORCH_FN(where));
}

// _copy_from sees lazily conjugated / negated tensors as they are (kernelView
// keeps the bits and the CPU copy_ resolves them). Without this, the math-bit
// fallbacks materialise the source by clone(), which copies through
// _copy_from again: endless recursion.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
}

}  // namespace openreg::kernels
