// fill_ (asynchronous, on the current stream), item() (synchronises the
// current stream, like CUDA), and record_stream (caching allocator hook that
// FSDP1 and users call to keep memory alive for another stream).
#include <ATen/Dispatch_v2.h>
#include <ATen/ops/_local_scalar_dense.h>
#include <ATen/ops/fill.h>

#include "../runtime/OpenRegCachingAllocator.h"
#include "../runtime/OpenRegFunctions.h"
#include "../runtime/OpenRegKinetoPlugin.h"
#include "../runtime/OpenRegStream.h"
#include "Kernels.h"
#include "Launch.h"

namespace openreg::kernels {

at::Tensor& fill_scalar_(at::Tensor& self, const c10::Scalar& value) {
  // The value converts on the host, so an overflow raises here (as on CUDA),
  // not in the kernel.
  AT_DISPATCH_V2(self.scalar_type(), "fill_", AT_WRAP([&] { (void)value.to<scalar_t>(); }),
                 AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), at::kBool, at::kHalf, at::kBFloat16,
                 at::kComplexHalf,
                 AT_EXPAND(AT_FLOAT8_TYPES), AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES));
  if (self.numel() == 0) return self;
  at::Tensor view = kernelView(self);
  launchOnCurrentStream(self, [view, value]() mutable { view.fill_(value); }, {}, {self});
  return self;
}

at::Tensor& fill_tensor_(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0,
              "fill_ only supports 0-dimension value tensor but got tensor with ", value.dim(),
              " dimensions.");
  if (!isOpenReg(value)) return fill_scalar_(self, value.item());
  TORCH_CHECK(value.device() == self.device(),
              "Expected all tensors to be on the same device, but found at least two devices, ",
              self.device(), " and ", value.device(), "!");
  if (self.numel() == 0) return self;
  at::Tensor view = kernelView(self);
  at::Tensor value_view = kernelView(value);
  launchOnCurrentStream(self, [view, value_view]() mutable { view.fill_(value_view); }, {value},
                        {self});
  return self;
}

c10::Scalar _local_scalar_dense(const at::Tensor& self) {
  warn_or_error_on_sync("aten::_local_scalar_dense");
  const c10::Stream stream = getCurrentStream(self.device().index());
  synchronizeStream(stream);
  checkHostAccess(stream, {self}, {});
  c10::Scalar value;
  runOnHostInStreamOrder(stream, [&] {  // a DtoH copy
    runAsStreamWork(stream, [&] { value = at::_local_scalar_dense(kernelView(self)); });
  });
  return value;
}

void record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "record_stream: expected an openreg stream, got ", stream);
  getCachingAllocator()->recordStream(self.storage().data_ptr(), stream);
}

}  // namespace openreg::kernels
