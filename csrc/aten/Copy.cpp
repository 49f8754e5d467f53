// Copies between host and device and between devices (aten::_copy_from, which
// at::native::copy_ calls for PrivateUse1). CUDA's rules:
//  - device -> device: asynchronous on the current stream, never blocks the host;
//  - host <-> device with non_blocking=True and pinned host memory: asynchronous;
//  - otherwise host <-> device is synchronous (ordered after queued work).
// Across devices the copy runs on the destination's current stream after it
// waits for the source's current stream, and the source stream then waits for
// the copy, as CUDA's peer copies do.
#include <ATen/MemoryOverlap.h>
#include <ATen/ops/copy.h>
#include <ATen/ops/empty_like.h>
#include <c10/core/DeviceGuard.h>

#include "../runtime/OpenRegException.h"
#include "../runtime/OpenRegFunctions.h"
#include "../runtime/OpenRegKinetoPlugin.h"
#include "../runtime/OpenRegHostAllocator.h"
#include "../runtime/OpenRegStream.h"

#include "Kernels.h"
#include "Launch.h"

namespace openreg::kernels {
namespace {

void streamWaitsForStream(const c10::Stream& waiter, const c10::Stream& producer) {
  orEvent event = nullptr;
  OPENREG_CHECK(orEventCreate(&event, false));
  OPENREG_CHECK(orEventRecord(event, rawStream(producer)));
  OPENREG_CHECK(orStreamWaitEvent(rawStream(waiter), event));
  orEventDestroy(event);  // the wait holds its own reference to the record
}

void copyDeviceToDevice(const at::Tensor& src, const at::Tensor& dst) {
  c10::Stream dst_stream = getCurrentStream(dst.device().index());
  at::Tensor src_view = kernelView(src);
  at::Tensor dst_view = kernelView(dst);
  auto kernel = [src_view, dst_view]() mutable { dst_view.copy_(src_view); };
  if (src.device() == dst.device()) {
    launchKernel(dst_stream, std::move(kernel), {src}, {dst});
    return;
  }
  c10::Stream src_stream = getCurrentStream(src.device().index());
  streamWaitsForStream(dst_stream, src_stream);
  launchKernel(dst_stream, std::move(kernel), {src}, {dst});
  streamWaitsForStream(src_stream, dst_stream);
}

bool isPinned(const at::Tensor& t) { return orIsPinned(t.storage().data()); }

void recordPinned(const at::Tensor& t, const c10::Stream& stream) {
  getHostAllocator()->record_event(t.storage().mutable_data(), nullptr, stream);
}

// A non-owning view of a host tensor for a copy kernel: the kernel never
// holds (or drops) the user's tensor, which could need the GIL on the worker
// thread while the host thread, holding it, waits (a blocking copy of
// pageable memory runs there when the stream is busy). For a pinned tensor's
// asynchronous copy, the caller records the block on the copy's stream
// *after* launching it (recordPinned), so the host allocator keeps it until
// the copy has run. Read-only sources are not materialised (a copy-on-write
// tensor stays shared).
at::Tensor hostView(const at::Tensor& t, bool written) {
  if (t.layout() != c10::kStrided || !t.has_storage()) return t;
  void* data = written ? t.storage().mutable_data() : const_cast<void*>(t.storage().data());
  return hostTensorAt(data, t.storage().nbytes(), t);
}

// Runs `body` in stream order and returns once it is done. When the stream is
// idle the host thread does the copy itself (no worker round trip).
void runSynchronously(const c10::Stream& stream, std::function<void()> body,
                      const at::Tensor& read, const at::Tensor& written) {
  checkHostAccess(stream, {read}, {written});
  if (runOnHostIfIdle(stream, [&] { runAsStreamWork(stream, body); })) return;
  launchKernel(stream, std::move(body));
  synchronizeStream(stream);
}

void copyHostToDevice(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  c10::Stream stream = getCurrentStream(dst.device().index());
  at::Tensor dst_view = kernelView(dst);
  at::Tensor src_view = hostView(src, /*written=*/false);
  if (non_blocking && isPinned(src)) {
    launchKernel(stream, [src_view, dst_view]() mutable { dst_view.copy_(src_view); }, {}, {dst});
    recordPinned(src, stream);
    return;
  }
  // As CUDA: a non_blocking copy from pageable memory waits, unreported.
  if (!non_blocking) warn_or_error_on_sync("a blocking copy");
  runSynchronously(stream, [&src_view, &dst_view] { dst_view.copy_(src_view); }, src, dst);
}

void copyDeviceToHost(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  c10::Stream stream = getCurrentStream(src.device().index());
  at::Tensor src_view = kernelView(src);
  at::Tensor dst_view = hostView(dst, /*written=*/true);
  if (non_blocking && isPinned(dst)) {
    launchKernel(stream, [src_view, dst_view]() mutable { dst_view.copy_(src_view); }, {src}, {});
    recordPinned(dst, stream);
    return;
  }
  if (!non_blocking) warn_or_error_on_sync("a blocking copy");
  runSynchronously(stream, [&src_view, &dst_view] { dst_view.copy_(src_view); }, src, dst);
}

}  // namespace

at::Tensor _copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(self.defined() && dst.defined(), "copy_: tensors must be defined");
  if (dst.numel() == 0) return dst;
  TORCH_CHECK(self.is_cpu() || isOpenReg(self), "copy_: unsupported source device ", self.device());
  TORCH_CHECK(dst.is_cpu() || isOpenReg(dst), "copy_: unsupported destination device ", dst.device());
  // copy_ hands PrivateUse1 copies here before building its TensorIterator,
  // whose overlap checks the kernel cannot make (its views of device memory
  // are separate storages): make them here, with ATen's words.
  at::assert_no_internal_overlap(dst);
  at::assert_no_partial_overlap(dst, self);
  if (isOpenReg(self) && isOpenReg(dst)) {
    copyDeviceToDevice(self, dst);
  } else if (isOpenReg(dst)) {
    copyHostToDevice(self, dst, non_blocking);
  } else {
    copyDeviceToHost(self, dst, non_blocking);
  }
  return dst;
}

at::Tensor _copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return _copy_from(self, dst, false);
}

}  // namespace openreg::kernels
