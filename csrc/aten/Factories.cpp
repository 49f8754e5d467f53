// aten::empty.memory_format and empty_strided for PrivateUse1 (registered in
// RegisterOpenReg.cpp), where torch.empty(..., device="openreg") and every
// fresh result land: memory from the caching allocator.
// Allocation only, no kernel launch (like CUDA's empty),
// except under torch.use_deterministic_algorithms with
// torch.utils.deterministic.fill_uninitialized_memory (CUDA's empty fills then).
#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/native/TensorFactories.h>
#include <c10/core/DeviceGuard.h>

#include "../runtime/OpenRegCachingAllocator.h"
#include "Kernels.h"

namespace openreg::kernels {
namespace {
constexpr c10::DispatchKeySet kKeys(c10::DispatchKey::PrivateUse1);

c10::Device deviceOrCurrent(std::optional<c10::Device> device) {
  return device.value_or(c10::Device(c10::DeviceType::PrivateUse1));
}

at::Tensor filledIfDeterministic(at::Tensor t) {
  if (C10_UNLIKELY(at::globalContext().deterministicAlgorithms() &&
                   at::globalContext().deterministicFillUninitializedMemory()))
    at::native::fill_empty_deterministic_(t);  // NaN, or the integer type's largest value
  return t;
}
}  // namespace

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  TORCH_CHECK(!pin_memory.value_or(false), "Only dense CPU tensors can be pinned");
  c10::OptionalDeviceGuard guard(deviceOrCurrent(device));
  return filledIfDeterministic(at::detail::empty_generic(
      size, getCachingAllocator(), kKeys, c10::dtype_or_default(dtype), memory_format));
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  TORCH_CHECK(!pin_memory.value_or(false), "Only dense CPU tensors can be pinned");
  c10::OptionalDeviceGuard guard(deviceOrCurrent(device));
  return filledIfDeterministic(at::detail::empty_strided_generic(
      size, stride, getCachingAllocator(), kKeys, c10::dtype_or_default(dtype)));
}

}  // namespace openreg::kernels
