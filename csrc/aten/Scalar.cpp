// fill_ (asynchronous, on the current stream), item() (synchronises the
// current stream, like CUDA), and record_stream (caching allocator hook that
// FSDP1 and users call to keep memory alive for another stream).
#include <ATen/ops/_local_scalar_dense.h>
#include <ATen/ops/fill.h>

#include "../runtime/OpenRegCachingAllocator.h"
#include "../runtime/OpenRegStream.h"
#include "Kernels.h"
#include "Launch.h"

namespace openreg::kernels {

at::Tensor& fill_scalar_(at::Tensor& self, const c10::Scalar& value) {
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
  synchronizeStream(getCurrentStream(self.device().index()));
  return at::_local_scalar_dense(kernelView(self));
}

void record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "record_stream: expected an openreg stream, got ", stream);
  getCachingAllocator()->recordStream(self.storage().data_ptr(), stream);
}

}  // namespace openreg::kernels
