// Host-only kernels that change a tensor's metadata or storage binding:
// resize_, set_, is_set_to; and _has_compatible_shallow_copy_type, which
// TensorImpl asks before `param.data = t` swaps a tensor's implementation
// (so CPU and openreg tensors swap, as CPU and CUDA do: Module.to() keeps its
// Parameters). Views (as_strided, view, _reshape_alias) reuse
// ATen's device-generic implementations (registered in RegisterOpenReg.cpp).
#include <ATen/native/Resize.h>
#include <ATen/native/ResizeCommon.h>
#include <ATen/EmptyTensor.h>
#include <c10/core/DeviceGuard.h>

#include "../runtime/OpenRegCachingAllocator.h"
#include "Kernels.h"

namespace openreg::kernels {
namespace {

void growStorage(const at::Tensor& self, size_t needed_bytes) {
  const c10::Storage& storage = self.storage();
  if (needed_bytes <= storage.nbytes()) return;
  if (!storage.data_ptr().get() && storage.resizable()) {
    // A fresh storage (e.g. after set_()): allocate on the tensor's device.
    c10::DeviceGuard guard(self.device());
    storage.unsafeGetStorageImpl()->set_data_ptr_noswap(
        storage.allocator()->allocate(needed_bytes));
    storage.unsafeGetStorageImpl()->set_nbytes(needed_bytes);
    return;
  }
  at::native::resize_bytes_nocuda(storage, needed_bytes);
}

}  // namespace

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  auto int_size = C10_AS_INTARRAYREF_SLOW(size);
  auto* impl = self.unsafeGetTensorImpl();
  const int64_t old_nbytes = impl->unsafe_storage() ? static_cast<int64_t>(impl->unsafe_storage().nbytes()) : 0;
  if (!(impl->sizes() == int_size && !memory_format.has_value())) {
    impl->set_sizes_contiguous(int_size);
    if (memory_format.has_value()) {
      TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve,
                  "Unsupported memory format ", *memory_format);
      impl->empty_tensor_restride(*memory_format);
    }
  }
  size_t needed = at::detail::computeStorageNbytes(impl->sizes(), impl->strides(),
                                                   self.dtype().itemsize(), impl->storage_offset());
  if (self.numel() > 0) growStorage(self, needed);
  // As CUDA's resize_: the grown part is filled (NaN, or the integer type's largest value).
  if (C10_UNLIKELY(at::globalContext().deterministicAlgorithms() &&
                   at::globalContext().deterministicFillUninitializedMemory()))
    at::native::fill_resize_deterministic_(self, old_nbytes);
  return self;
}

at::Tensor& set_storage_(at::Tensor& self, c10::Storage source, c10::SymInt storage_offset,
                         c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  int64_t offset = storage_offset.expect_int();
  auto int_size = C10_AS_INTARRAYREF_SLOW(size);
  auto int_stride = C10_AS_INTARRAYREF_SLOW(stride);
  at::native::checkSetStorage(self, source, offset, int_size, int_stride);
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_storage_offset(offset);
  if (int_stride.empty()) {
    impl->set_sizes_contiguous(int_size);
  } else {
    impl->set_sizes_and_strides(int_size, int_stride);
  }
  size_t needed = at::detail::computeStorageNbytes(impl->sizes(), impl->strides(),
                                                   self.dtype().itemsize(), offset);
  if (self.numel() > 0) growStorage(self, needed);
  return self;
}

at::Tensor& set_source_storage_(at::Tensor& self, c10::Storage source) {
  int64_t numel = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage_(self, std::move(source), 0, {c10::SymInt(numel)}, {});
}

at::Tensor& set_source_tensor_(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return set_storage_(self, source.storage(), source.sym_storage_offset(), source.sym_sizes(),
                      source.sym_strides());
}

at::Tensor& set_empty_(at::Tensor& self) {
  c10::DeviceGuard guard(self.device());  // the empty storage belongs to self's device
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, getCachingAllocator(), true);
  return set_storage_(self, std::move(storage), 0, {c10::SymInt(0)}, {});
}

bool is_set_to(const at::Tensor& self, const at::Tensor& tensor) {
  return self.storage().is_alias_of(tensor.storage()) &&
         self.storage_offset() == tensor.storage_offset() && self.sizes() == tensor.sizes() &&
         self.strides() == tensor.strides();
}

bool _has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  // Dense tensors of the CPU and openreg swap freely, as CPU and CUDA do
  // (the dispatcher picks this kernel for either order of the two).
  auto dense = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided && !t.is_quantized() &&
           (t.device().is_cpu() || t.device().is_privateuseone());
  };
  if (dense(self) && dense(from)) return true;
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

}  // namespace openreg::kernels
