// The kernel launch path shared by every openreg operator.
//
// An openreg kernel is a host function queued on the current stream of its
// device. Kernels never see device pointers: `kernelView` gives a CPU tensor
// over the same bytes through the kernel-visible mapping, so a kernel body is
// ordinary CPU ATen code. Each launch declares the tensors it reads and
// writes, which the race checker (OPENREG_SANITIZER=1) compares across streams.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>

#include "../runtime/driver/Driver.h"

#include <functional>
#include <vector>

namespace openreg {

// A tensor over `storage` with `like`'s dtype, sizes, strides, offset and
// conj/neg bits, dispatched as `key`: the one way openreg builds aliases.
at::Tensor tensorOver(c10::Storage storage, const at::Tensor& like, c10::DispatchKey key);

// A CPU tensor with `like`'s metadata over `nbytes` at `data` (not owned).
at::Tensor hostTensorAt(void* data, size_t nbytes, const at::Tensor& like);

// For an openreg tensor: a CPU tensor aliasing its memory, only valid inside a
// kernel (or after a synchronisation): device memory is not ordered with the
// host otherwise. For a host tensor (a CPU scalar operand): its value now, in
// a copy the kernel owns.
at::Tensor kernelView(const at::Tensor& t);
std::vector<at::Tensor> kernelViews(at::TensorList tensors);

// A device tensor for a kernel output, allocated straight from the caching
// allocator on options' device (empty strides: contiguous).
at::Tensor allocateOutput(at::IntArrayRef sizes, at::IntArrayRef strides,
                          const at::TensorOptions& options);

// The device memory `reads` and `writes` span, as the race checker takes it.
std::vector<orAccess> accessesOf(const std::vector<at::Tensor>& reads,
                                 const std::vector<at::Tensor>& writes);

// Queue `kernel` on `stream`. Raises if an earlier kernel on it failed, or
// (with the race checker on) if it races with another stream's work.
void launchKernel(const c10::Stream& stream, std::function<void()> kernel,
                  const std::vector<at::Tensor>& reads = {},
                  const std::vector<at::Tensor>& writes = {});

// The same for a kernel made at each launch (a captured kernel whose every
// replay makes its own: orLaunchPreparedKernel).
void launchPreparedKernel(const c10::Stream& stream, orPrepare prepare,
                          const std::vector<at::Tensor>& reads = {},
                          const std::vector<at::Tensor>& writes = {});

// The host itself reads `reads` and writes `writes` in `stream`'s order
// (after waiting for it): the race checker checks them as a kernel on it.
void checkHostAccess(const c10::Stream& stream, const std::vector<at::Tensor>& reads,
                     const std::vector<at::Tensor>& writes);

// Queue on the current stream of `t`'s device.
void launchOnCurrentStream(const at::Tensor& t, std::function<void()> kernel,
                           const std::vector<at::Tensor>& reads = {},
                           const std::vector<at::Tensor>& writes = {});

// True if the tensor lives on an openreg device.
inline bool isOpenReg(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

// A tensor a kernel writes must be device memory: a host tensor (even a 0-dim
// one, which passes as a scalar operand) would reach the kernel as a copy.
inline void checkWrittenOnDevice(const at::Tensor& t, const char* op) {
  TORCH_CHECK(!t.defined() || isOpenReg(t),
              "Expected all tensors to be on the same device, but found at least two devices, "
              "openreg and ", t.device(), "! (a tensor ", op, " writes)");
}

// What a kernel holds for a tensor argument (see kernelView).
inline at::Tensor kernelArg(const at::Tensor& t) { return kernelView(t); }

}  // namespace openreg
