// PyTorch hook: TORCH_LIBRARY_IMPL(aten, PrivateUse1) for the ops below.
// Native kernels for the cumulative operators whose CPU kernels have no Meta
// counterpart, which the generic fallback would otherwise run synchronously
// on the host (and a graph capture could not record): cummax and cummin
// (through the helpers they call with outputs already sized) and
// logcumsumexp. Each queues its CPU kernel on the current stream, as CUDA
// queues its scan kernels; a dtype the CPU kernel rejects raises at the call.
// And cumsum, a structured kernel over ATen's meta function (Structured.h):
// its Meta kernel is a Python reference whose first call imports
// torch._dynamo (~1.2 s once per process).
// Tests: tests/runtime/test_graphs.py (captured), tests/ops/test_opinfo.py.
#include <ATen/ATen.h>
#include <ATen/ops/cumsum_cpu_dispatch.h>
#include <ATen/ops/cumsum_meta.h>
#include <torch/library.h>

#include <array>

#include "Launch.h"
#include "Structured.h"

namespace openreg::kernels {
namespace {

using at::Tensor;

using Helper = void (*)(const Tensor&, Tensor&, Tensor&, int64_t);

// _cummax_helper / _cummin_helper(self, values, indices, dim) -> ()
template <Helper cpuHelper>
void cumulativeExtremum(const char* name, const Tensor& self, Tensor& values, Tensor& indices,
                        int64_t dim) {
  c10::Device device = opDevice(name, self, values, indices);
  c10::DeviceGuard guard(device);
  checkWrittenOnDevice(values, name);
  checkWrittenOnDevice(indices, name);
  dim = at::maybe_wrap_dim(dim, self.dim());  // the CPU kernel's IndexError, at the call
  // The probe sizes its own outputs: the helper writes them without resizing.
  checkDispatch(
      std::array<Tensor, 0>{},
      [](std::array<Tensor, 0>&, const Tensor& s, int64_t d) {
        Tensor v = at::empty_like(s), i = at::empty_like(s, at::kLong);
        cpuHelper(s, v, i, d);
      },
      self, dim);
  launchOnCurrentStream(
      values,
      [s = kernelView(self), v = kernelView(values), i = kernelView(indices), dim]() mutable {
        cpuHelper(s, v, i, dim);
      },
      {self}, {values, indices});
}

void cummaxHelper(const Tensor& self, Tensor& values, Tensor& indices, int64_t dim) {
  cumulativeExtremum<&at::_cummax_helper>("_cummax_helper", self, values, indices, dim);
}

void cumminHelper(const Tensor& self, Tensor& values, Tensor& indices, int64_t dim) {
  cumulativeExtremum<&at::_cummin_helper>("_cummin_helper", self, values, indices, dim);
}

// _logcumsumexp(self, dim): contiguous, as the CPU's result.
Tensor logcumsumexp(const Tensor& self, int64_t dim) {
  c10::Device device = opDevice("_logcumsumexp", self);
  c10::DeviceGuard guard(device);
  dim = at::maybe_wrap_dim(dim, self.dim());  // the CPU kernel's IndexError, at the call
  Tensor out = allocateOutput(self.sizes(), {}, self.options());
  checkDispatch(
      std::array<Tensor, 1>{out},
      [](std::array<Tensor, 1>& o, const Tensor& s, int64_t d) { at::_logcumsumexp_out(o[0], s, d); },
      self, dim);
  launchOnCurrentStream(
      out, [o = kernelView(out), s = kernelView(self), dim]() mutable { at::_logcumsumexp_out(o, s, dim); },
      {self}, {out});
  return out;
}

}  // namespace

const auto cumsumCpu = [](Tensor& out, auto&... a) { at::cpu::cumsum_out(out, a...); };

Tensor cumsum(const Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype) {
  return structured<at::meta::structured_cumsum>("cumsum", cumsumCpu, self, dim, dtype);
}
Tensor& cumsum_(Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype) {
  return structuredInplace<at::meta::structured_cumsum>("cumsum_", cumsumCpu, self, dim, dtype);
}
Tensor& cumsumOut(const Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype, Tensor& out) {
  return structuredOut<at::meta::structured_cumsum>("cumsum.out", cumsumCpu, out, self, dim, dtype);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("cumsum", TORCH_FN(cumsum));
  m.impl("cumsum_", TORCH_FN(cumsum_));
  m.impl("cumsum.out", TORCH_FN(cumsumOut));
  m.impl("_cummax_helper", TORCH_FN(cummaxHelper));
  m.impl("_cummin_helper", TORCH_FN(cumminHelper));
  m.impl("_logcumsumexp", TORCH_FN(logcumsumexp));
}

}  // namespace openreg::kernels
