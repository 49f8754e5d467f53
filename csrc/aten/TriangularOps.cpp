// PyTorch hook: TORCH_LIBRARY_IMPL(aten, PrivateUse1) for tril and triu
// (functional, in place and out=), structured kernels over ATen's own meta
// functions (Structured.h). Native because their Meta kernels are Python
// references whose first call imports torch._dynamo (~1.5 s once per
// process); an attention mask's torch.ones(t, t).tril() is common.
// Tests: tests/ops/test_opinfo.py, tests/ops/test_native_kernels.py.
#include <ATen/ops/tril_cpu_dispatch.h>
#include <ATen/ops/tril_meta.h>
#include <ATen/ops/triu_cpu_dispatch.h>
#include <ATen/ops/triu_meta.h>
#include <torch/library.h>

#include "Structured.h"

namespace openreg::kernels {
namespace {

using at::Tensor;

const auto trilCpu = [](Tensor& out, auto&... a) { at::cpu::tril_out(out, a...); };
const auto triuCpu = [](Tensor& out, auto&... a) { at::cpu::triu_out(out, a...); };

Tensor tril(const Tensor& self, int64_t diagonal) {
  return structured<at::meta::structured_tril>("tril", trilCpu, self, diagonal);
}
Tensor& tril_(Tensor& self, int64_t diagonal) {
  return structuredInplace<at::meta::structured_tril>("tril_", trilCpu, self, diagonal);
}
Tensor& trilOut(const Tensor& self, int64_t diagonal, Tensor& out) {
  return structuredOut<at::meta::structured_tril>("tril.out", trilCpu, out, self, diagonal);
}
Tensor triu(const Tensor& self, int64_t diagonal) {
  return structured<at::meta::structured_triu>("triu", triuCpu, self, diagonal);
}
Tensor& triu_(Tensor& self, int64_t diagonal) {
  return structuredInplace<at::meta::structured_triu>("triu_", triuCpu, self, diagonal);
}
Tensor& triuOut(const Tensor& self, int64_t diagonal, Tensor& out) {
  return structuredOut<at::meta::structured_triu>("triu.out", triuCpu, out, self, diagonal);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("tril", TORCH_FN(tril));
  m.impl("tril_", TORCH_FN(tril_));
  m.impl("tril.out", TORCH_FN(trilOut));
  m.impl("triu", TORCH_FN(triu));
  m.impl("triu_", TORCH_FN(triu_));
  m.impl("triu.out", TORCH_FN(triuOut));
}

}  // namespace openreg::kernels
