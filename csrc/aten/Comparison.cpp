// PyTorch hook: TORCH_LIBRARY_IMPL(aten, PrivateUse1) for the comparisons
// eq, ne, lt, le, gt, ge (Tensor and Scalar overloads; what `x > 0` and
// attention masks call). Native because `import torch` registers Python
// Meta kernels (torch/_meta_registrations.py) over their C++ ones, and the
// first call of such a reference imports torch._dynamo (about 1 s once per
// process, on every rank); ATen's structured meta functions run on the host
// instead, as in Pointwise.cpp (Structured.h).
// Tests: tests/ops/test_opinfo.py, tests/ops/test_native_kernels.py.
#include <ATen/ops/eq_cpu_dispatch.h>
#include <ATen/ops/eq_meta.h>
#include <ATen/ops/ge_cpu_dispatch.h>
#include <ATen/ops/ge_meta.h>
#include <ATen/ops/gt_cpu_dispatch.h>
#include <ATen/ops/gt_meta.h>
#include <ATen/ops/le_cpu_dispatch.h>
#include <ATen/ops/le_meta.h>
#include <ATen/ops/lt_cpu_dispatch.h>
#include <ATen/ops/lt_meta.h>
#include <ATen/ops/ne_cpu_dispatch.h>
#include <ATen/ops/ne_meta.h>
#include <torch/library.h>

#include "Structured.h"

namespace openreg::kernels {
namespace {

using at::Scalar;
using at::Tensor;

#define OPENREG_COMPARISON(op)                                                               \
  Tensor op##_tensor(const Tensor& self, const Tensor& other) {                              \
    return structured<at::meta::structured_##op##_Tensor>(                                   \
        #op, [](Tensor& out, auto&... a) { at::cpu::op##_out(out, a...); }, self, other);    \
  }                                                                                          \
  Tensor op##_scalar(const Tensor& self, const Scalar& other) {                              \
    return structured<at::meta::structured_##op##_Scalar>(                                   \
        #op, [](Tensor& out, auto&... a) { at::cpu::op##_out(out, a...); }, self, other);    \
  }
OPENREG_COMPARISON(eq)
OPENREG_COMPARISON(ne)
OPENREG_COMPARISON(lt)
OPENREG_COMPARISON(le)
OPENREG_COMPARISON(gt)
OPENREG_COMPARISON(ge)
#undef OPENREG_COMPARISON

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("eq.Tensor", TORCH_FN(eq_tensor));
  m.impl("eq.Scalar", TORCH_FN(eq_scalar));
  m.impl("ne.Tensor", TORCH_FN(ne_tensor));
  m.impl("ne.Scalar", TORCH_FN(ne_scalar));
  m.impl("lt.Tensor", TORCH_FN(lt_tensor));
  m.impl("lt.Scalar", TORCH_FN(lt_scalar));
  m.impl("le.Tensor", TORCH_FN(le_tensor));
  m.impl("le.Scalar", TORCH_FN(le_scalar));
  m.impl("gt.Tensor", TORCH_FN(gt_tensor));
  m.impl("gt.Scalar", TORCH_FN(gt_scalar));
  m.impl("ge.Tensor", TORCH_FN(ge_tensor));
  m.impl("ge.Scalar", TORCH_FN(ge_scalar));
}

}  // namespace openreg::kernels
