// The arithmetic ops shared by the pointwise kernels (Pointwise.cpp) and the
// optimizers' foreach kernels (Foreach.cpp): each op's structured meta (host
// side) and its CPU implementation as a callable, op_cpu(out, args...), that a
// kernel queues on the stream.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/add_cpu_dispatch.h>
#include <ATen/ops/add_meta.h>
#include <ATen/ops/addcdiv_cpu_dispatch.h>
#include <ATen/ops/addcdiv_meta.h>
#include <ATen/ops/addcmul_cpu_dispatch.h>
#include <ATen/ops/addcmul_meta.h>
#include <ATen/ops/div_cpu_dispatch.h>
#include <ATen/ops/div_meta.h>
#include <ATen/ops/lerp_cpu_dispatch.h>
#include <ATen/ops/lerp_meta.h>
#include <ATen/ops/mul_cpu_dispatch.h>
#include <ATen/ops/mul_meta.h>
#include <ATen/ops/sub_cpu_dispatch.h>
#include <ATen/ops/sub_meta.h>

namespace openreg::kernels {

// at::cpu::op_out as a callable: op_cpu(out, args...).
#define OPENREG_CPU_OUT(op) \
  inline constexpr auto op##_cpu = [](at::Tensor& out, auto&... a) { at::cpu::op##_out(out, a...); };
OPENREG_CPU_OUT(add)
OPENREG_CPU_OUT(sub)
OPENREG_CPU_OUT(mul)
OPENREG_CPU_OUT(div)
OPENREG_CPU_OUT(lerp)
OPENREG_CPU_OUT(addcmul)
OPENREG_CPU_OUT(addcdiv)

using AddMeta = at::meta::structured_add_Tensor;
using SubMeta = at::meta::structured_sub_Tensor;
using MulMeta = at::meta::structured_mul_Tensor;
using DivMeta = at::meta::structured_div_Tensor;
using LerpMeta = at::meta::structured_lerp_Scalar;
using AddcmulMeta = at::meta::structured_addcmul;
using AddcdivMeta = at::meta::structured_addcdiv;

}  // namespace openreg::kernels
