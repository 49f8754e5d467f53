// What the generic fallback (Fallback.cpp) cannot know for a few operators,
// added around it: argument checks that their Meta kernels leave to the CPU
// kernel (where they would fail the stream instead of raising at the call),
// result dtypes the Meta kernel gets wrong, and outputs the CPU kernel leaves
// undefined. RegisterFallbackRoutes.cpp
// routes the operators here. Tests: tests/ops/test_error_inputs.py,
// tests/ops/test_fallback_checks.py.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ExpandUtils.h>
#include <ATen/native/BucketizationUtils.h>
#include <ATen/native/IndexingUtils.h>
#include <ATen/native/cpu/mixed_data_type.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/_index_put_impl.h>
#include <ATen/ops/index_meta_dispatch.h>
#include <torch/library.h>

#include <memory>
#include <utility>
#include <vector>

#include "Kernels.h"

namespace openreg::kernels {
namespace {

using c10::IValue;

const IValue* argumentsOf(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  return stack->data() + stack->size() - op.schema().arguments().size();
}

// convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, ...)
void checkConvolutionArguments(const IValue* args) {
  auto any = [](const IValue& v, auto bad) {
    if (!v.isIntList()) return false;
    for (int64_t x : v.toIntVector())
      if (bad(x)) return true;
    return false;
  };
  TORCH_CHECK(!any(args[4], [](int64_t x) { return x < 0; }), "negative padding is not supported");
  TORCH_CHECK(!any(args[7], [](int64_t x) { return x < 0; }),
              "negative output_padding is not supported");
  TORCH_CHECK(!any(args[3], [](int64_t x) { return x <= 0; }), "non-positive stride is not supported");
  TORCH_CHECK(!any(args[5], [](int64_t x) { return x < 0; }), "dilation should be greater than zero");
  TORCH_CHECK(!any(args[5], [](int64_t x) { return x == 0; }),
              "dilation should be greater than zero, but got ", args[5].toDimVector());
}

// _amp_update_scale_(self, growth_tracker, found_inf, ...): the CPU and CUDA
// kernels check on the host, in these words (GradScaler's state tensors).
void checkAmpUpdateScaleArguments(const IValue* args) {
  const at::Tensor& scale = args[0].toTensor();
  const at::Tensor& tracker = args[1].toTensor();
  const at::Tensor& found_inf = args[2].toTensor();
  TORCH_CHECK(tracker.numel() == 1, "growth_tracker must be a 1-element tensor.");
  TORCH_CHECK(scale.numel() == 1, "current_scale must be a 1-element tensor.");
  TORCH_CHECK(found_inf.numel() == 1, "found_inf must be a 1-element tensor.");
  TORCH_CHECK(tracker.scalar_type() == at::kInt, "growth_tracker must be an int tensor.");
  TORCH_CHECK(scale.scalar_type() == at::kFloat, "current_scale must be a float tensor.");
  TORCH_CHECK(found_inf.scalar_type() == at::kFloat, "found_inf must be a float tensor.");
}

// The argument checks below are the CPU kernels' own (same order, words and
// exception type), made on the host where CUDA makes them: cheap checks of
// dtypes and shapes, no data read unless CUDA reads it too (normal's std).

bool isMask(const at::Tensor& index) {
  return index.scalar_type() == at::kBool || index.scalar_type() == at::kByte;
}

// The shape of self[indices], from index's C++ Meta kernel, a mask standing for
// the long indices of `count(mask)` selected elements (one per mask dimension,
// as ATen's expandTensors turns it into).
template <class Count>
std::vector<int64_t> indexingResultShape(const at::Tensor& self,
                                         const c10::List<std::optional<at::Tensor>>& indices,
                                         Count count) {
  auto onMeta = [](at::IntArrayRef sizes, at::ScalarType dtype) {
    return at::empty(sizes, at::TensorOptions(at::kMeta).dtype(dtype));
  };
  c10::List<std::optional<at::Tensor>> metaIndices;
  std::vector<at::Tensor> defined;
  for (const std::optional<at::Tensor>& index : indices) {
    if (!index.has_value() || !index->defined()) {
      metaIndices.push_back(std::nullopt);
    } else if (isMask(*index)) {
      const int64_t n = count(*index);
      for (int64_t j = 0; j < index->dim(); ++j) defined.push_back(onMeta({n}, at::kLong));
      for (int64_t j = 0; j < index->dim(); ++j) metaIndices.push_back(defined.back());
    } else {
      defined.push_back(onMeta(index->sizes(), index->scalar_type()));
      metaIndices.push_back(defined.back());
    }
  }
  // make_info's check, in its words (index's Meta kernel has others).
  try {
    at::DimVector shape;
    for (const at::Tensor& t : defined) shape = at::infer_size_dimvector(shape, t.sizes());
  } catch (const c10::Error&) {
    std::string shapes;
    for (const at::Tensor& t : defined) shapes += (shapes.empty() ? "" : ", ") + c10::str(t.sizes());
    TORCH_CHECK_INDEX(false, "shape mismatch: indexing tensors could not be broadcast together "
                      "with shapes ", shapes);
  }
  // ATen's C++ Meta kernel, the CPU kernel's own checks (the Meta key's Python
  // kernel would import sympy at a process's first x[i] = v).
  return at::meta::index(onMeta(self.sizes(), self.scalar_type()), metaIndices).sizes().vec();
}

// _index_put_impl_(self, indices, values, accumulate, unsafe) (x[i] = v,
// index_put_): the index dtypes and mask shapes (make_info) and the values'
// shape and dtype (make_index_put_iterator). With one mask and a one-element
// value, the CPU kernel takes masked_fill_ instead, which accepts any value
// dtype but only a bool mask.
void checkIndexPutArguments(const IValue* args) {
  const at::Tensor& self = args[0].toTensor();
  const auto indices = args[1].toOptionalTensorList();
  const at::Tensor& values = args[2].toTensor();
  const bool accumulate = args[3].toBool();
  int64_t dim = 0;  // the dimension of self the next index starts at
  int masks = 0, others = 0;
  bool scalarMask = false;
  for (const std::optional<at::Tensor>& index : indices) {
    if (!index.has_value() || !index->defined()) {
      ++dim;
    } else if (isMask(*index)) {
      ++masks;
      scalarMask |= index->dim() == 0;
      for (int64_t j = 0; j < index->dim() && dim + j < self.dim(); ++j)
        if (index->size(j) != self.size(dim + j)) at::native::invalid_mask(self, dim + j, *index, j);
      dim += index->dim();
    } else {
      ++others;
      ++dim;
    }
  }
  if (!accumulate && values.numel() == 1 && masks == 1 && others == 0) {
    for (const std::optional<at::Tensor>& index : indices)
      if (index.has_value() && index->defined())
        TORCH_CHECK(index->scalar_type() == at::kBool, "masked_fill_ only supports boolean masks, "
                    "but got mask with dtype ", index->dtype());
    return;
  }
  at::native::checkIndexTensorTypes(indices, /*allow_int=*/true);
  if (others + masks == 0 || scalarMask) {
    // No index tensor, or a 0-dim mask: the CPU kernel's checks of these rare
    // forms are its own (internal asserts among them). Run it on host tensors
    // of the same shapes, the indices copied (a synchronisation, as a mask's
    // count would be), so that its error is raised at the call.
    c10::List<std::optional<at::Tensor>> host;
    for (const std::optional<at::Tensor>& index : indices)
      host.push_back(index.has_value() && index->defined() ? std::optional<at::Tensor>(index->cpu())
                                                          : std::nullopt);
    at::Tensor target = at::zeros(self.sizes(), self.options().device(at::kCPU));
    at::_index_put_impl_(target, host, at::zeros(values.sizes(), values.options().device(at::kCPU)),
                         accumulate, /*unsafe=*/false);
  } else {
    // A mask's selection is its nonzero count, data on the device. Values
    // that broadcast to a one-element selection broadcast to any (a size 1,
    // or none, where the selection goes), so most calls need not read it; the
    // others read it as CUDA does (its kernel synchronises on mask.nonzero()).
    std::vector<int64_t> result = indexingResultShape(self, indices, [](const at::Tensor&) { return 1; });
    if (masks > 0 && (others > 0 || !at::is_expandable_to(values.sizes(), result)))
      result = indexingResultShape(self, indices, [](const at::Tensor& mask) {
        return mask.count_nonzero().item<int64_t>();
      });
    TORCH_CHECK(at::is_expandable_to(values.sizes(), result), "shape mismatch: value tensor "
                "of shape ", values.sizes(), " cannot be broadcast to indexing result of shape ",
                at::IntArrayRef(result));
  }
  TORCH_CHECK(values.scalar_type() == self.scalar_type(),
              "Index put requires the source and destination dtypes match, got ",
              self.scalar_type(), " for the destination and ", values.scalar_type(),
              " for the source.");
}

// masked_fill_(self, mask, value): value is a Scalar or a 0-dim tensor.
void checkMaskedFillArguments(const IValue* args) {
  const at::Tensor& mask = args[1].toTensor();
  if (args[2].isTensor())
    TORCH_CHECK(args[2].toTensor().dim() == 0, "masked_fill_ only supports a 0-dimensional value "
                "tensor, but got tensor with ", args[2].toTensor().dim(), " dimension(s).");
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_fill_ only supports boolean masks, but got "
              "mask with dtype ", mask.dtype());
}

// put_(self, index, source, accumulate)
void checkPutArguments(const IValue* args) {
  const at::Tensor& self = args[0].toTensor();
  const at::Tensor& index = args[1].toTensor();
  const at::Tensor& source = args[2].toTensor();
  TORCH_CHECK(index.scalar_type() == at::kLong, "put_(): Expected a long tensor for index, but got ",
              index.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(), "put_(): self and source expected to have "
              "the same dtype, but got self.dtype = ", self.scalar_type(), " and source.dtype = ",
              source.scalar_type());
  TORCH_CHECK_INDEX(source.numel() == index.numel(), "put_(): Expected source and index to have "
                    "the same number of elements, but got source.numel() = ", source.numel(),
                    ", index.numel() = ", index.numel());
  TORCH_CHECK_INDEX(!(self.numel() == 0 && index.numel() != 0),
                    "put_(): Tried to indexing on an empty tensor");
}

// index_fill_(self, dim, index, value)
void checkIndexFillArguments(const IValue* args) {
  TORCH_CHECK_INDEX(args[2].toTensor().scalar_type() == at::kLong,
                    "index_fill_(): Expected dtype int64 for index.");
}

// normal(mean, std, ...) with a std tensor: CUDA too reads std's minimum on
// the host (a synchronisation) to raise this at the call.
void checkNormalStd(const IValue* args) {
  const at::Tensor& std = args[1].toTensor();
  TORCH_CHECK(!std.is_complex(), "normal expects standard deviation to be non-complex");
  TORCH_CHECK(std.numel() == 0 || std.min().ge(0).item<bool>(),
              "normal expects all elements of std >= 0.0");
}

// linalg_cross(self, other, dim[, out]): the CPU kernel reads `other` and
// writes `out` as the result's dtype, which is self's (typed data pointers).
void checkCrossArguments(const IValue* args, size_t num_args) {
  const at::Tensor& self = args[0].toTensor();
  const at::Tensor& other = args[1].toTensor();
  TORCH_CHECK(other.scalar_type() == self.scalar_type(), "expected scalar type ",
              self.scalar_type(), " but found ", other.scalar_type());
  if (num_args > 3)
    TORCH_CHECK(args[3].toTensor().scalar_type() == self.scalar_type(), "Expected out tensor to "
                "have dtype ", self.dtype(), ", but got ", args[3].toTensor().dtype(), " instead");
}

// addbmm(self, batch1, batch2, beta, alpha[, out]): the CPU kernel runs
// result.addmm_(batch1[b], batch2[b]) per batch (result: out, or self), and
// addmm's meta checks the dtypes; no batch, no check.
void checkAddbmmArguments(const IValue* args, size_t num_args) {
  const at::Tensor& batch1 = args[1].toTensor();
  const at::Tensor& batch2 = args[2].toTensor();
  if (batch1.dim() != 3 || batch1.size(0) == 0) return;
  const at::Tensor& result = num_args > 5 ? args[5].toTensor() : args[0].toTensor();
  TORCH_CHECK(result.scalar_type() == batch2.scalar_type(), "self and mat2 must have the same "
              "dtype, but got ", result.scalar_type(), " and ", batch2.scalar_type());
  TORCH_CHECK(batch1.scalar_type() == batch2.scalar_type(), "mat1 and mat2 must have the same "
              "dtype, but got ", batch1.scalar_type(), " and ", batch2.scalar_type());
}

// native_group_norm(input, weight, bias, ...): a parameter of another dtype
// than the input must be float32 (a reduced-precision input's statistics).
void checkGroupNormArguments(const IValue* args) {
  const at::Tensor& input = args[0].toTensor();
  const at::Tensor weight = args[1].toOptional<at::Tensor>().value_or(at::Tensor());
  const at::Tensor bias = args[2].toOptional<at::Tensor>().value_or(at::Tensor());
  if (at::native::is_mixed_type(input, weight, bias))
    at::native::check_mixed_data_type(input, weight, bias);
}

// native_group_norm -> (out, mean, rstd): with float32 parameters for a
// reduced-precision input the CPU keeps the statistics in float32, where Meta
// gives them the input's dtype (the probe cannot learn it: the N, C, HxW
// arguments do not fit its shapes).
std::optional<std::vector<at::ScalarType>> groupNormResultDtypes(const IValue* args) {
  const at::Tensor& input = args[0].toTensor();
  const at::Tensor weight = args[1].toOptional<at::Tensor>().value_or(at::Tensor());
  const at::Tensor bias = args[2].toOptional<at::Tensor>().value_or(at::Tensor());
  if (!at::native::is_mixed_type(input, weight, bias)) return std::nullopt;
  const at::ScalarType statistics = at::native::param_scalar_type(input, /*is_mixed_type=*/true);
  return std::vector<at::ScalarType>{input.scalar_type(), statistics, statistics};
}

// native_group_norm_backward(grad_out, input, mean, rstd, weight, ...) ->
// (grad_input, grad_weight, grad_bias): with those float32 statistics and
// weight, Meta returns grad_input in float32, the CPU in the input's dtype.
std::optional<std::vector<at::ScalarType>> groupNormBackwardResultDtypes(const IValue* args) {
  const at::Tensor& input = args[1].toTensor();
  const at::Tensor weight = args[4].toOptional<at::Tensor>().value_or(at::Tensor());
  if (!at::native::is_mixed_type(input, weight)) return std::nullopt;
  return std::vector<at::ScalarType>{input.scalar_type(), weight.scalar_type(), weight.scalar_type()};
}

// binary_cross_entropy(self, target, ...): the CPU kernel's TensorIterator
// takes one dtype, the loss's (self's).
void checkBinaryCrossEntropyArguments(const IValue* args) {
  const at::Tensor& self = args[0].toTensor();
  const at::Tensor& target = args[1].toTensor();
  TORCH_CHECK(target.scalar_type() == self.scalar_type(), "Found dtype ", target.scalar_type(),
              " but expected ", self.scalar_type());
}

// searchsorted(sorted_sequence, self, out_int32, right, side, sorter[, out]):
// ATen's own pre-check, as CUDA makes it (it reads a sorter's range).
void checkSearchsortedArguments(const IValue* args, size_t num_args) {
  const at::Tensor& boundaries = args[0].toTensor();
  const at::Tensor& input = args[1].toTensor();
  const bool out_int32 = args[2].toBool();
  const at::Tensor output = num_args > 6 ? args[6].toTensor()
                                         : at::empty({0}, at::TensorOptions(at::kMeta).dtype(
                                                              out_int32 ? at::kInt : at::kLong));
  const auto side = args[4].isNone() ? std::nullopt
                                     : std::optional<std::string_view>(args[4].toStringView());
  const at::Tensor sorter = args[5].toOptional<at::Tensor>().value_or(at::Tensor());
  at::native::searchsorted_pre_check(boundaries, input, output, out_int32, args[3].toBool(), side,
                                     sorter);
}

// _amp_foreach_non_finite_check_and_unscale_(scaled_grads, found_inf,
// inv_scale): GradScaler's state tensors, checked by the CPU and CUDA kernels
// on the host in these words.
void checkAmpUnscaleArguments(const IValue* args) {
  const at::Tensor& found_inf = args[1].toTensor();
  const at::Tensor& inv_scale = args[2].toTensor();
  TORCH_CHECK(inv_scale.numel() == 1, "inv_scale must be a 1-element tensor.");
  TORCH_CHECK(found_inf.numel() == 1, "found_inf must be a 1-element tensor.");
  TORCH_CHECK(inv_scale.scalar_type() == at::kFloat, "inv_scale must be a float tensor.");
  TORCH_CHECK(found_inf.scalar_type() == at::kFloat, "found_inf must be a float tensor.");
  for (const at::Tensor& grad : args[0].toTensorVector())
    TORCH_CHECK(at::isFloatingType(grad.scalar_type()),
                "\"_amp_foreach_non_finite_check_and_unscale_cpu\" not implemented for '",
                grad.scalar_type(), "'");
}

// _fused_adam(w)_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
// state_steps, *, lr, beta1, beta2, weight_decay, eps, amsgrad, ...): the
// list lengths the CPU kernel checks (its words).
void checkFusedAdamArguments(const IValue* args) {
  // Named as in the CPU kernel, whose bare TORCH_CHECKs spell the condition.
  const size_t n_tensors = args[0].toTensorList().size();
  const auto grads = args[1].toTensorList(), exp_avgs = args[2].toTensorList(),
             exp_avg_sqs = args[3].toTensorList(), max_exp_avg_sqs = args[4].toTensorList(),
             state_steps = args[5].toTensorList();
  TORCH_CHECK(grads.size() == n_tensors);
  TORCH_CHECK(exp_avgs.size() == n_tensors);
  TORCH_CHECK(exp_avg_sqs.size() == n_tensors);
  if (args[11].toBool()) {  // amsgrad
    TORCH_CHECK(max_exp_avg_sqs.size() == n_tensors);
  } else {
    TORCH_CHECK(max_exp_avg_sqs.empty());
  }
  TORCH_CHECK(state_steps.size() == n_tensors);
}

using Check = void (*)(const IValue* args, size_t num_args);
template <void (*F)(const IValue*)>
void ignoringCount(const IValue* args, size_t) {
  F(args);
}
void noCheck(const IValue*, size_t) {}
// The CPU kernel's result dtypes where Meta's differ (nullopt: Meta's are right).
using ResultDtypesOf = std::optional<std::vector<at::ScalarType>> (*)(const IValue* args);

struct CheckedOperator {
  const char* name;  // name.overload
  Check check;
  ResultDtypesOf resultDtypes = nullptr;
};

const std::vector<CheckedOperator>& checkedOperators() {
  static const std::vector<CheckedOperator> table = {
      {"_index_put_impl_", ignoringCount<checkIndexPutArguments>},
      {"masked_fill_.Scalar", ignoringCount<checkMaskedFillArguments>},
      {"masked_fill_.Tensor", ignoringCount<checkMaskedFillArguments>},
      {"put_", ignoringCount<checkPutArguments>},
      {"index_fill_.int_Scalar", ignoringCount<checkIndexFillArguments>},
      {"index_fill_.int_Tensor", ignoringCount<checkIndexFillArguments>},
      {"normal.Tensor_Tensor", ignoringCount<checkNormalStd>},
      {"normal.Tensor_Tensor_out", ignoringCount<checkNormalStd>},
      {"normal.float_Tensor", ignoringCount<checkNormalStd>},
      {"normal.float_Tensor_out", ignoringCount<checkNormalStd>},
      {"linalg_cross", checkCrossArguments},
      {"linalg_cross.out", checkCrossArguments},
      {"addbmm", checkAddbmmArguments},
      {"addbmm_", checkAddbmmArguments},
      {"addbmm.out", checkAddbmmArguments},
      {"native_group_norm", ignoringCount<checkGroupNormArguments>, groupNormResultDtypes},
      {"native_group_norm_backward", noCheck, groupNormBackwardResultDtypes},
      {"binary_cross_entropy", ignoringCount<checkBinaryCrossEntropyArguments>},
      {"searchsorted.Tensor", checkSearchsortedArguments},
      {"searchsorted.Tensor_out", checkSearchsortedArguments},
      {"_amp_foreach_non_finite_check_and_unscale_", ignoringCount<checkAmpUnscaleArguments>},
      {"_fused_adam_", ignoringCount<checkFusedAdamArguments>},
      {"_fused_adam_.tensor_lr", ignoringCount<checkFusedAdamArguments>},
      {"_fused_adamw_.tensor_lr", ignoringCount<checkFusedAdamArguments>},
  };
  return table;
}

// The fallback behind an operator's checks; each registration holds its own
// check, so a call looks nothing up.
struct CheckedFallback final : c10::OperatorKernel {
  explicit CheckedFallback(const CheckedOperator& entry) : entry(entry) {}
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const IValue* args = argumentsOf(op, stack);
    entry.check(args, op.schema().arguments().size());
    if (entry.resultDtypes)
      if (const auto dtypes = entry.resultDtypes(args))
        return fallbackWithResultDtypes(op, stack, *dtypes);
    fallback(op, stack);
  }
  const CheckedOperator entry;
};

}  // namespace

void registerCheckedFallbacks(torch::Library& m) {
  for (const CheckedOperator& entry : checkedOperators())
    m.impl(entry.name, torch::CppFunction::makeFromBoxedKernel(
                           c10::BoxedKernel::makeFromFunctor(std::make_unique<CheckedFallback>(entry))));
}

void convolutionFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  checkConvolutionArguments(argumentsOf(op, stack));
  fallback(op, stack);
}

void ampUpdateScaleFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  checkAmpUpdateScaleArguments(argumentsOf(op, stack));
  fallback(op, stack);
}

// index.Tensor (x[mask]) with boolean or uint8 masks: CUDA's order, each
// mask's nonzero (a synchronisation, the one sync debug mode reports) and
// then an ordinary asynchronous index by the positions. The fallback alone
// would run the whole data-dependent operator on the host, a second wait.
void indexFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  IValue* args = stack->data() + stack->size() - op.schema().arguments().size();
  const at::Tensor& self = args[0].toTensor();
  const auto indices = args[1].toOptionalTensorList();
  bool masked = false;
  for (const std::optional<at::Tensor>& index : indices)
    masked |= index.has_value() && index->defined() && isMask(*index) && index->dim() > 0;
  if (masked) {
    // ATen's own expansion (mask shape checks in its words, then nonzero).
    c10::List<std::optional<at::Tensor>> positions;
    for (at::Tensor& t : at::native::expandTensors(self, indices))
      positions.push_back(t.defined() ? std::optional<at::Tensor>(std::move(t)) : std::nullopt);
    args[1] = positions;
  }
  fallback(op, stack);
}

// _native_multi_head_attention(..., need_weights, ...) -> (out, weights): the
// CPU kernel returns undefined weights (None in Python) when they are not
// needed; the fallback's outputs, sized by the Meta kernel, hold an empty tensor.
void multiHeadAttentionFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  static const size_t kNeedWeights = *op.schema().argumentIndexWithName("need_weights");
  const bool need_weights = argumentsOf(op, stack)[kNeedWeights].toBool();
  fallback(op, stack);
  if (!need_weights) stack->back() = at::Tensor();
}

}  // namespace openreg::kernels
