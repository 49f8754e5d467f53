// C++ Meta kernels for the generic fallback: MetaFunctions.h.
#include "MetaFunctions.h"

#include <ATen/Dispatch.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/OpMathType.h>
#include <ATen/TensorIterator.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/core/Reduction.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/op_registration/infer_schema.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/_log_softmax_meta_dispatch.h>
#include <ATen/ops/_softmax_meta_dispatch.h>
#include <ATen/ops/all_meta_dispatch.h>
#include <ATen/ops/amax_meta_dispatch.h>
#include <ATen/ops/any_meta_dispatch.h>
#include <ATen/ops/argmax_meta_dispatch.h>
#include <ATen/ops/atan2_meta_dispatch.h>
#include <ATen/ops/bitwise_and_meta_dispatch.h>
#include <ATen/ops/bitwise_not_meta_dispatch.h>
#include <ATen/ops/bitwise_or_meta_dispatch.h>
#include <ATen/ops/bitwise_xor_meta_dispatch.h>
#include <ATen/ops/clamp_max_meta_dispatch.h>
#include <ATen/ops/clamp_min_meta_dispatch.h>
#include <ATen/ops/cumprod_meta_dispatch.h>
#include <ATen/ops/div_meta_dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/erfinv_meta_dispatch.h>
#include <ATen/ops/exp_meta_dispatch.h>
#include <ATen/ops/eye_meta_dispatch.h>
#include <ATen/ops/floor_meta_dispatch.h>
#include <ATen/ops/fmod_meta_dispatch.h>
#include <ATen/ops/gather_meta_dispatch.h>
#include <ATen/ops/hypot_meta_dispatch.h>
#include <ATen/ops/index_add_meta_dispatch.h>
#include <ATen/ops/log_meta_dispatch.h>
#include <ATen/ops/max_pool2d_with_indices_backward_meta_dispatch.h>
#include <ATen/ops/max_pool2d_with_indices_meta_dispatch.h>
#include <ATen/ops/maximum_meta_dispatch.h>
#include <ATen/ops/mean_meta_dispatch.h>
#include <ATen/ops/minimum_meta_dispatch.h>
#include <ATen/ops/mse_loss_meta_dispatch.h>
#include <ATen/ops/nll_loss_forward_meta_dispatch.h>
#include <ATen/ops/normal_meta_dispatch.h>
#include <ATen/ops/pow_meta_dispatch.h>
#include <ATen/ops/prod_meta_dispatch.h>
#include <ATen/ops/remainder_meta_dispatch.h>
#include <ATen/ops/round_meta_dispatch.h>
#include <ATen/ops/scatter_add_meta_dispatch.h>
#include <ATen/ops/scatter_meta_dispatch.h>
#include <ATen/ops/sgn_meta_dispatch.h>
#include <ATen/ops/sign_meta_dispatch.h>
#include <ATen/ops/smooth_l1_loss_meta_dispatch.h>
#include <ATen/ops/softplus_meta_dispatch.h>
#include <ATen/ops/sort_meta_dispatch.h>
#include <ATen/ops/sum_meta_dispatch.h>
#include <ATen/ops/topk_meta_dispatch.h>
#include <ATen/ops/_linalg_solve_ex_meta_dispatch.h>
#include <ATen/ops/addmv_meta_dispatch.h>
#include <ATen/ops/adaptive_max_pool2d_meta_dispatch.h>
#include <ATen/ops/heaviside_meta_dispatch.h>
#include <ATen/ops/leaky_relu_backward_meta_dispatch.h>
#include <ATen/ops/linalg_qr_meta_dispatch.h>
#include <ATen/ops/renorm_meta_dispatch.h>
#include <ATen/ops/reflection_pad3d_meta_dispatch.h>
#include <ATen/ops/replication_pad2d_meta_dispatch.h>
#include <ATen/ops/replication_pad3d_meta_dispatch.h>
#include <ATen/ops/acos_meta_dispatch.h>
#include <ATen/ops/acosh_meta_dispatch.h>
#include <ATen/ops/asin_meta_dispatch.h>
#include <ATen/ops/asinh_meta_dispatch.h>
#include <ATen/ops/atan_meta_dispatch.h>
#include <ATen/ops/atanh_meta_dispatch.h>
#include <ATen/ops/ceil_meta_dispatch.h>
#include <ATen/ops/clamp_meta_dispatch.h>
#include <ATen/ops/copysign_meta_dispatch.h>
#include <ATen/ops/cos_meta_dispatch.h>
#include <ATen/ops/cosh_meta_dispatch.h>
#include <ATen/ops/digamma_meta_dispatch.h>
#include <ATen/ops/elu_meta_dispatch.h>
#include <ATen/ops/erf_meta_dispatch.h>
#include <ATen/ops/erfc_meta_dispatch.h>
#include <ATen/ops/exp2_meta_dispatch.h>
#include <ATen/ops/expm1_meta_dispatch.h>
#include <ATen/ops/fmax_meta_dispatch.h>
#include <ATen/ops/fmin_meta_dispatch.h>
#include <ATen/ops/frac_meta_dispatch.h>
#include <ATen/ops/gcd_meta_dispatch.h>
#include <ATen/ops/glu_meta_dispatch.h>
#include <ATen/ops/hardsigmoid_meta_dispatch.h>
#include <ATen/ops/i0_meta_dispatch.h>
#include <ATen/ops/igamma_meta_dispatch.h>
#include <ATen/ops/igammac_meta_dispatch.h>
#include <ATen/ops/index_meta_dispatch.h>
#include <ATen/ops/isin_meta_dispatch.h>
#include <ATen/ops/isneginf_meta_dispatch.h>
#include <ATen/ops/isposinf_meta_dispatch.h>
#include <ATen/ops/lcm_meta_dispatch.h>
#include <ATen/ops/leaky_relu_meta_dispatch.h>
#include <ATen/ops/lgamma_meta_dispatch.h>
#include <ATen/ops/linalg_cross_meta_dispatch.h>
#include <ATen/ops/log10_meta_dispatch.h>
#include <ATen/ops/log1p_meta_dispatch.h>
#include <ATen/ops/log2_meta_dispatch.h>
#include <ATen/ops/logaddexp_meta_dispatch.h>
#include <ATen/ops/logaddexp2_meta_dispatch.h>
#include <ATen/ops/mish_meta_dispatch.h>
#include <ATen/ops/neg_meta_dispatch.h>
#include <ATen/ops/nextafter_meta_dispatch.h>
#include <ATen/ops/norm_meta_dispatch.h>
#include <ATen/ops/reciprocal_meta_dispatch.h>
#include <ATen/ops/rsqrt_meta_dispatch.h>
#include <ATen/ops/scatter_reduce_meta_dispatch.h>
#include <ATen/ops/sigmoid_meta_dispatch.h>
#include <ATen/ops/signbit_meta_dispatch.h>
#include <ATen/ops/silu_meta_dispatch.h>
#include <ATen/ops/sin_meta_dispatch.h>
#include <ATen/ops/sinc_meta_dispatch.h>
#include <ATen/ops/sinh_meta_dispatch.h>
#include <ATen/ops/special_bessel_j0_meta_dispatch.h>
#include <ATen/ops/special_bessel_j1_meta_dispatch.h>
#include <ATen/ops/special_bessel_y0_meta_dispatch.h>
#include <ATen/ops/special_bessel_y1_meta_dispatch.h>
#include <ATen/ops/special_entr_meta_dispatch.h>
#include <ATen/ops/special_erfcx_meta_dispatch.h>
#include <ATen/ops/special_i0e_meta_dispatch.h>
#include <ATen/ops/special_i1_meta_dispatch.h>
#include <ATen/ops/special_i1e_meta_dispatch.h>
#include <ATen/ops/special_log_ndtr_meta_dispatch.h>
#include <ATen/ops/special_modified_bessel_i0_meta_dispatch.h>
#include <ATen/ops/special_modified_bessel_i1_meta_dispatch.h>
#include <ATen/ops/special_modified_bessel_k0_meta_dispatch.h>
#include <ATen/ops/special_modified_bessel_k1_meta_dispatch.h>
#include <ATen/ops/special_ndtri_meta_dispatch.h>
#include <ATen/ops/special_xlog1py_meta_dispatch.h>
#include <ATen/ops/special_zeta_meta_dispatch.h>
#include <ATen/ops/sqrt_meta_dispatch.h>
#include <ATen/ops/tan_meta_dispatch.h>
#include <ATen/ops/tanh_meta_dispatch.h>
#include <ATen/ops/trunc_meta_dispatch.h>
#include <ATen/ops/upsample_bilinear2d_meta_dispatch.h>
#include <ATen/ops/upsample_nearest2d_meta_dispatch.h>
#include <ATen/ops/xlogy_meta_dispatch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "NativeKernels.h"

namespace openreg::kernels {
namespace {

// masked_fill_'s Meta kernel, which libtorch does not export as at::meta:
// the broadcast its CPU kernel checks (masked_fill_impl_cpu's iterator: the
// mask broadcasts to self, which is not resized) and its conversion of a
// Scalar value to self's dtype ("value cannot be converted to type int8_t
// without overflow"), with the same messages. The mask's dtype and a tensor
// value's rank are checked before the fallback (FallbackChecks.cpp).
void maskedFillBroadcast(at::Tensor& self, const at::Tensor& mask) {
  at::TensorIteratorConfig()
      .set_check_mem_overlap(false)
      .check_all_same_dtype(false)
      .resize_outputs(false)
      .add_output(self)
      .add_const_input(mask)
      .build();
}
at::Tensor& maskedFillMeta(at::Tensor& self, const at::Tensor& mask, const at::Scalar& value) {
  maskedFillBroadcast(self, mask);
  // The CPU kernel's dtypes and its dispatch error ("masked_fill" not implemented for 'UInt16').
  AT_DISPATCH_ALL_TYPES_AND_COMPLEX_AND4(at::kBool, at::kHalf, at::kBFloat16, at::kComplexHalf,
                                         self.scalar_type(), "masked_fill",
                                         [&] { (void)value.to<scalar_t>(); });
  return self;
}
at::Tensor& maskedFillTensorMeta(at::Tensor& self, const at::Tensor& mask,
                                 const at::Tensor& value) {
  // A host scalar (a CPU 0-dim tensor) is read as the CPU kernel reads it. A
  // device one is read as CUDA's kernel reads it, with value.item(), which
  // waits for the device: raising here sends the call down the fallback's
  // synchronous path, so that a value that does not fit self's dtype raises
  // at the call instead of failing the stream.
  // (Its rank, 0, is checked before the fallback.)
  TORCH_CHECK(value.device().is_cpu(), "masked_fill_ reads a device value on the host");
  return maskedFillMeta(self, mask, value.item());
}

// abs.out's (no at::meta either), as its CPU kernel sizes and checks `out`
// (unary_op_impl_with_complex_to_float_out): a complex input into a real
// `out` gives its magnitudes, the real dtype cast-checked; otherwise a
// unary TensorIterator op.
at::Tensor& absOutMeta(const at::Tensor& self, at::Tensor& out) {
  if (self.is_complex() && !out.is_complex()) {
    const auto real = c10::toRealValueType(self.scalar_type());
    TORCH_CHECK(at::canCast(real, out.scalar_type()), "result type ", real,
                " can't be cast to the desired output type ", out.scalar_type());
    at::native::resize_output(out, self.sizes());
    return out;
  }
  at::TensorIterator::unary_op(out, self);
  return out;
}

// _softmax.out / _log_softmax.out: the CPU kernels refuse half_to_float,
// which their meta functions accept.
at::Tensor& softmaxOutMeta(const at::Tensor& self, int64_t dim, bool half_to_float,
                           at::Tensor& out) {
  checkNoHalfToFloat(half_to_float);
  return at::meta::_softmax_outf(self, dim, half_to_float, out);
}
at::Tensor& logSoftmaxOutMeta(const at::Tensor& self, int64_t dim, bool half_to_float,
                              at::Tensor& out) {
  checkNoHalfToFloat(half_to_float);
  return at::meta::_log_softmax_outf(self, dim, half_to_float, out);
}

// Convolution, batch norm and group norm: no at::meta function either, and
// their Python Meta kernels import sympy, batch norm's torch._dynamo too
// (through a torch._refs decomposition): a conv net's first step paid about
// 1.2 s more than on the CPU. These describe the results of calls that pass
// the CPU kernels' argument checks, as those kernels size them (the layout
// rules of FallbackOperatorRules.cpp apply after them, as after Python's);
// anything else they do not know to be valid throws, which sends the call
// down the fallback's synchronous path, where the CPU kernel raises its own
// error at the call (or computes a case these leave out).
void require(bool valid) {
  TORCH_CHECK(valid, "openreg: left to the CPU kernel");
}

// empty_like(t, Preserve) on Meta: ATen's rule, without the call (a Python
// Meta kernel holds empty_like too).
at::Tensor emptyPreserving(const at::Tensor& t) {
  if (t.is_non_overlapping_and_dense()) return at::empty_strided(t.sizes(), t.strides(), t.options());
  return at::empty_strided(t.sizes(), at::infer_dense_strides(t.sizes(), t.strides()), t.options());
}

bool floating(const at::Tensor& t) {
  return at::isFloatingType(t.scalar_type()) && !t.is_complex();
}

bool sameDtype(const at::Tensor& t, const at::Tensor& like) {
  return !t.defined() || t.scalar_type() == like.scalar_type();
}

bool channelVector(const at::Tensor& t, int64_t channels) {
  return !t.defined() || (t.dim() == 1 && t.numel() == channels);
}

// A convolution parameter of k entries, or one entry for every dimension
// (as _convolution expands it).
std::vector<int64_t> convParam(c10::SymIntArrayRef values, size_t k) {
  require(values.size() == k || values.size() == 1);
  std::vector<int64_t> out(k);
  for (size_t i = 0; i < k; ++i) out[i] = values[values.size() == 1 ? 0 : i].expect_int();
  return out;
}

// The result sizes of a valid convolution (check_shape_forward's checks).
std::vector<int64_t> convolutionOutputSizes(const at::Tensor& input, const at::Tensor& weight,
                                            const std::optional<at::Tensor>& bias,
                                            c10::SymIntArrayRef stride_, c10::SymIntArrayRef padding_,
                                            c10::SymIntArrayRef dilation_, bool transposed,
                                            c10::SymIntArrayRef output_padding_,
                                            const c10::SymInt& groups_) {
  const int64_t dim = input.dim();
  require(weight.dim() == dim && dim >= 3 && dim <= 5 && floating(input) &&
          sameDtype(weight, input) && input.layout() == at::kStrided &&
          weight.layout() == at::kStrided && input.size(1) > 0 && weight.numel() > 0);
  // A channels_last_3d operand: the CPU's result format depends on which of
  // its backends runs (mkldnn answers channels_last_3d, slow_conv3d
  // contiguous, chosen by sizes, dtype and thread count), so the CPU decides.
  for (const at::Tensor* t : {&input, &weight})
    require(dim != 5 || t->suggest_memory_format() != at::MemoryFormat::ChannelsLast3d);
  const size_t k = dim - 2;
  const auto stride = convParam(stride_, k), padding = convParam(padding_, k),
             dilation = convParam(dilation_, k), output_padding = convParam(output_padding_, k);
  const int64_t groups = groups_.expect_int();
  require(groups > 0 && weight.size(0) % groups == 0);
  const int64_t out_channels = transposed ? weight.size(1) * groups : weight.size(0);
  require(transposed ? input.size(1) == weight.size(0) : input.size(1) == weight.size(1) * groups);
  const at::Tensor b = bias.value_or(at::Tensor());
  require(sameDtype(b, input) && channelVector(b, out_channels));
  std::vector<int64_t> sizes{input.size(0), out_channels};
  for (size_t i = 0; i < k; ++i) {
    require(stride[i] > 0 && padding[i] >= 0 && dilation[i] > 0 && output_padding[i] >= 0);
    const int64_t in = input.size(i + 2), kernel = dilation[i] * (weight.size(i + 2) - 1) + 1;
    int64_t out;
    if (transposed) {
      require(output_padding[i] < stride[i] || output_padding[i] < dilation[i]);
      out = (in - 1) * stride[i] - 2 * padding[i] + kernel + output_padding[i];
    } else {
      require(output_padding[i] == 0 && in + 2 * padding[i] >= kernel);
      out = (in + 2 * padding[i] - kernel) / stride[i] + 1;
    }
    require(in > 0 && out > 0);
    sizes.push_back(out);
  }
  return sizes;
}

at::Tensor convolutionMeta(const at::Tensor& input, const at::Tensor& weight,
                           const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
                           c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation,
                           bool transposed, c10::SymIntArrayRef output_padding, c10::SymInt groups) {
  return at::empty(convolutionOutputSizes(input, weight, bias, stride, padding, dilation,
                                          transposed, output_padding, groups),
                   input.options());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolutionBackwardMeta(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::OptionalSymIntArrayRef bias_sizes, c10::SymIntArrayRef stride, c10::SymIntArrayRef padding,
    c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, std::array<bool, 3> output_mask) {
  const auto sizes = convolutionOutputSizes(input, weight, std::nullopt, stride, padding, dilation,
                                            transposed, output_padding, groups);
  require(grad_output.sizes() == at::IntArrayRef(sizes) && sameDtype(grad_output, input));
  if (bias_sizes)
    require(bias_sizes->size() == 1 && (*bias_sizes)[0].expect_int() == sizes[1]);
  at::Tensor grad_input, grad_weight, grad_bias;
  if (output_mask[0]) grad_input = at::empty(input.sizes(), input.options());
  if (output_mask[1]) grad_weight = at::empty(weight.sizes(), weight.options());
  if (output_mask[2]) grad_bias = at::empty({sizes[1]}, grad_output.options());
  return {grad_input, grad_weight, grad_bias};
}

// Reached only for calls batchNormAgreesWithMeta accepts (dtypes and channel
// counts checked); the saved statistics in the parameters' dtype.
std::tuple<at::Tensor, at::Tensor, at::Tensor> batchNormMeta(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var, bool training, double momentum, double eps) {
  require(floating(input) && input.dim() >= 2);
  const bool reduced = input.scalar_type() == at::kBFloat16 || input.scalar_type() == at::kHalf;
  const auto stats = input.options().dtype(reduced ? at::kFloat : input.scalar_type());
  const int64_t channels = input.size(1);
  return {at::empty(input.sizes(), input.options()), at::empty({channels}, stats),
          at::empty({channels}, stats)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batchNormBackwardMeta(
    const at::Tensor& grad_out, const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_invstd,
    bool train, double eps, std::array<bool, 3> output_mask) {
  require(floating(input) && input.dim() >= 2 && grad_out.sizes() == input.sizes() &&
          sameDtype(grad_out, input));
  const int64_t channels = input.size(1);
  const at::Tensor w = weight.value_or(at::Tensor());
  // Parameters and statistics of one dtype: the input's, or float32 for a
  // reduced-precision input (the CPU's mixed-dtype kernel).
  std::optional<at::ScalarType> params_dtype;
  for (const auto* t : {&weight, &running_mean, &running_var, &save_mean, &save_invstd}) {
    const at::Tensor p = t->value_or(at::Tensor());
    require(channelVector(p, channels));
    if (!p.defined()) continue;
    require(!params_dtype || *params_dtype == p.scalar_type());
    params_dtype = p.scalar_type();
  }
  const bool reduced = input.scalar_type() == at::kBFloat16 || input.scalar_type() == at::kHalf;
  require(!params_dtype || *params_dtype == input.scalar_type() ||
          (reduced && *params_dtype == at::kFloat));
  require(train ? save_mean && save_invstd && save_mean->defined() && save_invstd->defined()
                : running_mean && running_var && running_mean->defined() && running_var->defined());
  const auto params = w.defined() ? w.options() : input.options();
  at::Tensor grad_input, grad_weight, grad_bias;
  if (output_mask[0]) grad_input = at::empty(input.sizes(), input.options());
  if (output_mask[1]) grad_weight = at::empty({channels}, params);
  if (output_mask[2]) grad_bias = at::empty({channels}, params);
  return {grad_input, grad_weight, grad_bias};
}

// Group norm of (N, C, HxW) elements in `group` groups, parameters of the
// input's dtype (the CPU's mixed-dtype case is left to it).
void requireGroupNorm(const at::Tensor& input, const at::Tensor& weight, int64_t N, int64_t C,
                      int64_t HxW, int64_t group) {
  require(floating(input) && input.dim() >= 2 && input.size(0) == N && input.size(1) == C &&
          group > 0 && C % group == 0 && N * C * HxW == input.numel() &&
          input.is_contiguous(input.suggest_memory_format()) && sameDtype(weight, input) &&
          channelVector(weight, C));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> groupNormMeta(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, c10::SymInt N, c10::SymInt C, c10::SymInt HxW,
    int64_t group, double eps) {
  const int64_t n = N.expect_int(), c = C.expect_int();
  requireGroupNorm(input, weight.value_or(at::Tensor()), n, c, HxW.expect_int(), group);
  const at::Tensor b = bias.value_or(at::Tensor());
  require(sameDtype(b, input) && channelVector(b, c));
  return {at::empty(input.sizes(), input.options(), input.suggest_memory_format()),
          at::empty({n, group}, input.options()), at::empty({n, group}, input.options())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> groupNormBackwardMeta(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, const std::optional<at::Tensor>& weight, c10::SymInt N, c10::SymInt C,
    c10::SymInt HxW, int64_t group, std::array<bool, 3> output_mask) {
  const int64_t n = N.expect_int(), c = C.expect_int();
  const at::Tensor w = weight.value_or(at::Tensor());
  requireGroupNorm(input, w, n, c, HxW.expect_int(), group);
  require(grad_out.sizes() == input.sizes() && sameDtype(grad_out, input) &&
          grad_out.is_contiguous(input.suggest_memory_format()) && mean.numel() == n * group &&
          rstd.numel() == n * group && sameDtype(mean, input) && sameDtype(rstd, input) &&
          mean.is_contiguous() && rstd.is_contiguous() &&
          (w.defined() || (!output_mask[1] && !output_mask[2])));
  const auto params = w.defined() ? w.options() : input.options();
  at::Tensor grad_input, grad_weight, grad_bias;
  if (output_mask[0])
    grad_input = at::empty(input.sizes(), input.options(), input.suggest_memory_format());
  if (output_mask[1]) grad_weight = at::empty({c}, params);
  if (output_mask[2]) grad_bias = at::empty({c}, params);
  return {grad_input, grad_weight, grad_bias};
}

// Reductions, losses, pooling and reordering ops of common models (same
// contract as above).

// The result sizes of reducing `dim` (None or [] : all dimensions).
std::vector<int64_t> reducedSizes(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim) {
  const int64_t n = self.dim();
  const bool all = !dim || dim->empty();
  // A 0-dim tensor takes dimension 0 (or -1), as one of size 1.
  std::vector<bool> reduced(std::max<int64_t>(n, 1), all);
  if (!all) {
    for (int64_t d : *dim) {
      const int64_t wrapped = at::maybe_wrap_dim(d, n);
      require(!reduced[wrapped]);  // a repeated dimension: the CPU's error
      reduced[wrapped] = true;
    }
  }
  std::vector<int64_t> sizes;
  for (int64_t d = 0; d < n; ++d)
    if (!reduced[d]) sizes.push_back(self.size(d));
    else if (keepdim) sizes.push_back(1);
  return sizes;
}

at::Tensor stdVarMeta(const at::Tensor& self, at::OptionalIntArrayRef dim,
                      const std::optional<at::Scalar>& correction, bool keepdim) {
  require((floating(self) || self.is_complex()) && self.layout() == at::kStrided);
  return at::empty(reducedSizes(self, dim, keepdim),
                   self.options().dtype(c10::toRealValueType(self.scalar_type())));
}

std::tuple<at::Tensor, at::Tensor> stdVarMeanMeta(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                                  const std::optional<at::Scalar>& correction,
                                                  bool keepdim) {
  at::Tensor spread = stdVarMeta(self, dim, correction, keepdim);
  return {spread, at::empty(spread.sizes(), self.options())};
}

at::Tensor mseLossBackwardMeta(const at::Tensor& grad_output, const at::Tensor& self,
                               const at::Tensor& target, int64_t reduction) {
  require(floating(self) && sameDtype(target, self) && sameDtype(grad_output, self) &&
          target.sizes() == self.sizes() &&
          (reduction == at::Reduction::None ? grad_output.sizes() == self.sizes()
                                            : grad_output.dim() == 0));
  return at::empty(self.sizes(), self.options());
}

at::Tensor binaryCrossEntropyMeta(const at::Tensor& self, const at::Tensor& target,
                                  const std::optional<at::Tensor>& weight, int64_t reduction) {
  const at::Tensor w = weight.value_or(at::Tensor());
  require(floating(self) && sameDtype(target, self) && target.sizes() == self.sizes() &&
          sameDtype(w, self) && (!w.defined() || w.sizes() == self.sizes()) &&
          reduction >= at::Reduction::None && reduction <= at::Reduction::Sum);
  if (reduction == at::Reduction::None) return emptyPreserving(self);
  return at::empty({}, self.options());
}

std::tuple<at::Tensor, at::Tensor> logSigmoidForwardMeta(const at::Tensor& self) {
  require(floating(self));
  return {at::empty(self.sizes(), self.options()), at::empty(self.sizes(), self.options())};
}

at::Tensor adaptiveAvgPool2dMeta(const at::Tensor& self, c10::SymIntArrayRef output_size) {
  require(floating(self) && (self.dim() == 3 || self.dim() == 4) && output_size.size() == 2);
  for (int64_t d = self.dim() - 3; d < self.dim(); ++d) require(self.size(d) > 0);
  const int64_t oh = output_size[0].expect_int(), ow = output_size[1].expect_int();
  require(oh > 0 && ow > 0);
  if (self.dim() == 3) return at::empty({self.size(0), oh, ow}, self.options());
  return at::empty({self.size(0), self.size(1), oh, ow}, self.options(),
                   self.suggest_memory_format());
}

at::Tensor flipMeta(const at::Tensor& self, at::IntArrayRef dims) {
  reducedSizes(self, dims, false);  // wraps the dimensions, refuses repeats
  return emptyPreserving(self);
}

at::Tensor traceMeta(const at::Tensor& self) {
  require(self.dim() == 2 && !self.is_complex() && self.scalar_type() != at::kBool);
  const bool integral = at::isIntegralType(self.scalar_type(), /*includeBool=*/true);
  return at::empty({}, self.options().dtype(integral ? at::kLong : self.scalar_type()));
}

at::Tensor& nanToNumOutMeta(const at::Tensor& self, std::optional<double> nan,
                            std::optional<double> posinf, std::optional<double> neginf,
                            at::Tensor& out) {
  // An integer input is a copy into a contiguous `out` (resize_output), whose
  // layout the fallback's TensorIterator rule for out= would change: left to the CPU.
  require(self.scalar_type() == out.scalar_type() &&
          !at::isIntegralType(self.scalar_type(), /*includeBool=*/true));
  at::TensorIterator::unary_op(out, self);
  return out;
}

// ATen's structured meta, after the CPU kernel's checks it skips: int64
// indices, floating point values.
at::Tensor& maxPool2dBackwardMeta(const at::Tensor& grad_output, const at::Tensor& self,
                                  at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                  at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode,
                                  const at::Tensor& indices, at::Tensor& grad_input) {
  require(floating(self) && sameDtype(grad_output, self) && indices.scalar_type() == at::kLong);
  return at::meta::max_pool2d_with_indices_backward_outf(grad_output, self, kernel_size, stride,
                                                         padding, dilation, ceil_mode, indices,
                                                         grad_input);
}

// where.self_out, as its CPU kernel checks and sizes `out`: the promoted
// dtype of self and other, a bool condition, the three broadcast together.
at::Tensor& whereSelfOutMeta(const at::Tensor& condition, const at::Tensor& self,
                             const at::Tensor& other, at::Tensor& out) {
  require(condition.scalar_type() == at::kBool && self.scalar_type() == other.scalar_type() &&
          out.scalar_type() == self.scalar_type());
  at::TensorIteratorConfig()
      .check_all_same_dtype(false)
      .add_output(out)
      .add_const_input(condition)
      .add_const_input(self)
      .add_const_input(other)
      .build();
  return out;
}

// roll: the CPU kernel concatenates two slices (each rolled dimension in
// turn), so the result takes the input's suggested memory format; rolling
// the flattened tensor (no dims) is contiguous, an empty one a clone.
at::Tensor rollMeta(const at::Tensor& self, c10::SymIntArrayRef shifts, at::IntArrayRef dims) {
  require(self.dim() > 0 && !shifts.empty() &&
          (dims.empty() ? shifts.size() == 1 : shifts.size() == dims.size()));
  if (self.numel() == 0) return emptyPreserving(self);
  for (size_t i = 0; i < dims.size(); ++i) {
    // A whole-turn shift makes the CPU kernel clone contiguously instead: left to it.
    const int64_t size = self.size(at::maybe_wrap_dim(dims[i], self.dim()));
    require(shifts[i].expect_int() % size != 0);
  }
  if (dims.empty()) return at::empty(self.sizes(), self.options());
  return at::empty(self.sizes(), self.options(), self.suggest_memory_format());
}

// randperm(out=): n within what the result's dtype holds exactly.
at::Tensor& randpermOutMeta(c10::SymInt n_, std::optional<at::Generator> generator, at::Tensor& out) {
  const int64_t n = n_.expect_int();
  int64_t most = 0;
  switch (out.scalar_type()) {
    case at::kLong: most = std::numeric_limits<int64_t>::max(); break;
    case at::kInt: most = int64_t{1} << 31; break;
    case at::kShort: most = int64_t{1} << 15; break;
    case at::kFloat: most = int64_t{1} << 24; break;
    case at::kDouble: most = int64_t{1} << 53; break;
    default: require(false);  // the CPU's checks and precision limits of the other dtypes
  }
  require(n >= 0 && n <= most && (!generator || generator->device().is_privateuseone()));
  out.resize_({n});
  return out;
}

// tril_indices / triu_indices: [2, count] int64 or int32 indices.
at::Tensor triangleIndicesMeta(int64_t row, int64_t col, int64_t count,
                               std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout) {
  const auto type = dtype.value_or(at::kLong);
  require(row >= 0 && col >= 0 && layout.value_or(at::kStrided) == at::kStrided &&
          (type == at::kLong || type == at::kInt));
  return at::empty({2, count}, at::TensorOptions(at::kMeta).dtype(type));
}
// (get_tril_size's sums overflow for offsets near the int64 limits: left to the CPU.)
bool moderateOffset(int64_t offset) {
  return offset > -(int64_t{1} << 62) && offset < (int64_t{1} << 62);
}
at::Tensor trilIndicesMeta(int64_t row, int64_t col, int64_t offset,
                           std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                           std::optional<at::Device> device, std::optional<bool> pin_memory) {
  require(moderateOffset(offset));
  return triangleIndicesMeta(row, col, at::native::get_tril_size(row, col, offset), dtype, layout);
}
at::Tensor triuIndicesMeta(int64_t row, int64_t col, int64_t offset,
                           std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                           std::optional<at::Device> device, std::optional<bool> pin_memory) {
  require(moderateOffset(offset));
  return triangleIndicesMeta(row, col, row * col - at::native::get_tril_size(row, col, offset - 1),
                             dtype, layout);
}

// clamp(out=) with Scalar bounds: ATen's meta, after the CPU kernel's
// conversion of each bound to the dtype ("value cannot be converted to type
// int16_t without overflow"; bool and complex are refused there too).
at::Tensor& clampOutMeta(const at::Tensor& self, const std::optional<at::Scalar>& min,
                         const std::optional<at::Scalar>& max, at::Tensor& out) {
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, self.scalar_type(), "clamp", [&] {
    if (min) (void)min->to<scalar_t>();
    if (max) (void)max->to<scalar_t>();
  });
  return at::meta::clamp_outf(self, min, max, out);
}

// linalg_cross: ATen's meta; the CPU kernel has no bool version.
at::Tensor linalgCrossMeta(const at::Tensor& self, const at::Tensor& other, int64_t dim) {
  require(self.scalar_type() != at::kBool && other.scalar_type() != at::kBool);
  return at::meta::linalg_cross(self, other, dim);
}
at::Tensor& linalgCrossOutMeta(const at::Tensor& self, const at::Tensor& other, int64_t dim,
                               at::Tensor& out) {
  require(self.scalar_type() != at::kBool && other.scalar_type() != at::kBool);
  return at::meta::linalg_cross_outf(self, other, dim, out);
}

// norm(out=): ATen's meta; the CPU kernel refuses a complex order.
at::Tensor& normOutMeta(const at::Tensor& self, const std::optional<at::Scalar>& p,
                        at::IntArrayRef dim, bool keepdim, at::Tensor& out) {
  require(!p || !p->isComplex());
  return at::meta::norm_outf(self, p, dim, keepdim, out);
}

// index.Tensor: ATen's meta, given at least one index tensor (the CPU
// kernel asserts on none).
at::Tensor indexMeta(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices) {
  bool any = false;
  for (const std::optional<at::Tensor>& index : indices) any |= index.has_value() && index->defined();
  require(any);
  return at::meta::index(self, indices);
}

// In-place sampling: the CPU kernels' checks of their parameters.
at::Tensor& bernoulliFloatMeta(at::Tensor& self, double p, std::optional<at::Generator> generator) {
  require(0 <= p && p <= 1);
  return self;
}

at::Tensor& exponentialMeta(at::Tensor& self, double lambd, std::optional<at::Generator> generator) {
  require(lambd > 0 && std::isfinite(lambd));
  return self;
}

// grad * mask * scale: the layout and dtype of the elementwise product.
at::Tensor nativeDropoutBackwardMeta(const at::Tensor& grad_output, const at::Tensor& mask,
                                     double scale) {
  require(floating(grad_output));
  at::Tensor out;
  auto iter = at::TensorIterator::binary_op(out, grad_output, mask);
  return iter.output();
}

at::Tensor adaptiveAvgPool2dBackwardMeta(const at::Tensor& grad_output, const at::Tensor& self) {
  require(floating(self) && (self.dim() == 3 || self.dim() == 4) &&
          grad_output.dim() == self.dim() && sameDtype(grad_output, self));
  return at::empty(self.sizes(), self.options(), self.suggest_memory_format());
}

// hardswish (MobileNet's activation) and its backward: TensorIterator's
// unary and binary op, as the CPU kernels build them.
at::Tensor hardswishMeta(const at::Tensor& self) {
  require(floating(self));
  at::Tensor out;
  return at::TensorIterator::unary_op(out, self).output();
}
at::Tensor& hardswishInPlaceMeta(at::Tensor& self) {
  require(floating(self));
  at::TensorIterator::unary_op(self, self);
  return self;
}
at::Tensor hardswishBackwardMeta(const at::Tensor& grad_output, const at::Tensor& self) {
  require(floating(self) && sameDtype(grad_output, self));
  at::Tensor grad_input;
  return at::TensorIterator::binary_op(grad_input, grad_output, self).output();
}

// prelu's kernels (prelu reshapes the weight to broadcast over self first):
// the result is empty_like(self); the backward's two results take the layout
// of the iterator over (self, weight, grad_output), both of the broadcast
// shape (autograd sums grad_weight down to the weight's).
at::Tensor preluMeta(const at::Tensor& self, const at::Tensor& weight) {
  require(floating(self) && sameDtype(weight, self) &&
          at::infer_size(self.sizes(), weight.sizes()) == self.sizes());
  return emptyPreserving(self);
}
std::tuple<at::Tensor, at::Tensor> preluBackwardMeta(const at::Tensor& grad_output,
                                                     const at::Tensor& self,
                                                     const at::Tensor& weight) {
  require(floating(self) && sameDtype(weight, self) && sameDtype(grad_output, self));
  at::Tensor grad_self = at::empty({0}, self.options());
  at::Tensor grad_weight = at::empty({0}, weight.options());
  at::TensorIteratorConfig()
      .add_output(grad_self)
      .add_output(grad_weight)
      .add_const_input(self)
      .add_const_input(weight)
      .add_const_input(grad_output)
      .build();
  return {grad_self, grad_weight};
}

// huber_loss: the elementwise loss is empty_like(input), reduced to a scalar
// unless reduction is none; its backward checks as mse_loss's.
at::Tensor huberLossMeta(const at::Tensor& self, const at::Tensor& target, int64_t reduction,
                         double delta) {
  require(floating(self) && sameDtype(target, self) && target.sizes() == self.sizes() &&
          delta > 0 && reduction >= at::Reduction::None && reduction <= at::Reduction::Sum);
  if (reduction == at::Reduction::None) return emptyPreserving(self);
  return at::empty({}, self.options());
}
// (huber_loss_backward is composite: zeros_like(self) into its out= form.)
at::Tensor& huberLossBackwardOutMeta(const at::Tensor& grad_output, const at::Tensor& self,
                                     const at::Tensor& target, int64_t reduction, double delta,
                                     at::Tensor& grad_input) {
  require(grad_input.sizes() == self.sizes() && sameDtype(grad_input, self) &&
          at::has_internal_overlap(grad_input) == at::MemOverlap::No);
  (void)mseLossBackwardMeta(grad_output, self, target, reduction);
  return grad_input;
}

// index_fill_ (index_fill clones, then fills in place): the CPU kernel's
// argument checks, and its conversion of the value to self's dtype. An index
// out of range fails the stream, as CUDA's kernel assert does (and as
// index_add's, index_select's); the values are device data.
at::Tensor& indexFillMeta(at::Tensor& self, int64_t dim, const at::Tensor& index,
                          const at::Scalar& value) {
  require(index.scalar_type() == at::kLong && index.dim() <= 1 && !value.isComplex() &&
          !self.is_complex() && at::has_internal_overlap(self) == at::MemOverlap::No &&
          index.storage().unsafeGetStorageImpl() != self.storage().unsafeGetStorageImpl());
  (void)at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  AT_DISPATCH_ALL_TYPES_AND3(at::kBool, at::kHalf, at::kBFloat16, self.scalar_type(),
                             "index_fill_", [&] { (void)value.to<scalar_t>(); });
  return self;
}

// Vision, signal and metric operators, and activations of common models
// (same contract as above): the shapes the CPU kernels resize their results
// to, contiguous, for the inputs those kernels accept without question.

// hardtanh (ReLU6 is one): empty_like(self), then clamp into it.
at::Tensor hardtanhMeta(const at::Tensor& self, const at::Scalar& min_val,
                        const at::Scalar& max_val) {
  require(floating(self));
  return emptyPreserving(self);
}

at::Tensor logitMeta(const at::Tensor& self, std::optional<double> eps) {
  require(floating(self));
  at::Tensor out;
  return at::TensorIterator::unary_float_op(out, self).output();
}

at::Tensor dotMeta(const at::Tensor& self, const at::Tensor& other) {
  require((floating(self) || self.is_complex()) && sameDtype(other, self) && self.dim() == 1 &&
          other.dim() == 1 && self.numel() == other.numel());
  return at::empty({}, self.options());
}

// (self != 0).sum(dims): a reduction's contiguous result.
at::Tensor countNonzeroMeta(const at::Tensor& self, at::IntArrayRef dims) {
  require(self.layout() == at::kStrided);
  return at::empty(reducedSizes(self, dims, /*keepdim=*/false), self.options().dtype(at::kLong));
}

at::Tensor histcMeta(const at::Tensor& self, int64_t bins, const at::Scalar& min,
                     const at::Scalar& max) {
  // min == max takes the range from the data (computed on the device); the
  // CPU kernel checks that range, so it stays there.
  const double lo = min.toDouble(), hi = max.toDouble();
  require(floating(self) && bins > 0 && std::isfinite(lo) && std::isfinite(hi) && lo < hi);
  return at::empty({bins}, self.options());
}

at::Tensor searchsortedMeta(const at::Tensor& sorted_sequence, const at::Tensor& self,
                            bool out_int32, bool right, std::optional<c10::string_view> side,
                            const std::optional<at::Tensor>& sorter) {
  const auto type = self.scalar_type();
  const int64_t n = sorted_sequence.dim();
  require(!(sorter && sorter->defined()) && sameDtype(sorted_sequence, self) &&
          (at::isFloatingType(type) || at::isIntegralType(type, /*includeBool=*/false)) &&
          !self.is_complex() && n >= 1 &&
          (!side || *side == (right ? "right" : "left")) &&
          (n == 1 || (self.dim() == n &&
                      sorted_sequence.sizes().slice(0, n - 1) == self.sizes().slice(0, n - 1))));
  return at::empty(self.sizes(), self.options().dtype(out_int32 ? at::kInt : at::kLong));
}

// reflection_pad2d: non-negative padding, less than the padded dimension;
// contiguous input (the result's layout then is contiguous too).
at::Tensor reflectionPad2dMeta(const at::Tensor& self, c10::SymIntArrayRef padding_) {
  require(padding_.size() == 4 && (floating(self) || self.is_complex()) &&
          (self.dim() == 3 || self.dim() == 4) && self.is_contiguous());
  const auto padding = convParam(padding_, 4);
  for (int64_t d = 0; d < self.dim(); ++d) require(self.size(d) > 0);
  const int64_t h = self.size(-2), w = self.size(-1);
  for (int i = 0; i < 4; ++i) require(padding[i] >= 0 && padding[i] < (i < 2 ? w : h));
  auto sizes = self.sizes().vec();
  sizes[self.dim() - 2] = h + padding[2] + padding[3];
  sizes[self.dim() - 1] = w + padding[0] + padding[1];
  return at::empty(sizes, self.options());
}

// The CPU kernel also restrides a channels-last input's out= to its format
// (see paddedInPlainFormat below); reflectionPad2dMeta takes contiguous inputs only.
at::Tensor& reflectionPad2dOutMeta(const at::Tensor& self, c10::SymIntArrayRef padding,
                                   at::Tensor& out) {
  const at::Tensor result = reflectionPad2dMeta(self, padding);
  // The CPU kernel restrides an out= of the right size to contiguous: such
  // an out that is not takes the synchronous path (a kernel writing through
  // the device tensor's view would scramble it).
  require(sameDtype(out, self) && (out.sizes() != result.sizes() || out.is_contiguous()));
  at::native::resize_output(out, result.sizes());
  return out;
}

// nn.Unfold / nn.Fold: (N, C*kh*kw, L) blocks and back, contiguous; a 3-D
// (2-D for col2im) input is an unbatched one.
struct BlockGeometry {
  int64_t kh, kw, dh, dw, ph, pw, sh, sw;
  // How many blocks fit along a dimension of `size`.
  int64_t blocks(int64_t size, int64_t k, int64_t d, int64_t pad, int64_t stride) const {
    return (size + 2 * pad - (d * (k - 1) + 1)) / stride + 1;
  }
};

BlockGeometry blockGeometry(at::IntArrayRef kernel_size, at::IntArrayRef dilation,
                            at::IntArrayRef padding, at::IntArrayRef stride) {
  require(kernel_size.size() == 2 && dilation.size() == 2 && padding.size() == 2 &&
          stride.size() == 2);
  BlockGeometry g{kernel_size[0], kernel_size[1], dilation[0], dilation[1],
                  padding[0],     padding[1],     stride[0],   stride[1]};
  require(g.kh > 0 && g.kw > 0 && g.dh > 0 && g.dw > 0 && g.ph >= 0 && g.pw >= 0 && g.sh > 0 &&
          g.sw > 0);
  return g;
}

at::Tensor im2colMeta(const at::Tensor& self, at::IntArrayRef kernel_size,
                      at::IntArrayRef dilation, at::IntArrayRef padding, at::IntArrayRef stride) {
  const auto g = blockGeometry(kernel_size, dilation, padding, stride);
  require((floating(self) || self.is_complex()) && (self.dim() == 3 || self.dim() == 4));
  for (int64_t d = 0; d < self.dim(); ++d) require(self.size(d) > 0);
  const int64_t oh = g.blocks(self.size(-2), g.kh, g.dh, g.ph, g.sh);
  const int64_t ow = g.blocks(self.size(-1), g.kw, g.dw, g.pw, g.sw);
  require(oh >= 1 && ow >= 1);
  const int64_t planes = self.size(-3) * g.kh * g.kw;
  if (self.dim() == 3) return at::empty({planes, oh * ow}, self.options());
  return at::empty({self.size(0), planes, oh * ow}, self.options());
}

at::Tensor col2imMeta(const at::Tensor& self, c10::SymIntArrayRef output_size_,
                      at::IntArrayRef kernel_size, at::IntArrayRef dilation,
                      at::IntArrayRef padding, at::IntArrayRef stride) {
  const auto g = blockGeometry(kernel_size, dilation, padding, stride);
  require(output_size_.size() == 2);
  const auto output_size = convParam(output_size_, 2);
  require((floating(self) || self.is_complex()) && (self.dim() == 2 || self.dim() == 3) &&
          output_size[0] > 0 && output_size[1] > 0);
  for (int64_t d = 0; d < self.dim(); ++d) require(self.size(d) > 0);
  const int64_t bh = g.blocks(output_size[0], g.kh, g.dh, g.ph, g.sh);
  const int64_t bw = g.blocks(output_size[1], g.kw, g.dw, g.pw, g.sw);
  require(self.size(-2) % (g.kh * g.kw) == 0 && bh >= 1 && bw >= 1 &&
          self.size(-1) == bh * bw);
  const int64_t channels = self.size(-2) / (g.kh * g.kw);
  if (self.dim() == 2) return at::empty({channels, output_size[0], output_size[1]}, self.options());
  return at::empty({self.size(0), channels, output_size[0], output_size[1]}, self.options());
}

// smooth_l1_loss_backward is composite as huber_loss_backward is: zeros_like(self)
// into this out= form, which checks as mse_loss's backward.
at::Tensor& smoothL1LossBackwardOutMeta(const at::Tensor& grad_output, const at::Tensor& self,
                                        const at::Tensor& target, int64_t reduction, double beta,
                                        at::Tensor& grad_input) {
  require(beta > 0);
  return huberLossBackwardOutMeta(grad_output, self, target, reduction, beta, grad_input);
}

// nll_loss for images: (N, C, H, W) scores, (N, H, W) class indices.
std::tuple<at::Tensor, at::Tensor> nllLoss2dForwardMeta(const at::Tensor& self,
                                                        const at::Tensor& target,
                                                        const std::optional<at::Tensor>& weight,
                                                        int64_t reduction, c10::SymInt ignore_index) {
  const at::Tensor w = weight.value_or(at::Tensor());
  require(floating(self) && self.dim() == 4 && target.scalar_type() == at::kLong &&
          target.dim() == 3 && target.size(0) == self.size(0) &&
          target.size(1) == self.size(2) && target.size(2) == self.size(3) &&
          (!w.defined() || (sameDtype(w, self) && w.numel() == self.size(1))) &&
          reduction >= at::Reduction::None && reduction <= at::Reduction::Sum);
  at::Tensor output = reduction == at::Reduction::None ? at::empty(target.sizes(), self.options())
                                                       : at::empty({}, self.options());
  return {output, at::empty({}, self.options())};
}

// torch._weight_norm's fused kernel (first or last dimension): w contiguous,
// the norms laid out as g, in float for a reduced-precision v.
std::tuple<at::Tensor, at::Tensor> weightNormInterfaceMeta(const at::Tensor& v,
                                                           const at::Tensor& g, int64_t dim) {
  require(floating(v) && sameDtype(g, v) && g.is_contiguous() && v.dim() >= 1 &&
          (dim == 0 || dim == v.dim() - 1) &&
          g.dim() == v.dim() && g.size(dim) == v.size(dim) && g.numel() == v.size(dim));
  const auto normType = at::toOpMathType(v.scalar_type());
  return {at::empty(v.sizes(), v.options()),
          at::empty_strided(g.sizes(), g.strides(), g.options().dtype(normType))};
}

// F.grid_sample: (N, C, H_in, W_in) sampled at (N, H_out, W_out, 2) points.
at::Tensor gridSampler2dMeta(const at::Tensor& input, const at::Tensor& grid,
                             int64_t interpolation_mode, int64_t padding_mode, bool align_corners) {
  require(floating(input) && sameDtype(grid, input) && input.dim() == 4 && grid.dim() == 4 &&
          grid.size(3) == 2 && grid.size(0) == input.size(0) && input.size(2) > 0 &&
          input.size(3) > 0 && interpolation_mode >= 0 && interpolation_mode <= 2 &&
          padding_mode >= 0 && padding_mode <= 2);
  return at::empty({input.size(0), input.size(1), grid.size(1), grid.size(2)}, input.options());
}

// torch.polar's functional form is composite: an empty complex result into this.
at::Tensor& polarOutMeta(const at::Tensor& abs, const at::Tensor& angle, at::Tensor& out) {
  const auto type = abs.scalar_type();
  require((type == at::kFloat || type == at::kDouble) && sameDtype(angle, abs) &&
          out.scalar_type() == c10::toComplexType(type) &&
          at::has_internal_overlap(out) == at::MemOverlap::No);
  at::TensorIteratorConfig()
      .add_output(out)
      .add_const_input(abs)
      .add_const_input(angle)
      .check_all_same_dtype(false)
      .build();
  return out;
}

// torch.cdist: batch dimensions broadcast, then (r1, r2) distances.
at::Tensor cdistForwardMeta(const at::Tensor& x1, const at::Tensor& x2, double p,
                            std::optional<int64_t> compute_mode) {
  require(floating(x1) && x1.scalar_type() != at::kHalf && x1.scalar_type() != at::kBFloat16 &&
          sameDtype(x2, x1) && x1.dim() >= 2 && x2.dim() >= 2 && x1.size(-1) == x2.size(-1) &&
          p >= 0 && (!compute_mode || (*compute_mode >= 0 && *compute_mode <= 2)));
  auto sizes = at::infer_size(x1.sizes().slice(0, x1.dim() - 2), x2.sizes().slice(0, x2.dim() - 2));
  sizes.push_back(x1.size(-2));
  sizes.push_back(x2.size(-2));
  return at::empty(sizes, x1.options());
}

// nn.EmbeddingBag: the output; the other three results' shapes are the CPU
// kernel's (embeddingBagResultsAsTheCpus, FallbackOperatorRules.cpp), their
// dtype the indices'. The CPU kernel's host checks are made before
// (embeddingBagArgumentsPassTheCpusChecks).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> embeddingBagMeta(
    const at::Tensor& weight, const at::Tensor& indices, const at::Tensor& offsets,
    bool scale_grad_by_freq, int64_t mode, bool sparse,
    const std::optional<at::Tensor>& per_sample_weights, bool include_last_offset,
    int64_t padding_idx) {
  const auto index = indices.scalar_type();
  require(floating(weight) && weight.dim() == 2 && (index == at::kLong || index == at::kInt) &&
          offsets.scalar_type() == index && (!include_last_offset || offsets.size(0) >= 1));
  const int64_t bags = offsets.size(0) - (include_last_offset ? 1 : 0);
  const auto options = indices.options();
  return {at::empty({bags, weight.size(1)}, weight.options()), at::empty({0}, options),
          at::empty({0}, options), at::empty({0}, options)};
}

// Its backward, dense (the weight's gradient, zero-filled then accumulated)
// and for the per-sample weights.
at::Tensor embeddingBagDenseBackwardMeta(const at::Tensor& grad, const at::Tensor& indices,
                                         const at::Tensor& offset2bag, const at::Tensor& bag_size,
                                         const at::Tensor& maximum_indices,
                                         c10::SymInt num_weights, bool scale_grad_by_freq,
                                         int64_t mode,
                                         const std::optional<at::Tensor>& per_sample_weights,
                                         int64_t padding_idx) {
  require(floating(grad) && grad.dim() == 2 && indices.dim() == 1 && mode >= 0 && mode <= 2 &&
          num_weights.expect_int() >= 0);
  return at::empty({num_weights.expect_int(), grad.size(1)}, grad.options());
}
at::Tensor embeddingBagBackwardMeta(const at::Tensor& grad, const at::Tensor& indices,
                                    const at::Tensor& offsets, const at::Tensor& offset2bag,
                                    const at::Tensor& bag_size, const at::Tensor& maximum_indices,
                                    c10::SymInt num_weights, bool scale_grad_by_freq, int64_t mode,
                                    bool sparse,
                                    const std::optional<at::Tensor>& per_sample_weights,
                                    int64_t padding_idx) {
  require(!sparse);  // a sparse gradient: not a strided result
  return embeddingBagDenseBackwardMeta(grad, indices, offset2bag, bag_size, maximum_indices,
                                       std::move(num_weights), scale_grad_by_freq, mode,
                                       per_sample_weights, padding_idx);
}
at::Tensor embeddingBagPerSampleWeightsBackwardMeta(const at::Tensor& grad,
                                                    const at::Tensor& weight,
                                                    const at::Tensor& indices,
                                                    const at::Tensor& offsets,
                                                    const at::Tensor& offset2bag, int64_t mode,
                                                    int64_t padding_idx) {
  require(floating(grad) && mode == 0 && grad.dim() == 2 && weight.dim() == 2 &&
          weight.size(1) == grad.size(1) && indices.dim() == 1 && offset2bag.dim() == 1 &&
          // (empty when the forward took the CPU's fast path)
          (offset2bag.size(0) == indices.size(0) || offset2bag.numel() == 0));
  return at::empty({indices.size(0)}, grad.options());
}

// Structured operators whose CPU kernels take fewer dtypes than their meta
// functions: ATen's meta, for the dtypes the kernel has.
at::Tensor& addmvOutMeta(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec,
                         const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
  require(floating(mat) || mat.is_complex());
  return at::meta::addmv_outf(self, mat, vec, beta, alpha, out);
}
at::Tensor& renormOutMeta(const at::Tensor& self, const at::Scalar& p, int64_t dim,
                          const at::Scalar& maxnorm, at::Tensor& out) {
  require(floating(self));
  (void)at::maybe_wrap_dim(dim, self.dim());  // the CPU kernel's IndexError, at the call
  return at::meta::renorm_outf(self, p, dim, maxnorm, out);
}
at::Tensor& leakyReluBackwardOutMeta(const at::Tensor& grad_output, const at::Tensor& self,
                                     const at::Scalar& negative_slope, bool self_is_result,
                                     at::Tensor& grad_input) {
  require(floating(self));
  return at::meta::leaky_relu_backward_outf(grad_output, self, negative_slope, self_is_result,
                                            grad_input);
}
// Replication and 3-D reflection padding: ATen's meta sizes the result
// contiguous, but the CPU kernel restrides it to a channels-last input's
// format, even an out= tensor of the right size (a kernel writing through a
// contiguous device tensor's view would scramble it): those inputs take the
// synchronous path, which copies the result over.
bool paddedInPlainFormat(const at::Tensor& self) {
  return (floating(self) || self.is_complex()) &&
         (self.dim() < 4 || self.suggest_memory_format() == c10::MemoryFormat::Contiguous);
}
// ATen's meta (replication 2-D/3-D, reflection 3-D), for a plain input and
// a result it leaves contiguous (see reflectionPad2dOutMeta).
template <at::Tensor& (*atenMeta)(const at::Tensor&, c10::SymIntArrayRef, at::Tensor&)>
at::Tensor& plainPaddingOutMeta(const at::Tensor& self, c10::SymIntArrayRef padding,
                                at::Tensor& out) {
  require(paddedInPlainFormat(self));
  atenMeta(self, padding, out);
  require(out.is_contiguous());
  return out;
}
std::tuple<at::Tensor&, at::Tensor&> adaptiveMaxPool2dOutMeta(const at::Tensor& self,
                                                              at::IntArrayRef output_size,
                                                              at::Tensor& out,
                                                              at::Tensor& indices) {
  require(floating(self));
  return at::meta::adaptive_max_pool2d_outf(self, output_size, out, indices);
}
// linalg.solve checks `info` itself (a synchronisation, as CUDA's); asked of
// the kernel, the check would fail the stream instead of raising at the call.
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> linalgSolveExOutMeta(
    const at::Tensor& A, const at::Tensor& B, bool left, bool check_errors, at::Tensor& result,
    at::Tensor& LU, at::Tensor& pivots, at::Tensor& info) {
  require(!check_errors);
  return at::meta::_linalg_solve_ex_outf(A, B, left, check_errors, result, LU, pivots, info);
}

struct MetaKernel {
  c10::KernelFunction kernel;
  c10::FunctionSchema signature;  // inferred from the C++ function, checked against the op's
};

template <class Signature, Signature* function>
MetaKernel metaKernel() {
  return {c10::KernelFunction::makeFromUnboxedFunction(
              c10::CompileTimeFunctionPointer<Signature, function>()),
          c10::inferFunctionSchemaFlattenedReturns<Signature>()};
}

// One entry: the operator's name, and the at::meta function of its schema's
// signature (out= arguments last, as the _outf forms take them), which picks
// the overload.
#define OPENREG_META(name, fn, ...) \
  { name, metaKernel<__VA_ARGS__, &at::meta::fn>() }
// An entry for one of the Meta kernels written above.
#define OPENREG_OWN_META(name, fn) \
  { name, metaKernel<decltype(fn), &fn>() }

// Structured pointwise operators' out= forms: (self, out) and (self, other, out).
#define OPENREG_UNARY_META(op) OPENREG_META("aten::" #op ".out", op##_outf, Tensor&(const Tensor&, Tensor&))
#define OPENREG_BINARY_META(op) \
  OPENREG_META("aten::" #op ".out", op##_outf, Tensor&(const Tensor&, const Tensor&, Tensor&))

using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

// Operators a model commonly sends down the generic fallback (sampling,
// masking, sorting, indexing, clamping, reductions, losses, pooling,
// upsampling; for structured operators the out= form, which their
// functional form calls on a backend without a kernel of its own), whose
// Meta key a Python kernel holds, with a C++ Meta kernel to use instead.
std::unordered_map<std::string, MetaKernel>* makeTable() {
  auto* table = new std::unordered_map<std::string, MetaKernel>{
      OPENREG_OWN_META("aten::masked_fill_.Scalar", maskedFillMeta),
      OPENREG_OWN_META("aten::masked_fill_.Tensor", maskedFillTensorMeta),
      OPENREG_OWN_META("aten::abs.out", absOutMeta),
      OPENREG_OWN_META("aten::convolution", convolutionMeta),
      OPENREG_OWN_META("aten::convolution_backward", convolutionBackwardMeta),
      OPENREG_OWN_META("aten::native_batch_norm", batchNormMeta),
      OPENREG_OWN_META("aten::native_batch_norm_backward", batchNormBackwardMeta),
      OPENREG_OWN_META("aten::std.correction", stdVarMeta),
      OPENREG_OWN_META("aten::var.correction", stdVarMeta),
      OPENREG_OWN_META("aten::std_mean.correction", stdVarMeanMeta),
      OPENREG_OWN_META("aten::var_mean.correction", stdVarMeanMeta),
      OPENREG_OWN_META("aten::mse_loss_backward", mseLossBackwardMeta),
      OPENREG_OWN_META("aten::binary_cross_entropy", binaryCrossEntropyMeta),
      OPENREG_OWN_META("aten::log_sigmoid_forward", logSigmoidForwardMeta),
      OPENREG_OWN_META("aten::_adaptive_avg_pool2d", adaptiveAvgPool2dMeta),
      OPENREG_OWN_META("aten::flip", flipMeta),
      OPENREG_OWN_META("aten::clamp.out", clampOutMeta),
      OPENREG_OWN_META("aten::linalg_cross", linalgCrossMeta),
      OPENREG_OWN_META("aten::linalg_cross.out", linalgCrossOutMeta),
      OPENREG_OWN_META("aten::norm.out", normOutMeta),
      OPENREG_OWN_META("aten::index.Tensor", indexMeta),
      OPENREG_OWN_META("aten::roll", rollMeta),
      OPENREG_OWN_META("aten::randperm.generator_out", randpermOutMeta),
      OPENREG_OWN_META("aten::tril_indices", trilIndicesMeta),
      OPENREG_OWN_META("aten::triu_indices", triuIndicesMeta),
      OPENREG_OWN_META("aten::where.self_out", whereSelfOutMeta),
      OPENREG_OWN_META("aten::max_pool2d_with_indices_backward.grad_input", maxPool2dBackwardMeta),
      OPENREG_OWN_META("aten::bernoulli_.float", bernoulliFloatMeta),
      OPENREG_OWN_META("aten::exponential_", exponentialMeta),
      OPENREG_OWN_META("aten::native_dropout_backward", nativeDropoutBackwardMeta),
      OPENREG_OWN_META("aten::_adaptive_avg_pool2d_backward", adaptiveAvgPool2dBackwardMeta),
      OPENREG_OWN_META("aten::trace", traceMeta),
      OPENREG_OWN_META("aten::nan_to_num.out", nanToNumOutMeta),
      OPENREG_OWN_META("aten::native_group_norm", groupNormMeta),
      OPENREG_OWN_META("aten::native_group_norm_backward", groupNormBackwardMeta),
      OPENREG_OWN_META("aten::hardswish", hardswishMeta),
      OPENREG_OWN_META("aten::hardswish_", hardswishInPlaceMeta),
      OPENREG_OWN_META("aten::hardswish_backward", hardswishBackwardMeta),
      OPENREG_OWN_META("aten::_prelu_kernel", preluMeta),
      OPENREG_OWN_META("aten::_prelu_kernel_backward", preluBackwardMeta),
      OPENREG_OWN_META("aten::huber_loss", huberLossMeta),
      OPENREG_OWN_META("aten::huber_loss_backward.out", huberLossBackwardOutMeta),
      OPENREG_OWN_META("aten::index_fill_.int_Scalar", indexFillMeta),
      OPENREG_OWN_META("aten::hardtanh", hardtanhMeta),
      OPENREG_OWN_META("aten::logit", logitMeta),
      OPENREG_OWN_META("aten::dot", dotMeta),
      OPENREG_OWN_META("aten::count_nonzero.dim_IntList", countNonzeroMeta),
      OPENREG_OWN_META("aten::histc", histcMeta),
      OPENREG_OWN_META("aten::searchsorted.Tensor", searchsortedMeta),
      OPENREG_OWN_META("aten::reflection_pad2d", reflectionPad2dMeta),
      OPENREG_OWN_META("aten::reflection_pad2d.out", reflectionPad2dOutMeta),
      OPENREG_OWN_META("aten::im2col", im2colMeta),
      OPENREG_OWN_META("aten::col2im", col2imMeta),
      OPENREG_OWN_META("aten::addmv.out", addmvOutMeta),
      OPENREG_OWN_META("aten::_embedding_bag", embeddingBagMeta),
      OPENREG_OWN_META("aten::_embedding_bag_forward_only", embeddingBagMeta),
      OPENREG_OWN_META("aten::_embedding_bag_backward", embeddingBagBackwardMeta),
      OPENREG_OWN_META("aten::_embedding_bag_dense_backward", embeddingBagDenseBackwardMeta),
      OPENREG_OWN_META("aten::_embedding_bag_per_sample_weights_backward",
                       embeddingBagPerSampleWeightsBackwardMeta),
      OPENREG_OWN_META("aten::smooth_l1_loss_backward.grad_input", smoothL1LossBackwardOutMeta),
      OPENREG_OWN_META("aten::nll_loss2d_forward", nllLoss2dForwardMeta),
      OPENREG_OWN_META("aten::_weight_norm_interface", weightNormInterfaceMeta),
      OPENREG_OWN_META("aten::grid_sampler_2d", gridSampler2dMeta),
      OPENREG_OWN_META("aten::polar.out", polarOutMeta),
      OPENREG_OWN_META("aten::_cdist_forward", cdistForwardMeta),
      OPENREG_OWN_META("aten::renorm.out", renormOutMeta),
      OPENREG_OWN_META("aten::leaky_relu_backward.grad_input", leakyReluBackwardOutMeta),
      OPENREG_OWN_META("aten::replication_pad2d.out", plainPaddingOutMeta<&at::meta::replication_pad2d_symint_outf>),
      OPENREG_OWN_META("aten::replication_pad3d.out", plainPaddingOutMeta<&at::meta::replication_pad3d_symint_outf>),
      OPENREG_OWN_META("aten::reflection_pad3d.out", plainPaddingOutMeta<&at::meta::reflection_pad3d_symint_outf>),
      OPENREG_OWN_META("aten::adaptive_max_pool2d.out", adaptiveMaxPool2dOutMeta),
      OPENREG_OWN_META("aten::_linalg_solve_ex.result", linalgSolveExOutMeta),
      OPENREG_BINARY_META(heaviside),
      OPENREG_META("aten::linalg_qr.out", linalg_qr_outf,
                   std::tuple<Tensor&, Tensor&>(const Tensor&, c10::string_view, Tensor&, Tensor&)),
      OPENREG_META("aten::normal_", normal_,
                   Tensor&(Tensor&, double, double, std::optional<at::Generator>)),
      OPENREG_META("aten::sort.stable", sort,
                   std::tuple<Tensor, Tensor>(const Tensor&, std::optional<bool>, int64_t, bool)),
      OPENREG_META("aten::sort.values_stable", sort_outf,
                   std::tuple<Tensor&, Tensor&>(const Tensor&, std::optional<bool>, int64_t, bool,
                       Tensor&, Tensor&)),
      OPENREG_META("aten::topk.values", topk_outf,
                   std::tuple<Tensor&, Tensor&>(const Tensor&, int64_t, int64_t, bool, bool,
                       Tensor&, Tensor&)),
      OPENREG_META("aten::eye.out", eye_outf, Tensor&(int64_t, Tensor&)),
      OPENREG_META("aten::eye.m_out", eye_outf, Tensor&(int64_t, int64_t, Tensor&)),
      OPENREG_META("aten::cumprod.out", cumprod_outf,
                   Tensor&(const Tensor&, int64_t, std::optional<ScalarType>, Tensor&)),
      OPENREG_META("aten::index_add.out", index_add_outf,
                   Tensor&(const Tensor&, int64_t, const Tensor&, const Tensor&, const Scalar&,
                       Tensor&)),
      OPENREG_META("aten::index_add_", index_add_,
                   Tensor&(Tensor&, int64_t, const Tensor&, const Tensor&, const Scalar&)),
      OPENREG_META("aten::gather.out", gather_outf,
                   Tensor&(const Tensor&, int64_t, const Tensor&, bool, Tensor&)),
      OPENREG_META("aten::scatter.src_out", scatter_outf,
                   Tensor&(const Tensor&, int64_t, const Tensor&, const Tensor&, Tensor&)),
      OPENREG_META("aten::scatter.value_out", scatter_outf,
                   Tensor&(const Tensor&, int64_t, const Tensor&, const Scalar&, Tensor&)),
      OPENREG_META("aten::scatter_add.out", scatter_add_outf,
                   Tensor&(const Tensor&, int64_t, const Tensor&, const Tensor&, Tensor&)),
      OPENREG_META("aten::clamp_max.out", clamp_max_outf,
                   Tensor&(const Tensor&, const Scalar&, Tensor&)),
      OPENREG_META("aten::clamp_max.Tensor_out", clamp_max_outf,
                   Tensor&(const Tensor&, const Tensor&, Tensor&)),
      OPENREG_META("aten::clamp_min.out", clamp_min_outf,
                   Tensor&(const Tensor&, const Scalar&, Tensor&)),
      OPENREG_META("aten::clamp_min.Tensor_out", clamp_min_outf,
                   Tensor&(const Tensor&, const Tensor&, Tensor&)),
      OPENREG_META("aten::maximum.out", maximum_outf,
                   Tensor&(const Tensor&, const Tensor&, Tensor&)),
      OPENREG_META("aten::minimum.out", minimum_outf,
                   Tensor&(const Tensor&, const Tensor&, Tensor&)),
      OPENREG_META("aten::div.out_mode", div_outf,
                   Tensor&(const Tensor&, const Tensor&, std::optional<c10::string_view>, Tensor&)),
      OPENREG_META("aten::fmod.Tensor_out", fmod_outf,
                   Tensor&(const Tensor&, const Tensor&, Tensor&)),
      OPENREG_META("aten::remainder.Tensor_out", remainder_outf,
                   Tensor&(const Tensor&, const Tensor&, Tensor&)),
      OPENREG_META("aten::pow.Tensor_Tensor_out", pow_outf,
                   Tensor&(const Tensor&, const Tensor&, Tensor&)),
      OPENREG_META("aten::pow.Scalar_out", pow_outf,
                   Tensor&(const Scalar&, const Tensor&, Tensor&)),
      OPENREG_META("aten::pow.Tensor_Scalar_out", pow_outf,
                   Tensor&(const Tensor&, const Scalar&, Tensor&)),
      OPENREG_META("aten::atan2.out", atan2_outf, Tensor&(const Tensor&, const Tensor&, Tensor&)),
      OPENREG_META("aten::bitwise_and.Tensor_out", bitwise_and_outf,
                   Tensor&(const Tensor&, const Tensor&, Tensor&)),
      OPENREG_META("aten::bitwise_or.Tensor_out", bitwise_or_outf,
                   Tensor&(const Tensor&, const Tensor&, Tensor&)),
      OPENREG_META("aten::bitwise_xor.Tensor_out", bitwise_xor_outf,
                   Tensor&(const Tensor&, const Tensor&, Tensor&)),
      OPENREG_META("aten::bitwise_not.out", bitwise_not_outf, Tensor&(const Tensor&, Tensor&)),
      OPENREG_META("aten::exp.out", exp_outf, Tensor&(const Tensor&, Tensor&)),
      OPENREG_META("aten::log.out", log_outf, Tensor&(const Tensor&, Tensor&)),
      OPENREG_META("aten::sign.out", sign_outf, Tensor&(const Tensor&, Tensor&)),
      OPENREG_META("aten::sgn.out", sgn_outf, Tensor&(const Tensor&, Tensor&)),
      OPENREG_META("aten::floor.out", floor_outf, Tensor&(const Tensor&, Tensor&)),
      OPENREG_META("aten::round.out", round_outf, Tensor&(const Tensor&, Tensor&)),
      OPENREG_META("aten::round.decimals_out", round_outf,
                   Tensor&(const Tensor&, int64_t, Tensor&)),
      OPENREG_META("aten::erfinv.out", erfinv_outf, Tensor&(const Tensor&, Tensor&)),
      OPENREG_META("aten::softplus.out", softplus_outf,
                   Tensor&(const Tensor&, const Scalar&, const Scalar&, Tensor&)),
      OPENREG_META("aten::sum.IntList_out", sum_outf,
                   Tensor&(const Tensor&, at::OptionalIntArrayRef, bool, std::optional<ScalarType>,
                       Tensor&)),
      OPENREG_META("aten::mean.out", mean_outf,
                   Tensor&(const Tensor&, at::OptionalIntArrayRef, bool, std::optional<ScalarType>,
                       Tensor&)),
      OPENREG_META("aten::prod.int_out", prod_outf,
                   Tensor&(const Tensor&, int64_t, bool, std::optional<ScalarType>, Tensor&)),
      OPENREG_META("aten::amax.out", amax_outf, Tensor&(const Tensor&, IntArrayRef, bool, Tensor&)),
      OPENREG_META("aten::argmax.out", argmax_outf,
                   Tensor&(const Tensor&, std::optional<int64_t>, bool, Tensor&)),
      OPENREG_META("aten::all.all_out", all_outf, Tensor&(const Tensor&, Tensor&)),
      OPENREG_META("aten::all.out", all_outf, Tensor&(const Tensor&, int64_t, bool, Tensor&)),
      OPENREG_META("aten::all.dims_out", all_outf,
                   Tensor&(const Tensor&, at::OptionalIntArrayRef, bool, Tensor&)),
      OPENREG_META("aten::any.all_out", any_outf, Tensor&(const Tensor&, Tensor&)),
      OPENREG_META("aten::any.out", any_outf, Tensor&(const Tensor&, int64_t, bool, Tensor&)),
      OPENREG_META("aten::any.dims_out", any_outf,
                   Tensor&(const Tensor&, at::OptionalIntArrayRef, bool, Tensor&)),
      OPENREG_META("aten::mse_loss", mse_loss, Tensor(const Tensor&, const Tensor&, int64_t)),
      OPENREG_META("aten::nll_loss_forward.output", nll_loss_forward_outf,
                   std::tuple<Tensor&, Tensor&>(const Tensor&, const Tensor&,
                       const std::optional<Tensor>&, int64_t, int64_t, Tensor&, Tensor&)),
      OPENREG_OWN_META("aten::_softmax.out", softmaxOutMeta),
      OPENREG_OWN_META("aten::_log_softmax.out", logSoftmaxOutMeta),
      OPENREG_META("aten::max_pool2d_with_indices", max_pool2d_with_indices,
                   std::tuple<Tensor, Tensor>(const Tensor&, IntArrayRef, IntArrayRef, IntArrayRef,
                       IntArrayRef, bool)),
      OPENREG_META("aten::max_pool2d_with_indices.out", max_pool2d_with_indices_outf,
                   std::tuple<Tensor&, Tensor&>(const Tensor&, IntArrayRef, IntArrayRef,
                       IntArrayRef, IntArrayRef, bool, Tensor&, Tensor&)),
      // Pointwise: math and activation functions, special functions.
      OPENREG_UNARY_META(acos), OPENREG_UNARY_META(acosh), OPENREG_UNARY_META(asin),
      OPENREG_UNARY_META(asinh), OPENREG_UNARY_META(atan), OPENREG_UNARY_META(atanh),
      OPENREG_UNARY_META(ceil), OPENREG_UNARY_META(cos), OPENREG_UNARY_META(cosh),
      OPENREG_UNARY_META(digamma), OPENREG_UNARY_META(erf), OPENREG_UNARY_META(erfc),
      OPENREG_UNARY_META(exp2), OPENREG_UNARY_META(expm1), OPENREG_UNARY_META(frac),
      OPENREG_UNARY_META(hardsigmoid), OPENREG_UNARY_META(i0), OPENREG_UNARY_META(isneginf),
      OPENREG_UNARY_META(isposinf), OPENREG_UNARY_META(lgamma), OPENREG_UNARY_META(log10),
      OPENREG_UNARY_META(log1p), OPENREG_UNARY_META(log2), OPENREG_UNARY_META(mish),
      OPENREG_UNARY_META(neg), OPENREG_UNARY_META(reciprocal), OPENREG_UNARY_META(rsqrt),
      OPENREG_UNARY_META(sigmoid), OPENREG_UNARY_META(signbit), OPENREG_UNARY_META(silu),
      OPENREG_UNARY_META(sin), OPENREG_UNARY_META(sinc), OPENREG_UNARY_META(sinh),
      OPENREG_UNARY_META(special_bessel_j0), OPENREG_UNARY_META(special_bessel_j1),
      OPENREG_UNARY_META(special_bessel_y0), OPENREG_UNARY_META(special_bessel_y1),
      OPENREG_UNARY_META(special_entr), OPENREG_UNARY_META(special_erfcx),
      OPENREG_UNARY_META(special_i0e), OPENREG_UNARY_META(special_i1),
      OPENREG_UNARY_META(special_i1e), OPENREG_UNARY_META(special_log_ndtr),
      OPENREG_UNARY_META(special_modified_bessel_i0),
      OPENREG_UNARY_META(special_modified_bessel_i1),
      OPENREG_UNARY_META(special_modified_bessel_k0),
      OPENREG_UNARY_META(special_modified_bessel_k1), OPENREG_UNARY_META(special_ndtri),
      OPENREG_UNARY_META(sqrt), OPENREG_UNARY_META(tan), OPENREG_UNARY_META(tanh),
      OPENREG_UNARY_META(trunc),
      OPENREG_BINARY_META(copysign), OPENREG_BINARY_META(fmax), OPENREG_BINARY_META(fmin),
      OPENREG_BINARY_META(gcd), OPENREG_BINARY_META(igamma), OPENREG_BINARY_META(igammac),
      OPENREG_BINARY_META(lcm), OPENREG_BINARY_META(logaddexp2), OPENREG_BINARY_META(logaddexp),
      OPENREG_BINARY_META(nextafter), OPENREG_BINARY_META(special_xlog1py),
      OPENREG_BINARY_META(special_zeta),
      OPENREG_META("aten::leaky_relu.out", leaky_relu_outf,
                   Tensor&(const Tensor&, const Scalar&, Tensor&)),
      OPENREG_META("aten::elu.out", elu_outf,
                   Tensor&(const Tensor&, const Scalar&, const Scalar&, const Scalar&, Tensor&)),
      OPENREG_META("aten::glu.out", glu_outf, Tensor&(const Tensor&, int64_t, Tensor&)),
      OPENREG_META("aten::clamp.Tensor_out", clamp_outf,
                   Tensor&(const Tensor&, const std::optional<Tensor>&, const std::optional<Tensor>&,
                       Tensor&)),
      OPENREG_META("aten::isin.Tensor_Tensor_out", isin_outf,
                   Tensor&(const Tensor&, const Tensor&, bool, bool, Tensor&)),
      OPENREG_META("aten::scatter_reduce.two_out", scatter_reduce_outf,
                   Tensor&(const Tensor&, int64_t, const Tensor&, const Tensor&, c10::string_view, bool,
                       Tensor&)),
      OPENREG_META("aten::upsample_bilinear2d.out", upsample_bilinear2d_outf,
                   Tensor&(const Tensor&, IntArrayRef, bool, std::optional<double>,
                       std::optional<double>, Tensor&)),
      OPENREG_META("aten::smooth_l1_loss", smooth_l1_loss,
                   Tensor(const Tensor&, const Tensor&, int64_t, double)),
      OPENREG_META("aten::hypot.out", hypot_outf, Tensor&(const Tensor&, const Tensor&, Tensor&)),
      OPENREG_META("aten::xlogy.OutTensor", xlogy_outf,
                   Tensor&(const Tensor&, const Tensor&, Tensor&)),
      OPENREG_META("aten::upsample_nearest2d.out", upsample_nearest2d_outf,
                   Tensor&(const Tensor&, IntArrayRef, std::optional<double>, std::optional<double>,
                       Tensor&)),
  };
  // Each function must take what the operator's schema says, or boxing would
  // read the stack wrongly: checked once, against the registered schemas.
  for (const auto& [name, entry] : *table) {
    const auto dot = name.find('.');
    const auto op = c10::Dispatcher::singleton().findSchema(
        {name.substr(0, dot), dot == std::string::npos ? "" : name.substr(dot + 1)});
    TORCH_INTERNAL_ASSERT(op.has_value(), "openreg: no operator ", name);
    const auto difference = c10::findSchemaDifferences(entry.signature, op->schema());
    TORCH_INTERNAL_ASSERT(!difference, "openreg: the C++ Meta kernel for ", name,
                          " does not match its schema: ", *difference);
  }
  return table;
}

#undef OPENREG_BINARY_META
#undef OPENREG_UNARY_META
#undef OPENREG_OWN_META
#undef OPENREG_META

}  // namespace

const c10::KernelFunction* cppMetaKernel(const c10::OperatorName& op) {
  static const auto* table = makeTable();  // leaked: read until exit
  auto it = table->find(c10::toString(op));
  return it == table->end() ? nullptr : &it->second.kernel;
}

}  // namespace openreg::kernels
