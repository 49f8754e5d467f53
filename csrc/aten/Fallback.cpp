// The generic path for every operator without a native openreg kernel: a
// boxed fallback registered for PrivateUse1 (TORCH_LIBRARY_IMPL(_, PrivateUse1),
// in RegisterOpenReg.cpp with the other registrations).
//
// Asynchronous path (most operators): the host runs the operator on Meta
// tensors to learn output shapes, strides and aliasing, allocates the outputs
// on the device, and queues a kernel that runs the operator's CPU
// implementation on kernelView()s of the arguments, copying fresh results into
// the device outputs. The host never waits.
//
// Synchronous path (data-dependent operators such as nonzero, unique,
// masked_select, or operators returning non-tensors, or without Meta support):
// the current stream is synchronised and the CPU implementation runs on the
// host thread, as CUDA synchronises for such operators.
//
// Random operators draw from a CPU generator made from the openreg generator's
// (seed, offset) at launch (OpenRegGenerator.h), as CUDA's kernels draw from
// Philox at (seed, offset): the first random op after seeding equals the CPU's.
//
// Where Meta and the CPU kernel disagree (output shape/dtype, or argument
// checks only the CPU kernel makes), SyncOnlyOps (FallbackOperatorRules.h,
// with a few operators' result rules) sends the op down the synchronous
// path, so the error is raised on the host instead of inside a kernel (which
// would leave the stream failed). The dispatch probe, run on the
// host before outputs are allocated, gives fresh results the CPU kernel's
// dtypes where Meta's differ, and an out= argument of a dtype the CPU kernel
// refuses raises its error at the call. Kernels verify that the CPU result
// fits the output allocated from Meta. Conformance: tests/ops.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/op_registration/op_registration.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/flat_hash_map.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "../runtime/OpenRegException.h"
#include "../runtime/OpenRegFunctions.h"
#include "../runtime/OpenRegGenerator.h"
#include "../runtime/OpenRegKinetoPlugin.h"
#include "../runtime/OpenRegStream.h"
#include "BoxedArguments.h"
#include "DispatchProbe.h"
#include "FallbackOperatorRules.h"
#include "FallbackStats.h"
#include "InferenceCache.h"
#include "Kernels.h"
#include "Launch.h"
#include "MetaFunctions.h"

namespace openreg::kernels {
namespace {

using c10::IValue;

const c10::DispatchKeySet kCPUKeys(c10::DispatchKey::CPU);
const c10::DispatchKeySet kMetaKeys(c10::DispatchKey::Meta);

bool containsTensor(const IValue& value) {
  bool found = false;
  forEachTensor(value, [&](const at::Tensor&) { found = true; });
  return found;
}

// Ops that legitimately take non-scalar CPU tensors next to device tensors
// (CUDA accepts CPU index tensors for advanced indexing).
bool acceptsHostTensors(const c10::OperatorName& name) {
  const std::string& n = name.name;
  return n.rfind("aten::index", 0) == 0 || n == "aten::_index_put_impl_" ||
         n == "aten::_foreach_add" || n == "aten::_foreach_mul";
}

// Finds the device the op runs on and checks all tensors agree (CUDA's rule:
// one device, plus CPU tensors only as 0-dim scalars).
std::optional<c10::Device> findDevice(const c10::OperatorHandle& op, const IValue* args,
                                      size_t num_args) {
  std::optional<c10::Device> device;
  std::optional<c10::Device> host_tensor;
  std::optional<c10::Device> host_output;  // even a 0-dim one: the op would write a copy
  const auto& schema_args = op.schema().arguments();
  for (size_t i = 0; i < num_args; ++i) {
    const auto* alias = i < schema_args.size() ? schema_args[i].alias_info() : nullptr;
    const bool written = alias && alias->isWrite();
    forEachTensor(args[i], [&](const at::Tensor& t) {
      if (!t.defined()) return;
      if (isOpenReg(t)) {
        if (!device) device = t.device();
        TORCH_CHECK(*device == t.device(),
                    "Expected all tensors to be on the same device, but found at least two "
                    "devices, ", *device, " and ", t.device(), "! (in ", op.schema().name(), ")");
      } else if (written && !t.is_meta()) {
        host_output = t.device();
      } else if (t.dim() > 0 && !t.is_meta()) {
        host_tensor = t.device();
      }
    });
    if (args[i].isDevice() && args[i].toDevice().is_privateuseone() && !device)
      device = args[i].toDevice();
  }
  if (device && host_output) {
    TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two "
                "devices, ", *device, " and ", *host_output, "! (an output of ",
                op.schema().name(), ")");
  }
  if (device && host_tensor && !acceptsHostTensors(op.schema().operator_name())) {
    TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two "
                "devices, ", *device, " and ", *host_tensor, "! (in ", op.schema().name(), ")");
  }
  if (device && device->index() < 0) device = c10::Device(device->type(), current_device());
  return device;
}

// Converts openreg arguments for running the op elsewhere: tensors to
// kernel views (CPU) or meta tensors, devices to CPU / Meta, and generators to
// the CPU generator holding the openreg generator's state.
class ArgumentConverter {
 public:
  ArgumentConverter(c10::DeviceIndex device, bool to_meta) : device_(device), to_meta_(to_meta) {}

  IValue convert(const IValue& arg, const c10::Argument& schema_arg) {
    if (arg.isDevice() && arg.toDevice().is_privateuseone())
      return c10::Device(to_meta_ ? c10::DeviceType::Meta : c10::DeviceType::CPU);
    if (isGeneratorArg(schema_arg)) {
      if (to_meta_) return arg;
      at::Generator source = openRegGenerator(arg);
      // In a capture each replay reads the generator (launchReplayingGenerators):
      // the argument stays the openreg generator. Checked here, for random ops only.
      if (!currentStreamIsCapturing(device_)) return cpuGeneratorOf(source);
      deferredGenerators_ = true;
      return source;
    }
    return mapTensors(arg, [&](const at::Tensor& t) { return convertTensor(t); });
  }

  at::Tensor convertTensor(const at::Tensor& t) {
    if (!isOpenReg(t)) {
      // A host tensor (0-dim scalar, CPU indices): kernelView's owned copy,
      // taken now (a kernel must not hold one Python owns: dropping it on the
      // worker takes the GIL, which a host thread waiting for the stream may hold).
      if (!to_meta_ && t.defined() && !t.is_meta()) return kernelView(t);
      return t;
    }
    if (!to_meta_) return kernelViewSharing(t);
    auto& storage = meta_storages_[t.storage().unsafeGetStorageImpl()];
    if (!storage) {
      storage = c10::Storage(c10::Storage::use_byte_size_t(), t.storage().nbytes(),
                             c10::DataPtr(nullptr, c10::Device(c10::DeviceType::Meta)),
                             c10::GetAllocator(c10::DeviceType::Meta), true);
    }
    return tensorOver(storage, t, c10::DispatchKey::Meta);
  }

  // The openreg storage a converted (meta or kernel-view) storage stands for.
  c10::StorageImpl* originalOf(const c10::StorageImpl* converted) const {
    for (const auto& [original, s] : meta_storages_)
      if (s.unsafeGetStorageImpl() == converted) return original;
    for (const auto& [original, s] : cpu_storages_)
      if (s.unsafeGetStorageImpl() == converted) return original;
    return nullptr;
  }

 public:
  // The openreg generator a generator argument stands for (None: the device's default).
  at::Generator openRegGenerator(const IValue& arg) const {
    if (arg.isNone()) return getDefaultGenerator(device_);
    // CUDA's rule: a generator of another device type is an error (a CPU
    // generator would otherwise silently drive an openreg op).
    TORCH_CHECK(arg.toGenerator().device().is_privateuseone(),
                "Expected a 'openreg' device type for generator but found '",
                arg.toGenerator().device().type(), "'");
    return arg.toGenerator();
  }
  // Whether generator arguments were left openreg generators, to be read at each launch.
  bool deferredGenerators() const { return deferredGenerators_; }

  static bool isGeneratorArg(const c10::Argument& a) {
    const auto& type = a.type();
    if (type->kind() == c10::TypeKind::GeneratorType) return true;
    if (auto opt = type->cast<c10::OptionalType>())
      return opt->getElementType()->kind() == c10::TypeKind::GeneratorType;
    return false;
  }

 private:
  // Views of one storage must map to one converted storage, so kernels
  // detect overlap and the host detects which outputs alias which inputs.
  at::Tensor kernelViewSharing(const at::Tensor& t) {
    auto& storage = cpu_storages_[t.storage().unsafeGetStorageImpl()];
    if (!storage) storage = kernelView(t).storage();
    return tensorOver(storage, t, c10::DispatchKey::CPU);
  }

  c10::DeviceIndex device_;
  bool to_meta_;
  bool deferredGenerators_ = false;
  ska::flat_hash_map<c10::StorageImpl*, c10::Storage> meta_storages_;
  ska::flat_hash_map<c10::StorageImpl*, c10::Storage> cpu_storages_;
};

// An openreg tensor over `storage` with the given metadata.
at::Tensor viewOfStorage(c10::Storage storage, const CachedTensorMeta& meta) {
  auto view = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::scalarTypeToTypeMeta(meta.dtype));
  view.unsafeGetTensorImpl()->set_sizes_and_strides(meta.sizes, meta.strides, meta.offset);
  // As the CPU's views: the base's conjugate / negative bits (view_as_real of
  // a negative view reads negated values).
  view._set_conj(meta.conj);
  view._set_neg(meta.neg);
  return view;
}

bool returnsOnlyTensors(const c10::FunctionSchema& schema) {
  for (const auto& r : schema.returns()) {
    auto kind = r.type()->kind();
    if (kind != c10::TypeKind::TensorType &&
        !(kind == c10::TypeKind::ListType &&
          r.type()->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::TensorType))
      return false;
  }
  return true;
}

bool writesAnArgument(const c10::FunctionSchema& schema) {
  for (const auto& a : schema.arguments())
    if (a.alias_info() && a.alias_info()->isWrite()) return true;
  return false;
}

// Gives an openreg input the metadata the op left on its converted copy
// (resize_ of out= arguments, in-place views like transpose_), growing the
// storage when the new view needs more bytes.
void applyMetadata(const at::Tensor& t, at::IntArrayRef sizes, at::IntArrayRef strides,
                   int64_t offset) {
  if (t.sizes() == sizes && t.strides() == strides && t.storage_offset() == offset) return;
  size_t itemsize = t.dtype().itemsize();
  size_t needed = at::detail::computeStorageNbytes(sizes, strides, itemsize, offset);
  if (c10::multiply_integers(sizes) > 0 && needed > t.storage().nbytes())
    resize_(t, c10::fromIntArrayRefSlow({static_cast<int64_t>(needed / itemsize)}), std::nullopt);
  t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, offset);
}

void syncInputMetadata(const std::vector<at::Tensor>& originals,
                       const std::vector<at::Tensor>& converted) {
  for (size_t i = 0; i < originals.size(); ++i)
    applyMetadata(originals[i], converted[i].sizes(), converted[i].strides(),
                  converted[i].storage_offset());
}

// Maps a result computed on converted tensors back to openreg: the original
// input itself, a view of an input's storage, or (fresh) nullopt.
std::optional<at::Tensor> aliasedResult(const at::Tensor& result, const ArgumentConverter& conv,
                                        const std::vector<at::Tensor>& originals,
                                        const std::vector<at::Tensor>& converted) {
  for (size_t i = 0; i < converted.size(); ++i)
    if (result.unsafeGetTensorImpl() == converted[i].unsafeGetTensorImpl()) return originals[i];
  if (c10::StorageImpl* original = conv.originalOf(result.storage().unsafeGetStorageImpl()))
    return viewOfStorage(c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(original)),
                         metaOf(result));
  return std::nullopt;
}

struct PreparedCall {
  std::vector<IValue> args;                 // converted arguments
  std::vector<at::Tensor> originals;        // openreg tensor inputs (flattened)
  std::vector<at::Tensor> converted;        // their converted counterparts
};

PreparedCall prepare(const c10::FunctionSchema& schema, const IValue* args, size_t num_args,
                     ArgumentConverter& conv) {
  PreparedCall call;
  call.args.reserve(num_args);
  for (size_t i = 0; i < num_args; ++i) {
    if (args[i].isDevice() || !containsTensor(args[i])) {
      call.args.push_back(conv.convert(args[i], schema.arguments()[i]));
      continue;
    }
    call.args.push_back(mapTensors(args[i], [&](const at::Tensor& t) {
      at::Tensor c = conv.convertTensor(t);
      if (isOpenReg(t)) {
        call.originals.push_back(t);
        call.converted.push_back(c);
      }
      return c;
    }));
  }
  return call;
}

at::Tensor emptyLike(const at::Tensor& like, c10::Device device) {
  return allocateOutput(like.sizes(), like.strides(),
                        at::TensorOptions().dtype(like.dtype()).device(device));
}

void runSynchronously(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t num_args,
                      c10::Device device) {
  const auto& schema = op.schema();
  warn_or_error_on_sync(schema.name().c_str());
  const c10::Stream stream = getCurrentStream(device.index());
  synchronizeStream(stream);
  ArgumentConverter conv(device.index(), /*to_meta=*/false);
  IValue* args = stack->data() + stack->size() - num_args;
  PreparedCall call = prepare(schema, args, num_args, conv);
  if (orSanitizerEnabled()) {
    std::vector<at::Tensor> written;
    for (size_t i = 0; i < num_args; ++i) {
      const auto& info = schema.arguments()[i].alias_info();
      if (info && info->isWrite() && args[i].isTensor()) written.push_back(args[i].toTensor());
    }
    checkHostAccess(stream, call.originals, written);
  }

  // out= arguments may need resizing to a data-dependent size, which a kernel
  // view cannot do: give the CPU op a fresh host tensor and copy back.
  std::vector<std::pair<at::Tensor, at::Tensor>> out_args;  // (openreg, host)
  for (size_t i = 0; i < num_args; ++i) {
    const auto& a = schema.arguments()[i];
    if (a.kwarg_only() && a.alias_info() && a.alias_info()->isWrite() && args[i].isTensor() &&
        isOpenReg(args[i].toTensor())) {
      // The host copy hides `out`'s memory from the CPU kernel's overlap
      // checks, so make them here, with ATen's own messages.
      const at::Tensor& out = args[i].toTensor();
      at::assert_no_internal_overlap(out);
      for (const at::Tensor& input : call.originals)
        if (!input.is_same(out)) at::assert_no_overlap(out, input);
      at::Tensor host = at::empty({0}, args[i].toTensor().options().device(c10::kCPU));
      out_args.emplace_back(args[i].toTensor(), host);
      call.args[i] = host;
    }
  }

  torch::jit::drop(*stack, num_args);
  torch::jit::Stack cpu_stack(call.args.begin(), call.args.end());
  runOnHostInStreamOrder(stream, [&] {
    runAsStreamWork(stream, [&] { op.redispatchBoxed(kCPUKeys, &cpu_stack); });
  });
  syncInputMetadata(call.originals, call.converted);
  for (auto& [dev, host] : out_args) {
    // A resize that grows the storage queues a copy of the old contents into
    // the new block; it must land before the host writes the result there.
    if (dev.sizes() != host.sizes()) {
      dev.resize_(host.sizes());
      // A resized output takes the strides the CPU kernel gave it (TensorIterator
      // lays it out as its inputs: torch.complex of transposed parts).
      if (host.is_non_overlapping_and_dense() && dev.strides() != host.strides())
        dev.as_strided_(host.sizes(), host.strides());
      synchronizeStream(getCurrentStream(device.index()));
    }
    kernelView(dev).copy_(host);
  }

  for (IValue& result : cpu_stack) {
    IValue mapped = mapTensors(result, [&](const at::Tensor& r) -> at::Tensor {
      if (!r.defined()) return r;
      for (auto& [dev, host] : out_args)
        if (r.is_same(host)) return dev;
      if (auto alias = aliasedResult(r, conv, call.originals, call.converted)) return *alias;
      if (r.is_nested()) return nestedOnDevice(r, device);  // torch._nested_tensor_from_mask
      at::Tensor out = emptyLike(r, device);
      kernelView(out).copy_(r);
      return out;
    });
    stack->push_back(std::move(mapped));
  }
}

// Kernel-side check that the CPU result matches the output the host
// allocated from the Meta result: a mismatch would otherwise be a silent
// broadcast or dtype conversion. The op is then run synchronously from now on;
// this launch fails (asynchronously, like any kernel error).
void checkSameMetadata(const c10::OperatorHandle& op, size_t index, const at::Tensor& allocated,
                       const at::Tensor& result) {
  if (allocated.sizes() == result.sizes() && allocated.scalar_type() == result.scalar_type()) return;
  syncOnlyOps().insert(op.schema().operator_name());
  TORCH_CHECK(false, "openreg: the Meta and CPU kernels of ", op.schema().operator_name(),
              " disagree on result ", index, " (Meta: ", allocated.sizes(), " ",
              allocated.scalar_type(), ", CPU: ", result.sizes(), " ", result.scalar_type(),
              "); later calls run synchronously. Please report this operator.");
}

// A result Meta said aliases an input must alias one on the CPU too, or the
// value the CPU computed would be dropped.
void checkAliasesInput(const c10::OperatorHandle& op, size_t index, const at::Tensor& result,
                       const std::vector<at::Tensor>& inputs) {
  for (const auto& input : inputs)
    if (result.storage().is_alias_of(input.storage())) return;
  syncOnlyOps().insert(op.schema().operator_name());
  TORCH_CHECK(false, "openreg: the Meta kernel of ", op.schema().operator_name(),
              " returns a view of an input as result ", index,
              " but the CPU kernel returns a new tensor; later calls run synchronously.");
}

// In-place random fills (random_, uniform_, normal_, bernoulli_.float,
// exponential_, ...) validate their scalar arguments in the CPU kernel, which
// Meta does not: without this, `randint(5, 2)` would fail inside a kernel and
// leave the stream failed, where CUDA raises on the host. The probe runs the
// CPU kernel on a one-element host tensor with a throwaway generator (the
// real generator state is untouched), so the error is the CPU's own.
void probeRandomFillArguments(const c10::OperatorHandle& op, const IValue* args,
                              size_t num_args) {
  const auto& schema = op.schema();
  int self_index = -1, written = -1;
  bool has_generator = false, other_tensors = false;
  for (size_t i = 0; i < num_args; ++i) {
    const auto& a = schema.arguments()[i];
    if (ArgumentConverter::isGeneratorArg(a)) {
      has_generator = true;
    } else if (containsTensor(args[i])) {
      const bool writes = a.alias_info() && a.alias_info()->isWrite() && args[i].isTensor();
      if (writes && written < 0) written = static_cast<int>(i);
      if (self_index >= 0 || !writes) other_tensors = true;
      else self_index = static_cast<int>(i);
    }
  }
  if (!has_generator || written < 0) return;
  // The CPU kernels refuse to fill a tensor whose elements share memory (an
  // expanded one), which the one-element probe below cannot show.
  at::assert_no_internal_overlap(args[written].toTensor());
  if (other_tensors) return;  // (bernoulli_ with a tensor p: its kernel checks the rest)
  torch::jit::Stack probe;
  for (size_t i = 0; i < num_args; ++i) {
    if (static_cast<int>(i) == self_index) {
      probe.emplace_back(at::empty({1}, args[i].toTensor().options().device(c10::kCPU)));
    } else if (ArgumentConverter::isGeneratorArg(schema.arguments()[i])) {
      probe.emplace_back(at::make_generator<at::CPUGeneratorImpl>());
    } else {
      probe.push_back(args[i]);
    }
  }
  op.redispatchBoxed(kCPUKeys, &probe);
}

// The dtype of each tensor a CPU kernel returned, in the order mapTensors
// walks the returns (Undefined for an undefined tensor).
using ResultDtypes = std::vector<at::ScalarType>;

ResultDtypes dtypesOf(const torch::jit::Stack& results) {
  ResultDtypes dtypes;
  for (const IValue& r : results)
    forEachTensor(r, [&](const at::Tensor& t) {
      dtypes.push_back(t.defined() ? t.scalar_type() : at::ScalarType::Undefined);
    });
  return dtypes;
}

// The dispatch probe's key of a call (its dtype signature, see checkDispatch),
// or nullopt for a call not probed. An out= argument counts by its dtype only:
// the probe hands the kernel an empty one to resize, whatever the caller's shape.
struct ProbeKey {
  std::string key;
  bool has_empty = false;
  int64_t non_empty_elements = 0;
};
constexpr int64_t kLargestProbedInt = 4096;
std::optional<ProbeKey> probeKey(const c10::OperatorHandle& op, const IValue* args, size_t num_args) {
  const auto& schema = op.schema();
  // A random op is probed only if it takes a generator, which the probe
  // replaces with a throwaway one (runOnProbes): without one, its CPU kernel
  // would draw from the process's CPU generator.
  const auto& arguments = schema.arguments();
  if (op.hasTag(at::Tag::nondeterministic_seeded) &&
      std::none_of(arguments.begin(), arguments.end(), ArgumentConverter::isGeneratorArg))
    return std::nullopt;
  ProbeKey k;
  k.key = std::to_string(reinterpret_cast<uintptr_t>(&op.operator_name()));
  // The default dtype picks some results' dtypes (angle of an int tensor), as
  // in the inference cache's key.
  k.key.push_back(static_cast<char>(c10::typeMetaToScalarType(c10::get_default_dtype())));
  bool has_tensor = false;
  auto small = [&](int64_t v) { return v >= -kLargestProbedInt && v <= kLargestProbedInt; };
  for (size_t i = 0; i < num_args; ++i) {
    const IValue& a = args[i];
    if (ArgumentConverter::isGeneratorArg(schema.arguments()[i])) {
      k.key.push_back('G');
      continue;
    }
    if (a.isInt()) {
      if (!small(a.toInt())) return std::nullopt;
      k.key += 'i' + std::to_string(a.toInt());  // dims and dtypes select kernels
    } else if (a.isIntList()) {
      for (int64_t v : a.toIntList()) {
        if (!small(v)) return std::nullopt;
        k.key += std::to_string(v) + ' ';
      }
    } else if (a.isDouble() || a.isBool() || a.isComplexDouble()) {
      dispatch_probe::appendKey(k.key, a.toScalar());
    } else if (a.isNone()) {
      k.key.push_back('N');
    } else if (a.isString()) {
      k.key += a.toStringRef();  // a mode: rounding_mode="floor" has its own kernel
    }
    const bool out = schema.arguments()[i].is_out();
    forEachTensor(a, [&](const at::Tensor& t) {
      has_tensor = true;
      if (out) {
        k.key.push_back(t.defined() ? static_cast<char>(t.scalar_type()) : '\x7f');
        return;
      }
      if (t.defined() && t.numel() == 0) k.has_empty = true;
      else if (t.defined()) k.non_empty_elements += t.numel();
      dispatch_probe::appendKey(k.key, t);
    });
    k.key.push_back(',');
  }
  if (!has_tensor) return std::nullopt;
  return k;
}

// Runs the op's CPU kernel on the host over probes of the arguments:
// probeOf(t) for inputs, outOf(t) for out= tensors; returns its results.
template <class ProbeOf, class OutOf>
torch::jit::Stack runOnProbes(const c10::OperatorHandle& op, const IValue* args, size_t num_args,
                              ProbeOf probeOf, OutOf outOf) {
  const auto& schema = op.schema();
  torch::jit::Stack probe;
  for (size_t i = 0; i < num_args; ++i) {
    if (args[i].isDevice()) {
      probe.emplace_back(c10::Device(c10::kCPU));
    } else if (ArgumentConverter::isGeneratorArg(schema.arguments()[i])) {
      probe.emplace_back(at::make_generator<at::CPUGeneratorImpl>());  // the real one untouched
    } else if (schema.arguments()[i].is_out()) {
      probe.push_back(mapTensors(args[i], outOf));
    } else {
      probe.push_back(mapTensors(args[i], probeOf));
    }
  }
  c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset_with_ADInplaceOrView);
  op.redispatchBoxed(kCPUKeys, &probe);
  return probe;
}

// The dtype check of the op's CPU kernel, on the host (DispatchProbe.h), keyed
// by the op and its arguments' dtype signature. Not probed: random ops
// without a generator argument (the probe would draw from the CPU's
// generator), ops without tensor arguments, and ops with a large integer
// argument (a size: the probe would allocate what it says).
// Returns the dtypes of the probe's results (kept per signature with the
// verdict), nullopt if no probe ran or the probe failed without a verdict.
struct FallbackSite {};
std::optional<ResultDtypes> checkDispatch(const c10::OperatorHandle& op, const IValue* args,
                                          size_t num_args) {
  const std::optional<ProbeKey> key = probeKey(op, args, num_args);
  if (!key) return std::nullopt;
  std::optional<ResultDtypes> seen;
  bool ran = false;
  auto probe = [&](auto probeOf) {
    ran = true;
    torch::jit::Stack results = runOnProbes(op, args, num_args, probeOf, dispatch_probe::probeOutput);
    if (!seen) seen = dtypesOf(results);  // the first run that passes has the caller's dtypes
  };
  // With an empty tensor, CPU kernels return before their dispatch, but check
  // shapes first ("min(): Expected reduction dim to be specified for
  // input.numel() == 0"): run it on probes of the very shapes, if the others are small.
  if (key->has_empty) {
    if (key->non_empty_elements <= kLargestProbedInt)
      dispatch_probe::checkShapes([&] { probe(dispatch_probe::exactProbeTensor); });
    return seen;
  }
  static thread_local std::unordered_map<std::string, std::optional<ResultDtypes>> results;
  dispatch_probe::check<FallbackSite>(key->key, [&] { probe(dispatch_probe::probeTensor); });
  if (ran) results[key->key] = seen;
  auto it = results.find(key->key);
  return it == results.end() ? std::nullopt : it->second;
}

// The functional variant of an out= operator (sort.values -> sort,
// max.dim_max -> max.dim): the overload of the same name whose arguments are
// the out= one's without its out= arguments. nullopt if there is none.
std::optional<c10::OperatorHandle> functionalVariant(const c10::OperatorHandle& op) {
  static std::mutex mutex;
  // Leaked, as the dispatcher's operators they name: used until exit.
  static auto* variants =
      new std::unordered_map<const c10::OperatorName*, std::optional<c10::OperatorHandle>>();
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = variants->find(&op.operator_name()); it != variants->end()) return it->second;
  std::vector<const c10::Argument*> inputs;
  for (const c10::Argument& a : op.schema().arguments())
    if (!a.is_out()) inputs.push_back(&a);
  std::optional<c10::OperatorHandle> match;
  // The overloads registered now (once per out= operator): a library loaded
  // after the first out= call has its functional variants found too.
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name != op.schema().name()) continue;
    auto candidate = c10::Dispatcher::singleton().findSchema(name);
    if (!candidate || candidate->schema().is_mutable()) continue;
    const auto& arguments = candidate->schema().arguments();
    bool same = arguments.size() == inputs.size();
    for (size_t i = 0; i < inputs.size() && same; ++i)
      same = arguments[i].name() == inputs[i]->name() && *arguments[i].type() == *inputs[i]->type();
    if (same) {
      match = candidate;
      break;
    }
  }
  variants->emplace(&op.operator_name(), match);
  return match;
}

// Whether the CPU kernel of an out= op, which fails on probes with the
// caller's out= dtypes, passes with out= tensors of the dtypes its functional
// variant returns: then those dtypes are what it refuses.
bool refusesOutDtypes(const c10::OperatorHandle& op, const IValue* args, size_t num_args) {
  const std::optional<c10::OperatorHandle> functional = functionalVariant(op);
  if (!functional) return false;
  std::vector<IValue> inputs;
  ResultDtypes given;
  for (size_t i = 0; i < num_args; ++i) {
    if (!op.schema().arguments()[i].is_out()) inputs.push_back(args[i]);
    else forEachTensor(args[i], [&](const at::Tensor& t) { given.push_back(t.scalar_type()); });
  }
  ResultDtypes expected;
  try {
    expected = dtypesOf(runOnProbes(*functional, inputs.data(), inputs.size(),
                                    dispatch_probe::probeTensor, dispatch_probe::probeOutput));
  } catch (const std::exception&) {
    return false;
  }
  if (expected.size() != given.size() || expected == given) return false;
  size_t k = 0;
  auto outOfExpectedDtype = [&](const at::Tensor&) {
    return at::empty({0}, at::TensorOptions().dtype(expected[k++]));
  };
  try {
    runOnProbes(op, args, num_args, dispatch_probe::probeTensor, outOfExpectedDtype);
  } catch (const std::exception&) {
    return false;  // not (only) the out= dtypes
  }
  return true;
}

// An out= argument of a dtype the CPU kernel refuses, where the Meta kernel
// accepts it (sort's values in float64 for a float32 input: "Expected out
// tensor to have dtype float, but got double instead"; cummax, mode, triu,
// index_select, ...): the CPU raises at the call, so openreg does, with the
// CPU kernel's own error, found on probes. Made before Meta inference resizes
// the out= arguments (the CPU leaves them untouched). A signature that passes
// is probed once per thread.
void checkOutDtypes(const c10::OperatorHandle& op, const IValue* args, size_t num_args) {
  const auto& arguments = op.schema().arguments();
  if (!op.schema().is_mutable() ||
      std::none_of(arguments.begin(), arguments.end(), [](const c10::Argument& a) { return a.is_out(); }))
    return;
  const std::optional<ProbeKey> key = probeKey(op, args, num_args);
  if (!key || key->has_empty) return;
  static thread_local std::unordered_set<std::string> accepted;
  if (accepted.count(key->key)) return;
  dispatch_probe::DropWarnings drop;
  c10::WarningUtils::WarningHandlerGuard silence(&drop);
  try {
    runOnProbes(op, args, num_args, dispatch_probe::probeTensor, dispatch_probe::probeOutput);
  } catch (const std::exception&) {
    std::exception_ptr error = std::current_exception();
    if (refusesOutDtypes(op, args, num_args)) std::rethrow_exception(error);
  }
  accepted.insert(key->key);
}

// The CPU kernels' overlap checks for out= arguments, which they make at the
// call: Meta tensors have no memory to compare, and on the stream the error
// would come late and fail the stream. Every op: a written argument (out=, or
// an in-place op's self) partially overlapping an input or another written
// one (topk(x, k, out=(x[:k], i)), x.index_put_(i, x[1:3])). A pointwise op
// (TensorIterator) also rejects a written tensor that overlaps itself.
void checkWrittenOverlap(const c10::FunctionSchema& schema, const IValue* args, size_t num_args,
                         bool pointwise) {
  if (!schema.is_mutable()) return;  // a functional op writes only fresh outputs
  std::vector<at::Tensor> outs, inputs;
  for (size_t i = 0; i < num_args; ++i) {
    const auto* alias = schema.arguments()[i].alias_info();
    const bool written = alias && alias->isWrite();
    forEachTensor(args[i], [&](const at::Tensor& t) {
      if (t.defined()) (written ? outs : inputs).push_back(t);
    });
  }
  for (size_t k = 0; k < outs.size(); ++k) {
    if (pointwise) at::assert_no_internal_overlap(outs[k]);
    for (const at::Tensor& input : inputs) at::assert_no_partial_overlap(outs[k], input);
    for (size_t j = 0; j < k; ++j) at::assert_no_partial_overlap(outs[k], outs[j]);
  }
}

// The op's CPU kernel over kernel views; fresh results are copied into
// `fresh_views` (slots[k]: fresh index of the k-th returned tensor, or -1).
struct CpuKernel {
  c10::OperatorHandle op;
  std::vector<IValue> cpu_args;
  std::vector<at::Tensor> inputs;           // the converted tensor arguments
  std::vector<at::Tensor> fresh_views;
  std::vector<int> slots;
  std::vector<std::pair<bool, bool>> bits;  // each input's (conj, neg) as passed

  void operator()() {
    c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset_with_ADInplaceOrView);
    torch::jit::Stack cpu_stack(cpu_args.begin(), cpu_args.end());
    op.redispatchBoxed(kCPUKeys, &cpu_stack);
    // A CPU kernel may finish by flipping its out= tensor's conj or neg bit
    // (linalg_lu_solve with left=False on complex input): metadata of this
    // kernel view only, so write the value it stands for into the memory.
    for (size_t i = 0; i < inputs.size(); ++i) {
      at::Tensor& t = inputs[i];
      if (t.is_conj() == bits[i].first && t.is_neg() == bits[i].second) continue;
      at::Tensor value = t.resolve_conj().resolve_neg();
      t._set_conj(bits[i].first);
      t._set_neg(bits[i].second);
      t.copy_(value);
    }
    size_t k = 0;
    for (const IValue& r : cpu_stack) {
      // Results that alias inputs were written in place; fresh ones move.
      mapTensors(r, [&](const at::Tensor& t) {
        int slot = k < slots.size() ? slots[k] : -1;
        if (t.defined()) {
          if (slot >= 0) {
            checkSameMetadata(op, k, fresh_views[slot], t);
            fresh_views[slot].copy_(t);
          } else {
            checkAliasesInput(op, k, t, inputs);
          }
        }
        ++k;
        return t;
      });
    }
  }
};

// A random kernel captured in a graph: its draws are fixed within the
// capture (drawInCapture), and each replay of the graph adds them to the
// openreg generators' offset at its launch and advances it (on the replaying
// thread, in the host's order of replays), as a CUDA graph's philox seed and
// offset are filled in per replay. So manual_seed before a replay repeats its
// numbers, and get_rng_state moves with replays. The capture itself leaves
// the generators' offset alone, as CUDA's.
using Draws = std::vector<std::pair<size_t, std::function<at::Generator()>>>;  // argument index
void launchReplayingGenerators(const c10::Stream& stream, CpuKernel kernel, Draws draws,
                               const std::vector<at::Tensor>& reads,
                               const std::vector<at::Tensor>& writes) {
  orPrepare prepare = [kernel = std::move(kernel), draws = std::move(draws)](orStream) {
    CpuKernel launch = kernel;
    for (const auto& [index, draw] : draws) launch.cpu_args[index] = draw();
    return std::function<void()>(std::move(launch));
  };
  launchPreparedKernel(stream, std::move(prepare), reads, writes);
}

// Queues the op's CPU kernel over kernel views; fresh results are copied into
// `fresh` (slots[k]: fresh index of the k-th returned tensor, or -1). Callers
// run checkDispatch first, before they allocate `fresh`.
void launchCpuKernel(const c10::OperatorHandle& op, const IValue* args, size_t num_args,
                     c10::Device device, const std::vector<at::Tensor>& originals,
                     const std::vector<at::Tensor>& fresh, std::vector<int> slots) {
  // A view op (view_as_real, .real of a complex tensor: every result aliases
  // an input, no argument is written): its results already share the inputs'
  // memory, so there is nothing to run, and no read for the race checker to
  // order (a view touches no data, as on CUDA).
  if (fresh.empty() && !writesAnArgument(op.schema())) return;
  const c10::Stream stream = getCurrentStream(device.index());
  ArgumentConverter cpu(device.index(), /*to_meta=*/false);
  PreparedCall cpu_call = prepare(op.schema(), args, num_args, cpu);
  std::vector<at::Tensor> fresh_views;
  for (const auto& f : fresh) fresh_views.push_back(kernelView(f));
  std::vector<at::Tensor> writes = fresh;
  for (const auto& t : originals) writes.push_back(t);  // conservative

  std::vector<std::pair<bool, bool>> bits;
  for (const auto& c : cpu_call.converted) bits.emplace_back(c.is_conj(), c.is_neg());
  Draws draws;  // the openreg generators a captured random op draws from
  if (cpu.deferredGenerators())
    for (size_t i = 0; i < cpu_call.args.size(); ++i)
      if (cpu_call.args[i].isGenerator())
        draws.emplace_back(i, drawInCapture(cpu_call.args[i].toGenerator(), stream));
  CpuKernel kernel{op, std::move(cpu_call.args), std::move(cpu_call.converted), std::move(fresh_views),
                   std::move(slots), std::move(bits)};
  if (!draws.empty())
    return launchReplayingGenerators(stream, std::move(kernel), std::move(draws), originals, writes);
  launchKernel(stream, std::move(kernel), originals, writes);
}

// The index in call.converted of the converted argument `t`, or -1.
int convertedIndexOf(const PreparedCall& call, const at::Tensor& t) {
  for (size_t j = 0; j < call.converted.size(); ++j)
    if (call.converted[j].unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return static_cast<int>(j);
  return -1;
}

// The converted index of the written argument that the schema says return
// `k` is (`Tensor(a!)` returning an `out=` or `self` argument), or -1. Some
// Python Meta kernels return fresh tensors instead (_linalg_solve_ex.result):
// the op still returns its arguments, as the CPU kernel does.
int writtenArgumentReturned(const c10::FunctionSchema& schema, size_t k, const PreparedCall& call,
                            const at::Tensor& returned) {
  if (k >= schema.returns().size() || !returned.defined()) return -1;
  const std::optional<size_t> i = writtenArgumentIndex(schema, k);
  if (!i || *i >= call.args.size() || !call.args[*i].isTensor()) return -1;
  const int j = convertedIndexOf(call, call.args[*i].toTensor());
  // Only where Meta sized the argument as it sized its result.
  if (j < 0 || call.converted[j].sizes() != returned.sizes() ||
      call.converted[j].scalar_type() != returned.scalar_type())
    return -1;
  return j;
}

// What the Meta run says about each returned tensor, for the inference cache.
std::shared_ptr<CachedInference> describeInference(const c10::FunctionSchema& schema,
                                                   const torch::jit::Stack& meta_stack,
                                                   const ArgumentConverter& meta,
                                                   const PreparedCall& call) {
  auto entry = std::make_shared<CachedInference>();
  for (const auto& c : call.converted) entry->inputs_after.push_back(metaOf(c));
  for (const IValue& r : meta_stack) {
    const at::Tensor& m = r.toTensor();
    CachedOutput out;
    const int written = writtenArgumentReturned(schema, entry->outputs.size(), call, m);
    if (!m.defined()) {
      out.kind = CachedOutput::Kind::kUndefined;
    } else if (written >= 0) {
      out.meta = metaOf(call.converted[written]);
      out.kind = CachedOutput::Kind::kSameAsInput;
      out.input = written;
    } else {
      out.meta = metaOf(m);
      for (size_t i = 0; i < call.converted.size() && out.input < 0; ++i) {
        if (m.unsafeGetTensorImpl() == call.converted[i].unsafeGetTensorImpl()) {
          out.kind = CachedOutput::Kind::kSameAsInput;
          out.input = static_cast<int>(i);
        }
      }
      if (c10::StorageImpl* original = out.input < 0 ? meta.originalOf(m.storage().unsafeGetStorageImpl()) : nullptr) {
        for (size_t i = 0; i < call.originals.size() && out.input < 0; ++i) {
          if (call.originals[i].storage().unsafeGetStorageImpl() == original) {
            out.kind = CachedOutput::Kind::kViewOfInput;
            out.input = static_cast<int>(i);
          }
        }
      }
    }
    entry->outputs.push_back(std::move(out));
  }
  return entry;
}

// The cached path: outputs from a previous Meta run with the same signature.
void runCached(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t num_args,
               c10::Device device, const CachedInference& entry) {
  IValue* args = stack->data() + stack->size() - num_args;
  checkDispatch(op, args, num_args);
  std::vector<at::Tensor> originals;
  for (size_t i = 0; i < num_args; ++i)
    forEachTensor(args[i], [&](const at::Tensor& t) {
      if (isOpenReg(t)) originals.push_back(t);
    });
  for (size_t i = 0; i < originals.size() && i < entry.inputs_after.size(); ++i)
    applyMetadata(originals[i], entry.inputs_after[i].sizes, entry.inputs_after[i].strides,
                  entry.inputs_after[i].offset);

  std::vector<IValue> results;
  std::vector<at::Tensor> fresh;
  std::vector<int> slots;
  for (const CachedOutput& out : entry.outputs) {
    slots.push_back(-1);
    switch (out.kind) {
      case CachedOutput::Kind::kUndefined:
        results.emplace_back(at::Tensor());
        break;
      case CachedOutput::Kind::kSameAsInput:
        results.emplace_back(originals[out.input]);
        break;
      case CachedOutput::Kind::kViewOfInput:
        results.emplace_back(viewOfStorage(originals[out.input].storage(), out.meta));
        break;
      case CachedOutput::Kind::kFresh:
        slots.back() = static_cast<int>(fresh.size());
        fresh.push_back(allocateOutput(out.meta.sizes, out.meta.strides,
                                       at::TensorOptions().dtype(out.meta.dtype).device(device)));
        results.emplace_back(fresh.back());
        break;
    }
  }
  launchCpuKernel(op, args, num_args, device, originals, fresh, std::move(slots));
  torch::jit::drop(*stack, num_args);
  for (auto& r : results) stack->push_back(std::move(r));
}

// A pointwise op's CPU (and CUDA) kernel resizes an out= argument to the
// layout TensorIterator computes from the inputs (a transposed or
// channels-last input gives a like-laid-out result); some Meta kernels (Python
// decompositions) resize it contiguous. Gives each out= argument the Meta
// kernel resized that layout, so the device tensor matches the CPU's.
void outLayoutAsTensorIterator(const c10::OperatorHandle& op, const PreparedCall& meta_call) {
  // polar and complex build their outputs with TensorIterator but carry no tag.
  const auto& schema = op.schema();
  if (!op.hasTag(at::Tag::pointwise) && schema.name() != "aten::polar" &&
      schema.name() != "aten::complex")
    return;
  std::vector<size_t> outs;  // indices into meta_call.converted
  std::vector<at::Tensor> inputs;
  for (size_t i = 0; i < meta_call.args.size() && i < schema.arguments().size(); ++i) {
    const IValue& a = meta_call.args[i];
    if (!containsTensor(a)) continue;
    if (!a.isTensor()) return;  // tensor lists: not TensorIterator's shape
    if (!schema.arguments()[i].is_out()) {
      if (a.toTensor().defined()) inputs.push_back(a.toTensor());
      continue;
    }
    const int j = convertedIndexOf(meta_call, a.toTensor());
    if (j < 0) continue;
    if (meta_call.originals[j].sizes() == meta_call.converted[j].sizes()) return;  // kept
    outs.push_back(j);
  }
  if (outs.empty() || inputs.empty()) return;
  const std::vector<at::Tensor> unallocated(outs.size());  // the config borrows them
  at::TensorIteratorConfig config;
  config.check_all_same_dtype(false);
  for (const auto& t : unallocated) config.add_output(t);
  for (const auto& t : inputs) config.add_const_input(t);
  try {
    at::TensorIterator iter = config.build();
    for (size_t k = 0; k < outs.size(); ++k) {
      const at::Tensor& out = meta_call.converted[outs[k]];
      const at::TensorBase& layout = iter.output_base(static_cast<int64_t>(k));
      if (layout.sizes() != out.sizes()) return;  // not an elementwise shape
      out.unsafeGetTensorImpl()->set_sizes_and_strides(out.sizes(), layout.strides(),
                                                       out.storage_offset());
    }
  } catch (const std::exception&) {
    // Inputs TensorIterator does not take: keep the Meta kernel's layout.
  }
}

// An out= argument that already has the result's shape keeps its strides
// (ATen's resize_output leaves it alone, and the CPU kernel writes through
// them), but some Python Meta kernels, written for fresh fake tensors,
// restride it anyway (sort, linalg_solve: as_strided_): undo that, or the
// device tensor would take the Meta layout and the kernel write past the
// caller's view.
void keepOutStridesOfRightShape(const c10::FunctionSchema& schema, const PreparedCall& meta_call) {
  for (size_t i = 0; i < meta_call.args.size() && i < schema.arguments().size(); ++i) {
    if (!schema.arguments()[i].is_out() || !meta_call.args[i].isTensor()) continue;
    const int j = convertedIndexOf(meta_call, meta_call.args[i].toTensor());
    if (j < 0) continue;
    const at::Tensor& original = meta_call.originals[j];
    if (original.sizes() == meta_call.converted[j].sizes())
      meta_call.converted[j].unsafeGetTensorImpl()->set_sizes_and_strides(
          original.sizes(), original.strides(), original.storage_offset());
  }
}

// A fresh result whose Meta dtype is not the one the CPU kernel returned for
// this dtype signature (checkDispatch's probe) takes the CPU's: a valid call
// returns what the CPU returns (native_group_norm's float32 statistics of a
// bfloat16 input, binary_cross_entropy's loss in self's dtype whatever the
// weight's) instead of failing checkSameMetadata on the stream. Shapes stay
// Meta's (the probe's are not the call's).
void freshResultsInTheCpusDtypes(torch::jit::Stack& meta_stack, const ArgumentConverter& meta,
                                 const PreparedCall& meta_call, const ResultDtypes& cpu) {
  const ResultDtypes inferred = dtypesOf(meta_stack);
  if (inferred == cpu || inferred.size() != cpu.size()) return;  // a list the probe's shapes resized
  size_t k = 0;
  for (IValue& r : meta_stack) {
    r = mapTensors(r, [&](const at::Tensor& m) -> at::Tensor {
      const at::ScalarType dtype = cpu[k++];
      if (!m.defined() || dtype == at::ScalarType::Undefined || dtype == m.scalar_type() ||
          convertedIndexOf(meta_call, m) >= 0 ||  // a written argument
          meta.originalOf(m.storage().unsafeGetStorageImpl()))  // a view of an input
        return m;
      return at::empty_strided(m.sizes(), m.strides(), m.options().dtype(dtype));
    });
  }
}

// `result_dtypes`: the CPU kernel's result dtypes where the caller knows them
// (fallbackWithResultDtypes), or null (the probe's, if it ran).
bool tryRunAsynchronously(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                          size_t num_args, c10::Device device, const ResultDtypes* result_dtypes) {
  const auto& schema = op.schema();
  if (!returnsOnlyTensors(schema)) return false;
  // One that returns nothing is queued only if it writes an argument (AMP's
  // unscale, fused Adam); one that writes none is a host-side check
  // (_assert_tensor_metadata), whose error belongs to the call.
  if (schema.returns().empty() && !writesAnArgument(schema)) return false;
  IValue* args = stack->data() + stack->size() - num_args;
  const SyncOnlyOps::Reason reason = syncOnlyOps().reason(schema.operator_name());
  switch (reason) {
    case SyncOnlyOps::Reason::kShapes:
      return false;
    case SyncOnlyOps::Reason::kBatchNorm:
      if (!batchNormAgreesWithMeta(schema, args)) return false;
      break;
    case SyncOnlyOps::Reason::kEmbeddingBag:  // embeddingBagResultsAsTheCpus
      if (!embeddingBagArgumentsPassTheCpusChecks(args)) return false;
      break;
    case SyncOnlyOps::Reason::kChecks:
      if (!orStreamIsCapturing(rawStream(getCurrentStream(device.index())))) return false;
      // The CPU kernel's checks of shapes and dtypes still raise at the call:
      // its run over zero- and one-filled tensors of the arguments' shapes
      // (not their values, which a capture may not wait for).
      dispatch_probe::checkShapes([&] {
        runOnProbes(op, args, num_args, dispatch_probe::exactProbeTensor,
                    dispatch_probe::probeOutput);
      });
      break;
    case SyncOnlyOps::Reason::kNone:
      break;
  }

  std::optional<std::string> key = inferenceKey(op, args, num_args);
  if (key) {
    if (auto entry = lookupInference(*key)) {
      if (entry->synchronous) return false;
      runCached(op, stack, num_args, device, *entry);
      return true;
    }
  }

  ArgumentConverter meta(device.index(), /*to_meta=*/true);
  PreparedCall meta_call = prepare(schema, args, num_args, meta);
  torch::jit::Stack meta_stack(meta_call.args.begin(), meta_call.args.end());
  try {
    if (const c10::KernelFunction* cpp = cppMetaKernel(op.operator_name()))
      cpp->callBoxed(op, kMetaKeys, &meta_stack);
    else
      op.redispatchBoxed(kMetaKeys, &meta_stack);
  } catch (const std::exception&) {
    // No Meta kernel, or a data-dependent one (C++ kernels throw c10::Error;
    // Python meta registrations such as nonzero's raise NotImplementedError,
    // which arrives here as a python_error): the sync path decides.
    if (key) {
      auto entry = std::make_shared<CachedInference>();
      entry->synchronous = true;
      storeInference(*key, std::move(entry));
    }
    return false;
  }
  outLayoutAsTensorIterator(op, meta_call);
  keepOutStridesOfRightShape(schema, meta_call);
  convolutionOutputsInTheCpusFormat(op, meta_call.args, meta_call.converted, meta_stack);
  batchNormResultsAsTheCpus(op, reason, args, meta_stack);
  embeddingBagResultsAsTheCpus(op, reason, args, meta_stack);
  const std::optional<ResultDtypes> probed = checkDispatch(op, args, num_args);
  if (result_dtypes) freshResultsInTheCpusDtypes(meta_stack, meta, meta_call, *result_dtypes);
  else if (probed) freshResultsInTheCpusDtypes(meta_stack, meta, meta_call, *probed);
  if (key) storeInference(*key, describeInference(schema, meta_stack, meta, meta_call));

  syncInputMetadata(meta_call.originals, meta_call.converted);

  // Device outputs: aliases of inputs, or fresh allocations the kernel fills.
  // slots[k] is the fresh-output index of the k-th returned tensor, or -1.
  std::vector<IValue> results;
  std::vector<at::Tensor> fresh;
  std::vector<int> slots;
  for (const IValue& r : meta_stack) {
    const int written =
        r.isTensor() ? writtenArgumentReturned(schema, results.size(), meta_call, r.toTensor()) : -1;
    results.push_back(mapTensors(r, [&](const at::Tensor& m) -> at::Tensor {
      if (written >= 0) {
        slots.push_back(-1);
        return meta_call.originals[written];
      }
      if (m.defined()) {
        if (auto alias = aliasedResult(m, meta, meta_call.originals, meta_call.converted)) {
          slots.push_back(-1);
          return *alias;
        }
        slots.push_back(static_cast<int>(fresh.size()));
        fresh.push_back(emptyLike(m, device));
        return fresh.back();
      }
      slots.push_back(-1);
      return m;
    }));
  }

  launchCpuKernel(op, args, num_args, device, meta_call.originals, fresh, std::move(slots));
  torch::jit::drop(*stack, num_args);
  for (auto& r : results) stack->push_back(std::move(r));
  return true;
}

void runFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                 const ResultDtypes* result_dtypes) {
  const size_t num_args = op.schema().arguments().size();
  const IValue* args = stack->data() + stack->size() - num_args;
  std::optional<c10::Device> device = findDevice(op, args, num_args);
  if (!device) {
    // Only an openreg generator brought the call here: CUDA's message.
    for (size_t i = 0; i < num_args; ++i)
      TORCH_CHECK(!args[i].isGenerator() || !args[i].toGenerator().device().is_privateuseone(),
                  "Expected a 'cpu' device type for generator but found 'openreg'");
  }
  TORCH_CHECK(device.has_value(), "openreg fallback: no openreg tensor or device among the "
              "arguments of ", op.schema().name());
  // The generic path runs the CPU kernel: an op with none (CUDA-only fused
  // kernels, cuDNN ops) fails here, on the host, rather than in a kernel where
  // the error would be sticky for the stream.
  TORCH_CHECK_NOT_IMPLEMENTED(op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU),
                              "Could not run '", op.schema().name(), "' with arguments from the "
                              "'openreg' backend: it has no native openreg kernel and no CPU "
                              "kernel for the generic path to run.");
  probeRandomFillArguments(op, args, num_args);
  checkHostVisibleZeroDivisor(op, args, num_args);
  // Before Meta inference resizes an out= argument (TensorIterator checks first).
  checkWrittenOverlap(op.schema(), args, num_args, op.hasTag(at::Tag::pointwise));
  checkOutDtypes(op, args, num_args);
  c10::DeviceGuard guard(*device);
  const bool async = tryRunAsynchronously(op, stack, num_args, *device, result_dtypes);
  recordFallback(op.operator_name(), async);
  if (!async) runSynchronously(op, stack, num_args, *device);
}

}  // namespace

void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  runFallback(op, stack, nullptr);
}

void fallbackWithResultDtypes(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                              const std::vector<at::ScalarType>& dtypes) {
  runFallback(op, stack, &dtypes);
}

}  // namespace openreg::kernels
