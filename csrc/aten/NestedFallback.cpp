// PyTorch hook: the backend fallback of the NestedTensorPrivateUse1 dispatch
// key, so nested tensors (torch.nested, layout=torch.strided) work on openreg;
// the same kernel registered for each op that has a NestedTensorCPU kernel
// (g_register_nested_kernels, below), and the PrivateUse1 kernels that make
// a nested tensor over a device buffer (_nested_view_from_buffer, ...).
//
// A nested tensor on openreg is NestedTensorImpl over a device buffer, as on
// CUDA. ATen's nested kernels exist for NestedTensorCPU and NestedTensorCUDA
// only, so every operator on one runs synchronously on the CPU's nested
// kernels over host copies, and its results are copied back (in place for
// written arguments). The common user is nn.TransformerEncoder's inference
// fast path with a padding mask (torch._nested_tensor_from_mask, then the
// layers and to_padded_tensor on nested tensors). A result that views an
// input is mapped onto that input's device memory, so views stay views.
// Tests: tests/ops/test_nested.py.
#include <ATen/NestedTensorImpl.h>
#include <ATen/ops/_nested_from_padded.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <vector>

#include "../runtime/OpenRegFunctions.h"
#include "BoxedArguments.h"
#include "Kernels.h"
#include "Launch.h"

namespace openreg::kernels {

// The same nested tensor (its whole storage, so views keep their layout) on `device`.
at::Tensor nestedOnDevice(const at::Tensor& nested, c10::Device device) {
  const auto* impl = at::native::get_nested_tensor_impl(nested);
  at::Tensor buffer = impl->get_unsafe_storage_as_tensor().to(device);
  return at::detail::make_tensor<at::native::NestedTensorImpl>(
      buffer, impl->get_nested_sizes().clone(), impl->get_nested_strides().clone(),
      impl->get_storage_offsets().clone());
}

namespace {

using c10::IValue;

at::Tensor toDevice(const at::Tensor& t, c10::Device device) {
  if (!t.defined() || isOpenReg(t)) return t;
  return t.is_nested() ? nestedOnDevice(t, device) : t.to(device);
}

// An argument for the CPU's kernel: tensors by `f`, an openreg device as the CPU.
template <class F>
IValue toHostArgument(const IValue& v, F&& f) {
  if (v.isDevice() && v.toDevice().is_privateuseone()) return c10::Device(c10::kCPU);
  return mapTensors(v, f);
}

void copyBack(const at::Tensor& device_tensor, const at::Tensor& host) {
  if (!device_tensor.is_nested()) {
    device_tensor.copy_(host);
    return;
  }
  at::native::get_nested_tensor_impl(device_tensor)->get_unsafe_storage_as_tensor().copy_(
      at::native::get_nested_tensor_impl(host)->get_unsafe_storage_as_tensor());
}

// The nested tensors' host copies made for one call, to map results that
// are views of them (unbind, select, detach, transpose) back onto the device
// memory they view: the host copy keeps the device storage's whole layout.
class HostCopies {
 public:
  at::Tensor toHost(const at::Tensor& t) {
    if (!t.defined() || !isOpenReg(t)) return t;
    if (!t.is_nested()) return t.cpu();
    at::Tensor host = nestedOnDevice(t, c10::kCPU);
    copies_.push_back({host.storage().unsafeGetStorageImpl(),
                       at::native::get_nested_tensor_impl(t)->get_unsafe_storage_as_tensor()});
    return host;
  }

  // A result viewing a host copy, as the same view of the device memory.
  std::optional<at::Tensor> deviceView(const at::Tensor& r) const {
    if (!r.has_storage()) return std::nullopt;
    for (const auto& [host, device_storage] : copies_) {
      if (r.storage().unsafeGetStorageImpl() != host) continue;
      if (r.is_nested()) {
        const auto* impl = at::native::get_nested_tensor_impl(r);
        return at::detail::make_tensor<at::native::NestedTensorImpl>(
            c10::TensorImpl::VIEW, device_storage, impl->get_nested_sizes().clone(),
            impl->get_nested_strides().clone(), impl->get_storage_offsets().clone());
      }
      if (r.dtype() == device_storage.dtype())
        return device_storage.as_strided(r.sizes(), r.strides(), r.storage_offset());
    }
    return std::nullopt;
  }

 private:
  std::vector<std::pair<const c10::StorageImpl*, at::Tensor>> copies_;
};

// Results that describe a nested tensor's layout: on the CPU, as on CUDA.
bool returnsHostMetadata(const c10::FunctionSchema& schema) {
  const std::string& name = schema.name();
  return name == "aten::_nested_tensor_size" || name == "aten::_nested_tensor_strides" ||
         name == "aten::_nested_tensor_storage_offsets";
}

void nestedFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t num_args = schema.arguments().size();
  const IValue* args = stack->data() + stack->size() - num_args;
  // Results go to the device a device argument names (to, *_like), else to
  // the first openreg input's.
  std::optional<c10::Device> input_device, requested_device;
  for (size_t i = 0; i < num_args; ++i) {
    if (args[i].isDevice()) requested_device = args[i].toDevice();
    forEachTensor(args[i], [&](const at::Tensor& t) {
      if (!input_device && t.defined() && isOpenReg(t)) input_device = t.device();
    });
  }
  // No openreg input: a host nested tensor moved to openreg (_to_copy), as
  // the backward of .cpu() does too.
  TORCH_CHECK(input_device.has_value() || (requested_device && requested_device->is_privateuseone()),
              "openreg nested fallback: no openreg tensor or device among the arguments of ",
              schema.name());
  c10::Device target = requested_device.value_or(*input_device);
  if (target.is_privateuseone() && !target.has_index())
    target = input_device.value_or(c10::Device(c10::DeviceType::PrivateUse1, current_device()));

  HostCopies copies;
  std::vector<IValue> originals(args, args + num_args);
  torch::jit::Stack host_stack;
  for (const IValue& a : originals)
    host_stack.push_back(toHostArgument(a, [&](const at::Tensor& t) { return copies.toHost(t); }));
  std::vector<IValue> host_args = host_stack;  // the host tensors written arguments became
  torch::jit::drop(*stack, num_args);
  {
    // Below autograd, as any backend kernel runs; the CPU keys follow from the arguments.
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    op.callBoxed(host_stack);
  }
  for (size_t i = 0; i < num_args; ++i) {
    const auto* info = schema.arguments()[i].alias_info();
    if (info && info->isWrite() && originals[i].isTensor() && originals[i].toTensor().defined())
      copyBack(originals[i].toTensor(), host_args[i].toTensor());
  }
  const bool metadata = returnsHostMetadata(schema);
  for (size_t r = 0; r < host_stack.size(); ++r) {
    if (auto written = writtenArgumentIndex(schema, r)) {
      stack->push_back(originals[*written]);
      continue;
    }
    stack->push_back(mapTensors(host_stack[r], [&](const at::Tensor& t) -> at::Tensor {
      if (metadata || !t.defined()) return t;
      if (auto view = copies.deviceView(t)) return *view;
      return target.is_cpu() ? t : toDevice(t, target);
    }));
  }
}

// Ops that build a nested tensor from dense openreg tensors and CPU metadata
// (as CUDA takes them), which the dense fallback would refuse as mixing devices.
at::Tensor nestedViewFromBuffer(const at::Tensor& buffer, const at::Tensor& sizes,
                                const at::Tensor& strides, const at::Tensor& offsets) {
  TORCH_CHECK(!buffer.is_nested() && buffer.dim() == 1 && buffer.is_contiguous(),
              "_nested_view_from_buffer: the buffer must be a contiguous 1-D dense tensor");
  return at::detail::make_tensor<at::native::NestedTensorImpl>(
      c10::TensorImpl::VIEW, buffer, sizes.cpu(), strides.cpu(), offsets.cpu());
}

at::Tensor nestedFromPadded(const at::Tensor& padded, const at::Tensor& sizes, bool fuse_transform_0213) {
  return nestedOnDevice(at::_nested_from_padded(padded.cpu(), sizes.cpu(), fuse_transform_0213),
                        padded.device());
}

// An operator with a nested CPU kernel and a CompositeImplicitAutograd one
// (linear, matmul, softmax...) would decompose for NestedTensorPrivateUse1,
// whose backend fallback ranks below composite kernels, into ops a nested
// tensor does not support (sizes()). Registered as its kernel instead, the
// fallback runs the CPU's nested kernel, as CUDA runs its own.
struct RegisterNestedKernels {
  RegisterNestedKernels() {
    static torch::Library lib(torch::Library::IMPL, "aten", c10::DispatchKey::NestedTensorPrivateUse1,
                              __FILE__, __LINE__);
    auto& dispatcher = c10::Dispatcher::singleton();
    for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
      if (name.name.rfind("aten::", 0) != 0) continue;
      auto op = dispatcher.findOp(name);
      if (!op || !op->hasKernelForDispatchKey(c10::DispatchKey::NestedTensorCPU)) continue;
      std::string qualified = name.name.substr(6);
      if (!name.overload_name.empty()) qualified += "." + name.overload_name;
      lib.impl(qualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&nestedFallback>());
    }
  }
} g_register_nested_kernels;

}  // namespace

TORCH_LIBRARY_IMPL(_, NestedTensorPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&nestedFallback>());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_nested_view_from_buffer", TORCH_FN(nestedViewFromBuffer));
  m.impl("_nested_from_padded", TORCH_FN(nestedFromPadded));
}

}  // namespace openreg::kernels
