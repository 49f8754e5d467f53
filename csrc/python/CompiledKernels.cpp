#include "CompiledKernels.h"

#include <array>
#include <cstring>
#include <optional>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include <ATen/record_function.h>

#include "../aten/Launch.h"
#include "../runtime/LaunchingOp.h"
#include "../runtime/OpenRegStream.h"

namespace openreg {
namespace {

// A kernel Inductor compiled (openreg/_inductor/kernels.py) behind an entry
// taking one void* per argument: a tensor's data or a scalar's storage.
using CompiledEntry = void (*)(void**);

// One argument, by the kind kernels.py derives from its C++ parameter type:
// 'r' a tensor read (const T*), 'w' a tensor written (T*), 'i' an int64_t,
// 'f' a float (the scalar types Inductor's C++ kernels take).
struct KernelArg {
  char kind;
  at::Tensor view;                        // 'r', 'w': the kernel view (Launch.h)
  std::array<unsigned char, 8> scalar{};  // 'i', 'f': the value, passed by address
  void* pointer() { return kind == 'r' || kind == 'w' ? view.data_ptr() : scalar.data(); }
};

// A kernel's name for as long as the process lives (race reports keep it).
const char* internedName(const std::string& name) {
  static std::mutex mutex;
  static std::unordered_set<std::string> names;
  std::lock_guard<std::mutex> lock(mutex);
  return names.insert(name).first->c_str();
}

// One compiled kernel (openreg/_inductor/kernels.py): what stays the same
// from launch to launch is converted once; a call queues a run.
class CompiledKernel {
 public:
  CompiledKernel(uintptr_t entry, const std::string& name, std::string kinds)
      : entry_(reinterpret_cast<CompiledEntry>(entry)),
        name_(internedName(name)),
        kinds_(std::move(kinds)) {}

  void launch(const py::args& args) const;

 private:
  CompiledEntry entry_;
  const char* name_;
  std::string kinds_;
};

void CompiledKernel::launch(const py::args& args) const {
  // The kernel's name for the profiler (its launch and device activity) and
  // the race checker, as CUPTI names a Triton kernel.
  RECORD_FUNCTION(name_, std::vector<c10::IValue>());
  NamedLaunch named(name_);
  TORCH_CHECK(args.size() == kinds_.size(), "compiled openreg kernel: expected ", kinds_.size(),
              " arguments, got ", args.size());
  std::vector<KernelArg> kernelArgs(kinds_.size());
  std::vector<at::Tensor> reads, writes;
  std::optional<c10::Device> device;
  for (size_t i = 0; i < kinds_.size(); ++i) {
    KernelArg& arg = kernelArgs[i];
    arg.kind = kinds_[i];
    switch (arg.kind) {
      case 'r':
      case 'w': {
        auto t = py::cast<at::Tensor>(args[i]);
        if (arg.kind == 'w') checkWrittenOnDevice(t, "compiled kernel");
        if (isOpenReg(t)) {
          TORCH_CHECK(!device || *device == t.device(),
                      "Expected all tensors to be on the same device, but found at least two "
                      "devices, ", *device, " and ", t.device(), "! (compiled kernel)");
          device = t.device();
          (arg.kind == 'w' ? writes : reads).push_back(t);
        }
        arg.view = kernelView(t);  // a CPU operand (a 0-dim scalar): its value now
        break;
      }
      case 'i': {
        int64_t v = py::cast<int64_t>(args[i]);
        std::memcpy(arg.scalar.data(), &v, sizeof v);
        break;
      }
      case 'f': {
        float v = py::cast<float>(args[i]);
        std::memcpy(arg.scalar.data(), &v, sizeof v);
        break;
      }
      default:
        TORCH_CHECK(false, "compiled openreg kernel: unknown argument kind '", arg.kind, "'");
    }
  }
  // Every kernel writes an output, which checkWrittenOnDevice keeps on the device.
  TORCH_CHECK(device, "compiled openreg kernel ", name_, ": no openreg tensor among its arguments");
  auto run = [fn = entry_, a = std::move(kernelArgs)]() mutable {
    std::vector<void*> pointers(a.size());
    for (size_t i = 0; i < a.size(); ++i) pointers[i] = a[i].pointer();
    fn(pointers.data());
  };
  launchKernel(getCurrentStream(device->index()), std::move(run), reads, writes);
}

}  // namespace

void bindCompiledKernels(py::module& m) {
  py::class_<CompiledKernel>(m, "_CompiledKernel")
      .def(py::init<uintptr_t, const std::string&, std::string>(), py::arg("entry"),
           py::arg("name"), py::arg("kinds"))
      .def("__call__", &CompiledKernel::launch);
}

}  // namespace openreg
