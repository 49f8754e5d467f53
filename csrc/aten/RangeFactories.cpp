// PyTorch hook: TORCH_LIBRARY_IMPL(aten, PrivateUse1) for arange.start_out
// and linspace.out, which torch.arange / torch.linspace (composite: empty,
// then the out= form) reach. Native because their Meta kernels are Python
// references whose first call imports torch._dynamo (0.5-2 s once per
// process, every rank of a job paying it at its first forward); CUDA has
// native kernels too. The size and its checks are computed on the host, as
// ATen's range kernels do, then the CPU kernel fills the kernel view on the
// current stream. Tests: tests/ops/test_opinfo.py, tests/ops/test_native_kernels.py.
#include <ATen/Dispatch.h>
#include <ATen/native/RangeUtils.h>
#include <ATen/ops/arange_cpu_dispatch.h>
#include <ATen/ops/linspace_cpu_dispatch.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Launch.h"

namespace openreg::kernels {
namespace {

using at::Tensor;

// ATen's out= rule for range factories: a result of another size is resized,
// with ATen's warning when it held elements.
void resizeRangeOut(Tensor& out, int64_t size) {
  if (out.numel() == size) return;
  if (out.numel() > 0)
    TORCH_WARN("The number of elements in the out tensor of shape ", out.sizes(), " is ",
               out.numel(), " which does not match the computed number of elements ", size,
               ". Note that this may occur as a result of rounding error. The out tensor will be "
               "resized to a tensor of shape (", size, ",).");
  out.resize_({size});
}

Tensor& arangeOut(const at::Scalar& start, const at::Scalar& end, const at::Scalar& step, Tensor& out) {
  checkWrittenOnDevice(out, "arange");
  c10::DeviceGuard guard(out.device());
  int64_t size = 0;
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "arange_cpu", [&] {
    size = at::native::compute_arange_size<scalar_t>(start, end, step);
  });
  resizeRangeOut(out, size);
  if (size == 0) return out;
  launchOnCurrentStream(
      out, [view = kernelView(out), start, end, step]() mutable { at::cpu::arange_out(view, start, end, step); },
      {}, {out});
  return out;
}

Tensor& linspaceOut(const at::Scalar& start, const at::Scalar& end, int64_t steps, Tensor& out) {
  TORCH_CHECK(steps >= 0, "number of steps must be non-negative");
  checkWrittenOnDevice(out, "linspace");
  c10::DeviceGuard guard(out.device());
  AT_DISPATCH_ALL_TYPES_AND_COMPLEX_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "linspace_cpu",
                                         [] {});
  if (out.numel() != steps) out.resize_({steps});
  if (steps == 0) return out;
  launchOnCurrentStream(
      out, [view = kernelView(out), start, end, steps]() mutable { at::cpu::linspace_out(view, start, end, steps); },
      {}, {out});
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("arange.start_out", TORCH_FN(arangeOut));
  m.impl("linspace.out", TORCH_FN(linspaceOut));
}

}  // namespace openreg::kernels
