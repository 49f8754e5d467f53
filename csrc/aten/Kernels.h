// Declarations of openreg's native ATen kernels, registered for PrivateUse1
// in RegisterOpenReg.cpp, and of the wrappers around the generic fallback
// that RegisterFallbackRoutes.cpp registers (FallbackChecks.cpp).
// Grouped by family; each .cpp holds one family.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/Scalar.h>
#include <c10/core/Storage.h>

namespace torch {
class Library;
}

namespace openreg::kernels {

// Factories.cpp
at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format);
at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory);

// Copy.cpp
at::Tensor _copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking);
at::Tensor _copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst);

// TensorShape.cpp: views and storage manipulation (host-only, no kernel)
const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format);
at::Tensor& set_storage_(at::Tensor& self, c10::Storage source, c10::SymInt storage_offset,
                         c10::SymIntArrayRef size, c10::SymIntArrayRef stride);
at::Tensor& set_source_storage_(at::Tensor& self, c10::Storage source);
at::Tensor& set_source_tensor_(at::Tensor& self, const at::Tensor& source);
at::Tensor& set_empty_(at::Tensor& self);
bool is_set_to(const at::Tensor& self, const at::Tensor& tensor);
// Whether `self.data = from` may swap in from's implementation: PyTorch asks
// PrivateUse1 backends (TensorImpl.h), and Module.to / FSDP rely on a yes
// between CPU and the device.
bool _has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from);

// Scalar.cpp: fill, item, record_stream
at::Tensor& fill_scalar_(at::Tensor& self, const c10::Scalar& value);
at::Tensor& fill_tensor_(at::Tensor& self, const at::Tensor& value);
c10::Scalar _local_scalar_dense(const at::Tensor& self);
void record_stream(at::Tensor& self, c10::Stream stream);

// Fallback.cpp: every operator without a native kernel
void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// The same for a call whose CPU kernel returns fresh results of other dtypes
// than its Meta kernel says, where the fallback's probe cannot run the kernel
// to learn them (size arguments that the probe's shapes do not match):
// `dtypes` has one entry per returned tensor.
void fallbackWithResultDtypes(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                              const std::vector<at::ScalarType>& dtypes);
// NestedFallback.cpp: a nested tensor's host copy moved to the device.
at::Tensor nestedOnDevice(const at::Tensor& nested, c10::Device device);

// FallbackChecks.cpp: the same for a few operators (RegisterFallbackRoutes.cpp
// routes them there), with the argument checks their Meta kernel leaves to
// the CPU kernel, or outputs the CPU kernel leaves undefined.
void convolutionFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);
void ampUpdateScaleFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);
void multiHeadAttentionFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);
void indexFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// Registers, for a set of operators, the CPU kernels' argument checks made on
// the host, then the fallback.
void registerCheckedFallbacks(torch::Library& m);

}  // namespace openreg::kernels
