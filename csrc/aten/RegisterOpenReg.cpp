// PyTorch hook: operator registration for the PrivateUse1 dispatch key.
// Only TORCH_LIBRARY_IMPL blocks live here; kernels are in the family files
// declared in Kernels.h. Everything not listed goes to the boxed fallback.
// Tests: tests/ops/.
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

#include "Kernels.h"

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
  // Scalars and streams
  m.impl("fill_.Scalar", TORCH_FN(fill_scalar_));
  m.impl("fill_.Tensor", TORCH_FN(fill_tensor_));
  m.impl("_local_scalar_dense", TORCH_FN(_local_scalar_dense));
  m.impl("record_stream", TORCH_FN(record_stream));
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
