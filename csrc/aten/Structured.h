// Native kernels for structured ATen operators, the way CUDA's generated code
// does it: ATen's own structured meta function (at::meta::structured_<op>)
// runs on the host over the openreg tensors to check arguments and compute
// output sizes, strides and dtypes (microseconds, no Meta dispatch), the
// output is allocated on the device, and the CPU implementation
// (at::cpu::<op>_out) is queued on the current stream over kernelView()s.
//
//   at::Tensor add(const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) {
//     return structured<at::meta::structured_add_Tensor>(
//         [](at::Tensor& out, auto&... args) { at::cpu::add_out(out, args...); }, a, b, alpha);
//   }
#pragma once

#include <ATen/TensorIterator.h>
#include <ATen/TensorMeta.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>

#include <array>
#include <tuple>
#include <type_traits>

#include "DispatchProbe.h"
#include "Launch.h"

namespace openreg {

enum class OutputMode { kFunctional, kInplace, kOut };

// What a structured meta function sees as the outputs: fresh device tensors
// (functional), or `self` (in-place).
template <class Meta, size_t kOutputs = 1>
struct OpenRegStructured final : public Meta {
  std::array<at::Tensor, kOutputs> outputs;
  OutputMode mode = OutputMode::kFunctional;

  void set_output_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                          at::TensorOptions options) override {
    allocate(i, sizes, strides, options);
  }
  void set_output_raw_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                              at::TensorOptions options) override {
    allocate(i, sizes, strides, options);
  }
  const at::Tensor& maybe_get_output(int64_t i) override { return outputs[i]; }

 private:
  void allocate(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides, at::TensorOptions options) {
    if (mode == OutputMode::kInplace) {
      TORCH_CHECK(outputs[i].sizes() == sizes, "output with shape ", outputs[i].sizes(),
                  " doesn't match the broadcast shape ", sizes);
    } else if (mode == OutputMode::kOut) {
      // out= semantics, as ATen's generated resize_out: resize (with ATen's
      // warning for non-empty outputs), and only an output that was resized
      // takes the meta function's layout (a channels-last or transposed
      // input gives a like-laid-out result, as on the CPU). The dtype must be
      // the meta function's, as resize_out checks it (on the CPU's kernel
      // only, the stream would fail instead of the call).
      TORCH_CHECK(options.dtype() == outputs[i].dtype(), "Expected out tensor to have dtype ",
                  options.dtype(), ", but got ", outputs[i].dtype(), " instead");
      if (at::native::resize_output(outputs[i], sizes)) {
        if (!strides.empty())
          outputs[i].as_strided_(sizes, strides);
        else if (options.memory_format_opt().has_value())
          outputs[i].unsafeGetTensorImpl()->empty_tensor_restride(*options.memory_format_opt());
      }
    } else {
      // Straight to the caching allocator (no dispatcher round trip). An empty
      // stride hint means "contiguous", as in ATen's generated create_out.
      outputs[i] = allocateOutput(sizes, strides, options);
    }
    // TensorIterator-based ops record their outputs in the iterator.
    if constexpr (std::is_base_of_v<at::TensorIteratorBase, Meta>)
      Meta::set_output_raw_strided(i, sizes, strides, options);
  }
};

// An op argument as a kernel-side call holds it: each tensor through
// `tensor` (a kernel view, or a dispatch probe's tensor), in an argument of
// the same kind; everything else by value (int lists as vectors, strings as
// strings).
template <class F>
at::Tensor kernelSideArg(const at::Tensor& t, F tensor) {
  return tensor(t);
}
template <class F>
std::optional<at::Tensor> kernelSideArg(const std::optional<at::Tensor>& t, F tensor) {
  if (!t.has_value()) return std::nullopt;
  return tensor(*t);
}
template <class F>
std::optional<at::Tensor> kernelSideArg(at::OptionalTensorRef t, F tensor) {
  if (!t.has_value()) return std::nullopt;
  return tensor(*t);
}
template <class F>
std::vector<at::Tensor> kernelSideArg(const at::ITensorListRef& ts, F tensor) {
  std::vector<at::Tensor> converted;
  for (const at::Tensor& t : ts) converted.push_back(tensor(t));
  return converted;
}
template <class F>
std::vector<int64_t> kernelSideArg(at::IntArrayRef v, F) {
  return v.vec();
}
template <class F>
std::optional<std::vector<int64_t>> kernelSideArg(at::OptionalIntArrayRef v, F) {
  if (!v.has_value()) return std::nullopt;
  return v->vec();
}
template <class F>
std::string kernelSideArg(c10::string_view s, F) {
  return std::string(s);
}
template <class T, class F>
T kernelSideArg(const T& value, F) {
  return value;
}

// For the kernel body: tensors become kernel views.
template <class T>
auto toKernelArg(const T& value) {
  return kernelSideArg(value, kernelArg);
}

// For the dispatch probe (DispatchProbe.h): tensors become probe tensors.
template <class T>
auto toProbeArg(const T& value) {
  return kernelSideArg(value, dispatch_probe::probeTensor);
}

// Kernel-side types back to what at::cpu functions take.
inline at::OptionalIntArrayRef fromKernelArg(const std::optional<std::vector<int64_t>>& v) {
  if (!v.has_value()) return std::nullopt;
  return at::IntArrayRef(*v);
}
inline at::IntArrayRef fromKernelArg(const std::vector<int64_t>& v) { return v; }
inline at::ITensorListRef fromKernelArg(const std::vector<at::Tensor>& v) { return v; }
inline c10::string_view fromKernelArg(const std::string& s) { return s; }
template <class T>
const T& fromKernelArg(const T& value) {
  return value;
}

// Raises NotImplementedError on the host if the kernel body rejects the
// dtypes of `outputs` and `args` (DispatchProbe.h): body(outputs, args...) is
// called once per dtype signature over probe tensors. The body's lambda type
// names the launch site.
template <size_t N, class Body, class... Args>
void checkDispatch(const std::array<at::Tensor, N>& outputs, Body body, const Args&... args) {
  std::string key;
  for (const at::Tensor& o : outputs) dispatch_probe::appendKey(key, o);
  (dispatch_probe::appendKey(key, args), ...);
  if (key.find(dispatch_probe::kEmpty) != std::string::npos) return;
  dispatch_probe::check<Body>(key, [&] {
    std::array<at::Tensor, N> probe_outputs;
    for (size_t i = 0; i < N; ++i) probe_outputs[i] = dispatch_probe::probeOutput(outputs[i]);
    auto probes = std::make_tuple(toProbeArg(args)...);
    std::apply([&](auto&... a) { body(probe_outputs, fromKernelArg(a)...); }, probes);
  });
}

// Calls f(tensor) for every defined tensor an op argument holds (a tensor, an
// optional tensor or a tensor list); other arguments hold none.
template <class T, class F>
void forEachTensor(const T& value, F&& f) {
  using A = std::decay_t<T>;
  if constexpr (std::is_same_v<A, at::Tensor>) {
    if (value.defined()) f(value);
  } else if constexpr (std::is_same_v<A, std::optional<at::Tensor>>) {
    if (value.has_value() && value->defined()) f(*value);
  } else if constexpr (std::is_same_v<A, at::TensorList> || std::is_same_v<A, at::ITensorListRef>) {
    for (const at::Tensor& t : value)
      if (t.defined()) f(t);
  }
}

template <class T>
void collectTensor(std::vector<at::Tensor>& out, const T& value) {
  forEachTensor(value, [&](const at::Tensor& t) { out.push_back(t); });
}

// The device an op runs on: the first openreg tensor's (tensor, optional
// tensor and tensor-list arguments, in order). CUDA's rule for native kernels:
// every tensor argument on that device.
template <class... Args>
c10::Device opDevice(const char* name, const Args&... args) {
  std::optional<c10::Device> device;
  auto check = [&](const at::Tensor& a) {
    if (!device && isOpenReg(a)) device = a.device();
    if (device && a.device() != *device && !(a.is_cpu() && a.dim() == 0)) {
      TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least "
                  "two devices, ", *device, " and ", a.device(), "! (when checking argument "
                  "for ", name, ")");
    }
  };
  (forEachTensor(args, check), ...);
  TORCH_INTERNAL_ASSERT(device.has_value(), name, ": no openreg tensor argument");
  (forEachTensor(args, check), ...);  // second pass catches a CPU tensor listed before the first device one
  return *device;
}

// Runs the structured op `Meta` functionally (fresh outputs) and queues `compute`,
// called as compute(std::array<at::Tensor, N>& out_views, kernel args...).
template <class Meta, size_t kOutputs = 1, class Compute, class... Args>
std::array<at::Tensor, kOutputs> structuredN(const char* name, Compute compute, const Args&... args) {
  c10::Device device = opDevice(name, args...);
  c10::DeviceGuard guard(device);
  OpenRegStructured<Meta, kOutputs> op;
  op.meta(args...);
  checkDispatch(op.outputs, compute, args...);
  std::array<at::Tensor, kOutputs> views;
  for (size_t i = 0; i < kOutputs; ++i) views[i] = toKernelArg(op.outputs[i]);
  std::vector<at::Tensor> reads;
  (collectTensor(reads, args), ...);
  launchOnCurrentStream(
      op.outputs[0],
      [views, kargs = std::make_tuple(toKernelArg(args)...), compute]() mutable {
        std::apply([&](auto&... a) { compute(views, fromKernelArg(a)...); }, kargs);
      },
      reads, {op.outputs.begin(), op.outputs.end()});
  return op.outputs;
}

template <class Meta, class Compute, class... Args>
at::Tensor structured(const char* name, Compute compute, const Args&... args) {
  return structuredN<Meta, 1>(
      name, [compute](std::array<at::Tensor, 1>& out, auto&&... a) { compute(out[0], a...); },
      args...)[0];
}

// The host half of a structured op writing `out` (fresh when functional, else
// in place or out=): the meta function's checks and output, the tensors it
// reads (appended to `reads`), and the kernel body running `compute` over
// kernel views. structuredInto launches one; foreach ops launch a list of them
// as one kernel.
template <class Meta, class Compute, class... Args>
auto structuredBody(OutputMode mode, Compute compute, at::Tensor& out,
                    std::vector<at::Tensor>& reads, const Args&... args) {
  checkWrittenOnDevice(out, "the op");
  OpenRegStructured<Meta, 1> op;
  op.mode = mode;
  op.outputs[0] = out;
  op.meta(args...);
  out = op.outputs[0];
  checkDispatch(
      op.outputs, [&](std::array<at::Tensor, 1>& o, auto&&... a) { compute(o[0], a...); }, args...);
  (collectTensor(reads, args), ...);
  return [view = kernelView(out), kargs = std::make_tuple(toKernelArg(args)...), compute]() mutable {
    // k binds temporaries (fromKernelArg of int lists); compute takes lvalues.
    auto call = [&](auto&&... k) { compute(view, k...); };
    std::apply([&](auto&... a) { call(fromKernelArg(a)...); }, kargs);
  };
}

// Writes into an existing tensor: in place (`out` must already have the
// broadcast shape) or out= (`out` is resized as needed).
template <class Meta, class Compute, class... Args>
at::Tensor& structuredInto(const char* name, OutputMode mode, Compute compute, at::Tensor& out,
                           const Args&... args) {
  c10::Device device = opDevice(name, out, args...);
  c10::DeviceGuard guard(device);
  std::vector<at::Tensor> reads;
  auto body = structuredBody<Meta>(mode, compute, out, reads, args...);
  launchOnCurrentStream(out, std::move(body), reads, {out});
  return out;
}

// In-place: `self` is the output; the meta function checks broadcasting.
template <class Meta, class Compute, class... Args>
at::Tensor& structuredInplace(const char* name, Compute compute, at::Tensor& self, const Args&... args) {
  return structuredInto<Meta>(name, OutputMode::kInplace, compute, self, self, args...);
}

template <class Meta, class Compute, class... Args>
at::Tensor& structuredOut(const char* name, Compute compute, at::Tensor& out, const Args&... args) {
  return structuredInto<Meta>(name, OutputMode::kOut, compute, out, args...);
}

// For ops whose CPU implementation only comes functional: queues `compute`
// (returning CPU results) and copies the results into the device `outputs`
// allocated by the caller; undefined outputs are skipped.
template <size_t N, class Compute, class... Args>
void launchIntoOutputs(const std::array<at::Tensor, N>& outputs, Compute compute,
                       const Args&... args) {
  std::array<at::Tensor, N> views;
  std::vector<at::Tensor> writes;
  for (size_t i = 0; i < N; ++i) {
    if (!outputs[i].defined()) continue;
    views[i] = kernelView(outputs[i]);
    writes.push_back(outputs[i]);
  }
  checkDispatch(
      outputs, [&](std::array<at::Tensor, N>&, auto&&... a) { compute(a...); }, args...);
  std::vector<at::Tensor> reads;
  (collectTensor(reads, args), ...);
  launchOnCurrentStream(
      writes.front(),
      [views, kargs = std::make_tuple(toKernelArg(args)...), compute]() mutable {
        std::array<at::Tensor, N> results =
            std::apply([&](auto&... a) { return compute(fromKernelArg(a)...); }, kargs);
        for (size_t i = 0; i < N; ++i)
          if (views[i].defined() && results[i].defined()) views[i].copy_(results[i]);
      },
      reads, writes);
}

}  // namespace openreg
