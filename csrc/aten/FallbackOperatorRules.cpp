// Operator-specific rules of the generic fallback: FallbackOperatorRules.h.
#include "FallbackOperatorRules.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ones.h>
#include <c10/core/MemoryFormat.h>

#include <algorithm>
#include <unordered_set>

#include "Kernels.h"
#include "Launch.h"

namespace openreg::kernels {

using c10::IValue;

SyncOnlyOps::SyncOnlyOps() {
  names_["aten::nonzero"] = Reason::kShapes;  // x.nonzero(), x[mask]: the size is data
  // eval mode: CPU returns empty save_mean/save_invstd, Meta [C]; reduced-
  // precision inputs with parameters of their dtype: CPU keeps statistics
  // in that dtype, Meta in float32.
  for (const char* name : {"aten::native_batch_norm", "aten::_native_batch_norm_legit",
                           "aten::_batch_norm_with_update"})
    names_[name] = Reason::kBatchNorm;
  // CPU returns empty offset2bag / max_indices for some modes, Meta full.
  for (const char* name : {"aten::_embedding_bag", "aten::_embedding_bag_forward_only"})
    names_[name] = Reason::kEmbeddingBag;
  for (const char* name : {
           // Meta skips the CPU kernel's argument checks (n_sample against
           // the categories, non-negative probabilities).
           "aten::multinomial",
           // Likewise for these CPU kernels' checks (out= overlapping an
           // input, out dtype, mask dtype, boundaries' rank); found with
           // OpInfo's error_inputs (tests/ops/test_error_inputs.py).
           "aten::kthvalue", "aten::take", "aten::masked_scatter", "aten::masked_scatter_",
           "aten::bucketize", "aten::aminmax", "aten::complex",
           // The CPU kernel checks its result (no convergence, a NaN input)
           // and raises, as CUDA's synchronises to: at the call.
           "aten::_linalg_eigh",
       })
    names_[name] = Reason::kChecks;
}

SyncOnlyOps::Reason SyncOnlyOps::reason(const c10::OperatorName& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = names_.find(c10::toString(name));
  if (it == names_.end()) it = names_.find(name.name);
  return it == names_.end() ? Reason::kNone : it->second;
}

void SyncOnlyOps::insert(const c10::OperatorName& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  names_[c10::toString(name)] = Reason::kShapes;
}

SyncOnlyOps& syncOnlyOps() {
  static SyncOnlyOps ops;
  return ops;
}

namespace {

// Batch norm: (input, weight, bias[, running_mean, running_var][, training],
// momentum, eps), training implied by _batch_norm_with_update. The argument
// named "training", or true.
bool batchNormTraining(const c10::FunctionSchema& schema, const IValue* args) {
  const auto index = schema.argumentIndexWithName("training");
  return !index || args[*index].toBool();
}

}  // namespace

// Meta describes the CPU's results (given batchNormResultsAsTheCpus) of a
// functional batch norm whose tensors all have the input's dtype, float32 or
// float64, or whose input is bfloat16/float16 with float32 parameters (the
// CPU's mixed-type kernel: a conv net under autocast), and which passes the
// CPU kernel's checks that Meta skips (made here, so they raise at the call
// through the synchronous path). Other dtype mixes follow the CPU's own rules
// and checks, and a reduced-precision batch norm without any parameter keeps
// its statistics in the input's dtype (Meta: float32): synchronous path too.
bool embeddingBagArgumentsPassTheCpusChecks(const IValue* args) {
  // (weight, indices, offsets, scale_grad_by_freq, mode, sparse,
  // per_sample_weights, ...): what the CPU kernel checks on the host besides
  // what Meta does; anything else takes the synchronous path and its error.
  const at::Tensor& weight = args[0].toTensor();
  const at::Tensor& indices = args[1].toTensor();
  const at::Tensor& offsets = args[2].toTensor();
  const int64_t mode = args[4].toInt();
  if (weight.dim() != 2 || indices.dim() != 1 || offsets.dim() != 1 ||
      indices.scalar_type() != offsets.scalar_type() || mode < 0 || mode > 2)
    return false;
  const IValue& psw = args[6];
  if (psw.isNone() || !psw.toTensor().defined()) return true;
  const at::Tensor& weights = psw.toTensor();
  return mode == 0 && weights.dim() == 1 && weights.numel() == indices.numel() &&
         weights.scalar_type() == weight.scalar_type();
}

bool batchNormAgreesWithMeta(const c10::FunctionSchema& schema, const IValue* args) {
  if (!schema.overload_name().empty() && schema.overload_name() != "no_stats") return false;  // out=
  const at::Tensor& input = args[0].toTensor();
  const auto dtype = input.scalar_type();
  const bool reduced = dtype == at::kBFloat16 || dtype == at::kHalf;
  if ((!reduced && dtype != at::kFloat && dtype != at::kDouble) || input.dim() < 2) return false;
  const auto paramDtype = reduced ? at::kFloat : dtype;
  std::vector<at::Tensor> params;
  for (const char* name : {"weight", "bias", "running_mean", "running_var"}) {
    const auto index = schema.argumentIndexWithName(name);
    params.push_back(index && args[*index].isTensor() ? args[*index].toTensor() : at::Tensor());
  }
  if (params[2].defined() != params[3].defined()) return false;  // both or neither
  bool anyParam = false;
  for (const at::Tensor& p : params) {
    if (!p.defined()) continue;
    if (p.scalar_type() != paramDtype || p.numel() != input.size(1)) return false;
    anyParam = true;
  }
  return anyParam || !reduced;
}

// The CPU's batch norm results: the output (and the backward's grad_input)
// in the input's suggested memory format (Meta keeps a transposed input's
// strides, and gives a channels_last input's gradient contiguous ones); in
// eval mode empty saved statistics (Meta: [C]).
void batchNormResultsAsTheCpus(const c10::OperatorHandle& op, SyncOnlyOps::Reason reason,
                               const IValue* args, torch::jit::Stack& meta_stack) {
  const auto& schema = op.schema();
  const bool backward =
      schema.name() == "aten::native_batch_norm_backward" && schema.overload_name().empty();
  if (!backward && reason != SyncOnlyOps::Reason::kBatchNorm) return;
  const at::Tensor& out = meta_stack[0].toTensor();
  if (out.defined())
    meta_stack[0] = at::empty(out.sizes(), out.options(),
                              args[backward ? 1 : 0].toTensor().suggest_memory_format());
  if (backward || batchNormTraining(schema, args)) return;
  for (size_t i = 1; i < 3 && i < meta_stack.size(); ++i)
    meta_stack[i] = at::empty({0}, meta_stack[i].toTensor().options());
}

// _embedding_bag[_forward_only](weight, indices, offsets, scale_grad_by_freq,
// mode, sparse, per_sample_weights, include_last_offset, padding_idx) returns
// (output, offset2bag, bag_size, max_indices). Meta sizes the last three one
// way; the CPU kernel (torch 2.13, EmbeddingBag.cpp) as below. Checked for
// every mode and flag by tests/ops/test_fallback_checks.py; a kernel still checks
// each result against what was allocated.
void embeddingBagResultsAsTheCpus(const c10::OperatorHandle& op, SyncOnlyOps::Reason reason,
                                  const IValue* args, torch::jit::Stack& meta_stack) {
  const auto& schema = op.schema();
  if (reason != SyncOnlyOps::Reason::kEmbeddingBag || meta_stack.size() != 4) return;
  const bool forwardOnly = schema.name() == "aten::_embedding_bag_forward_only";
  const int64_t mode = args[4].toInt();  // 0 sum, 1 mean, 2 max
  const bool includeLast = args[7].toBool();
  const int64_t paddingIdx = args[8].toInt();
  const int64_t indices = args[1].toTensor().numel();
  const int64_t offsets = args[2].toTensor().size(0);
  const int64_t bags = includeLast ? offsets - 1 : offsets;
  const at::Tensor& weight = args[0].toTensor();
  const int64_t dim = weight.size(1);
  // The CPU's fast path (sum over float, half or bfloat16 rows read with unit
  // stride, no padding index) fills no offset2bag.
  const auto type = weight.scalar_type();
  const IValue& psw = args[6];
  const bool fastPath = mode == 0 && paddingIdx < 0 &&
                        (type == at::kFloat || type == at::kHalf || type == at::kBFloat16) &&
                        weight.stride(1) == 1 &&
                        (psw.isNone() || !psw.toTensor().defined() || psw.toTensor().stride(0) == 1);
  auto resize = [&](size_t i, std::vector<int64_t> sizes) {
    meta_stack[i] = at::empty(sizes, meta_stack[i].toTensor().options());
  };
  resize(1, {fastPath ? 0 : indices});  // offset2bag
  resize(2, {forwardOnly && mode == 0 ? offsets : bags});     // bag_size
  if (mode == 2) resize(3, {bags, dim});                      // max_indices
  else resize(3, {forwardOnly && mode == 0 ? offsets : bags});
}

// The convolution family's Meta kernels leave results contiguous (Meta has no
// backend to ask), but the CPU's 2-D convolutions (mkldnn's, as cuDNN's) give
// channels-last results when the input or weight is channels-last: lay the
// fresh 4-D results out that way, so a channels_last model keeps its format
// from layer to layer as on the CPU. (The CPU's 3-D ones stay contiguous.)
void convolutionOutputsInTheCpusFormat(const c10::OperatorHandle& op,
                                       const std::vector<IValue>& meta_args,
                                       const std::vector<at::Tensor>& meta_tensor_args,
                                       torch::jit::Stack& meta_stack) {
  const std::string& name = op.schema().name();
  if (name != "aten::convolution" && name != "aten::_convolution" &&
      name != "aten::convolution_backward")
    return;
  // The CPU's layout follows the input's and the weight's (not grad_output's).
  // (3-D convolutions with a channels_last_3d tensor do not get here: whether
  // the CPU answers in that format depends on its backend choice, so they run
  // synchronously, convolutionOutputSizes in MetaFunctions.cpp.)
  const size_t first = name == "aten::convolution_backward" ? 1 : 0;
  bool channelsLast = false;
  for (size_t i = first; i < meta_args.size() && i < first + 2; ++i) {
    const IValue& a = meta_args[i];
    channelsLast |= a.isTensor() && a.toTensor().defined() && a.toTensor().dim() == 4 &&
                    a.toTensor().suggest_memory_format() == c10::MemoryFormat::ChannelsLast;
  }
  if (!channelsLast) return;
  for (IValue& r : meta_stack) {
    if (!r.isTensor()) continue;
    const at::Tensor& t = r.toTensor();
    const bool written = std::any_of(meta_tensor_args.begin(), meta_tensor_args.end(),
                                     [&](const at::Tensor& a) { return a.is_same(t); });
    if (!t.defined() || t.dim() != 4 || written || !t.is_contiguous()) continue;
    t.unsafeGetTensorImpl()->set_sizes_and_strides(
        t.sizes(), c10::get_channels_last_strides_2d(t.sizes()), t.storage_offset());
  }
}

// Integer division by a zero the host can see (a Scalar, or a CPU tensor
// such as Python's `x // 0` wraps): the CPU kernel raises ZeroDivisionError
// at the call, and so does this check, by running that kernel on a one-element
// host copy. Queued, the error would fail the stream for good. (A zero in a
// device tensor is data on the device, found inside the kernel, as CUDA's
// device-side checks are.)
void checkHostVisibleZeroDivisor(const c10::OperatorHandle& op, const c10::IValue* args,
                                 size_t num_args) {
  // The cheap tests first: this runs for every call of the fallback.
  if (num_args < 2 || !args[0].isTensor() ||
      !c10::isIntegralType(args[0].toTensor().scalar_type(), false))
    return;
  const c10::IValue& divisor = args[1];
  bool zero = false;
  if (divisor.isScalar()) {
    const c10::Scalar v = divisor.toScalar();
    zero = v.isIntegral(/*includeBool=*/false) && v.toLong() == 0;
  } else if (divisor.isTensor() && divisor.toTensor().device().is_cpu()) {
    const at::Tensor& t = divisor.toTensor();
    zero = c10::isIntegralType(t.scalar_type(), false) && t.numel() > 0 && !t.all().item<bool>();
  }
  static const std::unordered_set<std::string> kDivisions = {
      "aten::floor_divide", "aten::floor_divide_", "aten::remainder", "aten::remainder_",
      "aten::fmod", "aten::fmod_", "aten::div", "aten::div_"};
  if (!zero || !kDivisions.count(op.schema().name())) return;
  torch::jit::Stack probe(args, args + num_args);
  probe[0] = at::ones({1}, args[0].toTensor().options().device(c10::kCPU));
  for (size_t i = 2; i < num_args; ++i)  // an out= argument
    if (probe[i].isTensor() && isOpenReg(probe[i].toTensor()))
      probe[i] = at::empty({0}, probe[i].toTensor().options().device(c10::kCPU));
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &probe);
}

}  // namespace openreg::kernels
