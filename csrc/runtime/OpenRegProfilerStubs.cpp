// PyTorch hook: torch::profiler::impl::registerPrivateUse1Methods, the device
// timing of the profiler without a Kineto device plugin
// (torch.autograd.profiler.profile(use_device="openreg"), which runs in
// ProfilerState::KINETO_PRIVATEUSE1_FALLBACK): each operator is bracketed by
// two timing events on the current stream, and its device time is the time
// between them, as CUDA's legacy profiler does with cudaEvents.
// Tests: tests/runtime/test_profiler.py.
#include <memory>

#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include "OpenRegException.h"
#include "OpenRegFunctions.h"
#include "OpenRegStream.h"
#include "driver/Driver.h"

namespace openreg {
namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

struct OpenRegProfilerStubs final : torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    const c10::DeviceIndex index = current_device();
    if (device) *device = index;
    orEvent raw = nullptr;
    OPENREG_CHECK(orEventCreate(&raw, /*enable_timing=*/true));
    *event = std::shared_ptr<void>(raw, [](void* e) { orEventDestroy(static_cast<orEvent>(e)); });
    if (cpu_ns) *cpu_ns = c10::getTime();
    OPENREG_CHECK(orEventRecord(raw, rawStream(getCurrentStream(index))));
  }

  // Microseconds, as CUDA's stub returns.
  float elapsed(const ProfilerVoidEventStub* start, const ProfilerVoidEventStub* end) const override {
    auto* first = static_cast<orEvent>(start->get());
    auto* last = static_cast<orEvent>(end->get());
    OPENREG_CHECK(orEventSynchronize(first));
    OPENREG_CHECK(orEventSynchronize(last));
    float ms = 0;
    OPENREG_CHECK(orEventElapsedTime(&ms, first, last));
    return ms * 1000.0f;
  }

  // NVTX-style markers: a simulated device has no tool to show them to.
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}

  bool enabled() const override { return true; }

  void onEachDevice(std::function<void(int)> op) const override {
    const c10::DeviceIndex previous = current_device();
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      set_device(d);
      op(d);
    }
    set_device(previous);
  }

  void synchronize() const override { synchronizeDevice(current_device()); }
};

struct Registrar {
  Registrar() {
    static OpenRegProfilerStubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  }
} g_registrar;

}  // namespace
}  // namespace openreg
