// Native matrix products: mm, addmm, bmm, baddbmm (matmul and linear
// decompose into these). Structured meta on the host, the CPU BLAS on the stream.
#include <ATen/ops/addmm_cpu_dispatch.h>
#include <ATen/ops/addmm_meta.h>
#include <ATen/ops/baddbmm_cpu_dispatch.h>
#include <ATen/ops/baddbmm_meta.h>
#include <ATen/ops/bmm_cpu_dispatch.h>
#include <ATen/ops/bmm_meta.h>
#include <ATen/ops/mm_cpu_dispatch.h>
#include <ATen/ops/mm_meta.h>

#include "NativeKernels.h"
#include "Structured.h"

namespace openreg::kernels {

using at::Scalar;
using at::Tensor;

Tensor mm(const Tensor& self, const Tensor& mat2) {
  // mm's meta leaves this check to the CPU kernel (addmm_impl_cpu_), which
  // runs on the stream; raised there, it would fail the stream.
  TORCH_CHECK(self.dtype() == mat2.dtype(), "expected m1 and m2 to have the same dtype, but got: ",
              self.dtype(), " != ", mat2.dtype());
  return structured<at::meta::structured_mm>(
      "mm", [](Tensor& out, auto&... a) { at::cpu::mm_out(out, a...); }, self, mat2);
}

Tensor bmm(const Tensor& self, const Tensor& mat2) {
  return structured<at::meta::structured_bmm>(
      "bmm", [](Tensor& out, auto&... a) { at::cpu::bmm_out(out, a...); }, self, mat2);
}

Tensor addmm(const Tensor& self, const Tensor& mat1, const Tensor& mat2, const Scalar& beta,
             const Scalar& alpha) {
  return structured<at::meta::structured_addmm>(
      "addmm", [](Tensor& out, auto&... a) { at::cpu::addmm_out(out, a...); }, self, mat1, mat2,
      beta, alpha);
}

Tensor baddbmm(const Tensor& self, const Tensor& batch1, const Tensor& batch2, const Scalar& beta,
               const Scalar& alpha) {
  return structured<at::meta::structured_baddbmm>(
      "baddbmm", [](Tensor& out, auto&... a) { at::cpu::baddbmm_out(out, a...); }, self, batch1,
      batch2, beta, alpha);
}

}  // namespace openreg::kernels
