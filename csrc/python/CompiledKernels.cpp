#include "CompiledKernels.h"

#include <array>
#include <cstring>
#include <optional>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include <ATen/record_function.h>
#include <c10/core/DeviceGuard.h>

#include "../aten/Launch.h"
#include "../runtime/LaunchingOp.h"
#include "../runtime/OpenRegStream.h"

namespace openreg {
namespace {

// A kernel Inductor compiled (openreg/_inductor/kernels.py) behind an entry
// taking one void* per argument: a tensor's data or a scalar's storage.
using CompiledEntry = void (*)(void**);

// One argument's kind, as kernels.py derives it from the C++ parameter type:
// 'r' a tensor read (const T*), 'w' a tensor written (T*), 'i' int64_t,
// 'f' float, 'd' double.
struct KernelArgs {
  std::vector<at::Tensor> views;  // kernel views, in argument order
  std::vector<std::array<unsigned char, 8>> scalars;
  std::string kinds;
};

// A kernel's name for as long as the process lives (race reports keep it).
const char* internedName(const std::string& name) {
  static std::mutex mutex;
  static std::unordered_set<std::string> names;
  std::lock_guard<std::mutex> lock(mutex);
  return names.insert(name).first->c_str();
}

void launchCompiledKernel(uintptr_t entry, const std::string& name, const std::string& kinds,
                          const py::tuple& args) {
  // The kernel's name for the profiler (its launch and device activity) and
  // the race checker, as CUPTI names a Triton kernel.
  RECORD_FUNCTION(name, std::vector<c10::IValue>());
  NamedLaunch named(internedName(name));
  TORCH_CHECK(args.size() == kinds.size(), "compiled openreg kernel: expected ", kinds.size(),
              " arguments, got ", args.size());
  KernelArgs kernelArgs;
  kernelArgs.kinds = kinds;
  std::vector<at::Tensor> reads, writes;
  std::optional<c10::Device> device;
  for (size_t i = 0; i < kinds.size(); ++i) {
    std::array<unsigned char, 8> scalar{};
    switch (kinds[i]) {
      case 'r':
      case 'w': {
        auto t = py::cast<at::Tensor>(args[i]);
        if (kinds[i] == 'w') checkWrittenOnDevice(t, "compiled kernel");
        if (isOpenReg(t)) {
          TORCH_CHECK(!device || *device == t.device(),
                      "Expected all tensors to be on the same device, but found at least two "
                      "devices, ", *device, " and ", t.device(), "! (compiled kernel)");
          device = t.device();
          (kinds[i] == 'w' ? writes : reads).push_back(t);
        }
        kernelArgs.views.push_back(kernelView(t));
        break;
      }
      case 'i': {
        int64_t v = py::cast<int64_t>(args[i]);
        std::memcpy(scalar.data(), &v, sizeof v);
        break;
      }
      case 'f': {
        float v = py::cast<float>(args[i]);
        std::memcpy(scalar.data(), &v, sizeof v);
        break;
      }
      case 'd': {
        double v = py::cast<double>(args[i]);
        std::memcpy(scalar.data(), &v, sizeof v);
        break;
      }
      default:
        TORCH_CHECK(false, "compiled openreg kernel: unknown argument kind '", kinds[i], "'");
    }
    kernelArgs.scalars.push_back(scalar);
  }
  const c10::DeviceIndex index =
      device ? device->index() : c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)
                                      ->getDevice()
                                      .index();
  auto run = [fn = reinterpret_cast<CompiledEntry>(entry), a = std::move(kernelArgs)]() mutable {
    std::vector<void*> pointers(a.kinds.size());
    size_t view = 0;
    for (size_t i = 0; i < a.kinds.size(); ++i) {
      const bool isTensor = a.kinds[i] == 'r' || a.kinds[i] == 'w';
      pointers[i] = isTensor ? a.views[view++].data_ptr() : a.scalars[i].data();
    }
    fn(pointers.data());
  };
  launchKernel(getCurrentStream(index), std::move(run), reads, writes);
}

}  // namespace

void bindCompiledKernels(py::module& m) {
  m.def("_launch_compiled_kernel", &launchCompiledKernel, py::arg("entry"), py::arg("name"),
        py::arg("kinds"), py::arg("args"));
}

}  // namespace openreg
