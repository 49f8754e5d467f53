#include "Launch.h"

#include <c10/core/TensorImpl.h>

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include <ATen/EmptyTensor.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/COW.h>

#include "../runtime/OpenRegCachingAllocator.h"
#include "../runtime/OpenRegException.h"
#include "../runtime/OpenRegKinetoPlugin.h"
#include "../runtime/OpenRegStream.h"
#include "../runtime/LaunchingOp.h"
#include "OpenMPThreads.h"

namespace openreg {

at::Tensor tensorOver(c10::Storage storage, const at::Tensor& like, c10::DispatchKey key) {
  // Never an inference tensor, even under torch.inference_mode(): the worker
  // thread runs kernels outside inference mode, where writing into one raises.
  c10::InferenceMode not_inference(/*enabled=*/false);
  auto view = at::detail::make_tensor<c10::TensorImpl>(std::move(storage),
                                                       c10::DispatchKeySet(key), like.dtype());
  view.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(),
                                                    like.storage_offset());
  // Lazy conjugation / negation are part of the value (copy_ resolves them).
  view._set_conj(like.is_conj());
  view._set_neg(like.is_neg());
  return view;
}

at::Tensor hostTensorAt(void* data, size_t nbytes, const at::Tensor& like) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes,
                       c10::DataPtr(data, c10::Device(c10::DeviceType::CPU)),
                       /*allocator=*/nullptr, /*resizable=*/false);
  return tensorOver(std::move(storage), like, c10::DispatchKey::CPU);
}

at::Tensor kernelView(const at::Tensor& t) {
  if (!isOpenReg(t) && t.defined() && !t.unsafeGetTensorImpl()->is_wrapped_number()) {
    // A host tensor (a CPU scalar next to device tensors): the kernel runs
    // later, so it gets the value as of the launch, as CUDA passes CPU scalars
    // by value, in a copy it owns (the caller may change or free its tensor;
    // and dropping a Python-owned tensor on a worker would need the GIL).
    // A Python number's tensor is a private temporary already.
    return t.clone();
  }
  if (!isOpenReg(t)) return t;
  const c10::Storage& storage = t.storage();
  // A copy-on-write storage (torch._lazy_clone's) gets memory of its own
  // first, as ATen's mutable_data_ptr() gives it: a kernel view cannot tell
  // its kernel's reads from its writes, which would reach every tensor sharing it.
  if (c10::impl::cow::is_cow_data_ptr(storage.data_ptr()))
    storage.unsafeGetStorageImpl()->mutable_data();
  // A storage resized to fewer bytes than its tensor spans (FSDP frees
  // parameters with resize_(0)): the kernel would reach memory that is no
  // longer the tensor's, or none (CUDA: an illegal memory access). Refused at
  // the launch instead.
  if (t.numel() > 0) {
    // Contiguous (most kernel arguments): two cached fields, no walk over the dims.
    const size_t needed =
        t.is_contiguous()
            ? static_cast<size_t>(t.storage_offset() + t.numel()) * t.itemsize()
            : at::detail::computeStorageNbytes(t.sizes(), t.strides(), t.itemsize(),
                                               t.storage_offset());
    TORCH_CHECK(needed <= storage.nbytes(), "openreg: a tensor (sizes ", t.sizes(), ", strides ",
                t.strides(), ", storage offset ", t.storage_offset(), ") spans ", needed,
                " bytes of its storage, which holds only ", storage.nbytes(),
                " (resized since, as FSDP frees parameters): a kernel cannot use it");
  }
  return hostTensorAt(orKernelPtr(storage.data()), storage.nbytes(), t);
}

std::vector<at::Tensor> kernelViews(at::TensorList tensors) {
  std::vector<at::Tensor> views;
  views.reserve(tensors.size());
  for (const at::Tensor& t : tensors) views.push_back(kernelView(t));
  return views;
}

at::Tensor allocateOutput(at::IntArrayRef sizes, at::IntArrayRef strides,
                          const at::TensorOptions& options) {
  c10::OptionalDeviceGuard guard(options.device_opt());
  constexpr c10::DispatchKeySet kKeys(c10::DispatchKey::PrivateUse1);
  auto dtype = options.dtype().toScalarType();
  if (strides.empty())
    return at::detail::empty_generic(sizes, getCachingAllocator(), kKeys, dtype,
                                     options.memory_format_opt());
  return at::detail::empty_strided_generic(sizes, strides, getCachingAllocator(), kKeys, dtype);
}

namespace {

// The contiguous byte runs a view touches, when there are at most kMaxRuns of
// them: two views that interleave (x[:, 0] and x[:, 1], x[::2] and x[1::2],
// .real and .imag) then touch no common byte for the race checker. More runs
// than that (the checker keeps a segment per run) make one periodic access:
// the span, with the window of each period (the smallest outer stride) that
// the runs fall in, when every outer stride is a multiple of that period.
constexpr int64_t kMaxRuns = 256;

// `dims` from `outer` on: (stride, size) in elements, strides ascending.
orAccess periodicAccess(const char* begin, int64_t span, int64_t run, int64_t item,
                        const std::vector<std::pair<int64_t, int64_t>>& dims, size_t outer,
                        bool write, const char* what) {
  orAccess access{begin, static_cast<size_t>(span), write, what};
  const int64_t period = dims[outer].first;
  bool every_period = true;
  for (size_t d = outer + 1; d < dims.size(); ++d) {
    if (dims[d].first % period != 0) return access;  // no common period: the whole span
    // Dense over periods: this stride steps over exactly the dimensions inside it.
    every_period &= dims[d].first == dims[d - 1].first * dims[d - 1].second;
  }
  access.period = static_cast<size_t>(period * item);
  access.phase = reinterpret_cast<uintptr_t>(begin) % access.period;
  access.width = static_cast<size_t>(run * item);
  access.every_period = every_period;
  return access;
}

void addRuns(const at::Tensor& t, const char* begin, bool write, const char* what,
             std::vector<orAccess>& out) {
  const int64_t item = t.itemsize();
  const int64_t span = at::detail::computeStorageNbytes(t.sizes(), t.strides(), item);
  // Dimensions that step through memory, innermost first (size-1 and
  // broadcast dimensions touch no other bytes).
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) in elements
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) > 1 && t.stride(d) != 0) dims.emplace_back(t.stride(d), t.size(d));
  std::sort(dims.begin(), dims.end());
  // The innermost dimensions that are dense make one run.
  int64_t run = 1;
  size_t outer = 0;
  while (outer < dims.size() && dims[outer].first == run) run *= dims[outer++].second;
  int64_t runs = 1;
  for (size_t d = outer; d < dims.size(); ++d) runs *= dims[d].second;
  const bool overlapping = outer < dims.size() && dims[outer].first < run;  // not one-to-one
  if (runs == 1 || overlapping) {
    out.push_back({begin, static_cast<size_t>(span), write, what});
    return;
  }
  if (runs > kMaxRuns) {
    out.push_back(periodicAccess(begin, span, run, item, dims, outer, write, what));
    return;
  }
  std::vector<int64_t> index(dims.size(), 0);
  for (int64_t r = 0; r < runs; ++r) {
    int64_t offset = 0;
    for (size_t d = outer; d < dims.size(); ++d) offset += index[d] * dims[d].first;
    out.push_back({begin + offset * item, static_cast<size_t>(run * item), write, what});
    for (size_t d = outer; d < dims.size() && ++index[d] == dims[d].second; ++d) index[d] = 0;
  }
}

}  // namespace

std::vector<orAccess> accessesOf(const std::vector<at::Tensor>& reads,
                                 const std::vector<at::Tensor>& writes) {
  const char* what = launchingOpName();  // tracked once the checker is on (Module.cpp)
  std::vector<orAccess> accesses;
  accesses.reserve(reads.size() + writes.size());
  for (const auto* list : {&reads, &writes}) {
    for (const auto& t : *list) {
      if (!isOpenReg(t) || t.numel() == 0) continue;
      const auto* begin =
          static_cast<const char*>(t.storage().data()) + t.storage_offset() * t.itemsize();
      addRuns(t, begin, /*write=*/list == &writes, what, accesses);
    }
  }
  return accesses;
}

namespace {
void checkLaunched(const c10::Stream& stream, orStream raw, orError error) {
  TORCH_CHECK(error != orErrorDataRace, orSanitizerLastReport());
  if (error != orSuccess)
    checkKernelError(error, c10::str(stream), orStreamLastException(raw));
}
}  // namespace

void launchKernel(const c10::Stream& stream, std::function<void()> kernel,
                  const std::vector<at::Tensor>& reads, const std::vector<at::Tensor>& writes) {
  orStream raw = rawStream(stream);
  releaseOpenMPTeamForLaunch();  // the device computes now (OpenMPThreads.h)
  std::optional<TracedLaunch> traced;  // torch.profiler (OpenRegKinetoPlugin.h)
  // A captured kernel is recorded for a graph, not run: nothing to trace.
  if (tracingKernels() && !orStreamIsCapturing(raw)) traced.emplace(stream, kernel);
  // Only the race checker reads the accesses.
  orError error = orLaunchKernel(raw, std::move(kernel),
                                 orSanitizerEnabled() ? accessesOf(reads, writes)
                                                      : std::vector<orAccess>{});
  checkLaunched(stream, raw, error);
}

void launchPreparedKernel(const c10::Stream& stream, orPrepare prepare,
                          const std::vector<at::Tensor>& reads, const std::vector<at::Tensor>& writes) {
  orStream raw = rawStream(stream);
  orError error = orLaunchPreparedKernel(raw, std::move(prepare),
                                         orSanitizerEnabled() ? accessesOf(reads, writes)
                                                              : std::vector<orAccess>{});
  checkLaunched(stream, raw, error);
}

void checkHostAccess(const c10::Stream& stream, const std::vector<at::Tensor>& reads,
                     const std::vector<at::Tensor>& writes) {
  if (!orSanitizerEnabled()) return;
  orError error = orSanitizerStreamAccess(rawStream(stream), accessesOf(reads, writes));
  TORCH_CHECK(error != orErrorDataRace, orSanitizerLastReport());
}

void launchOnCurrentStream(const at::Tensor& t, std::function<void()> kernel,
                           const std::vector<at::Tensor>& reads,
                           const std::vector<at::Tensor>& writes) {
  launchKernel(getCurrentStream(t.device().index()), std::move(kernel), reads, writes);
}

}  // namespace openreg
