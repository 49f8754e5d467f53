// PyTorch hook: c10d::TimerRegistry for PrivateUse1 (C10_REGISTER_TYPED_CLASS),
// the timer DDP's reducer keeps per iteration for its runtime statistics
// (`DistributedDataParallel._get_ddp_logging_data()`: avg_forward_compute_time,
// avg_backward_comm_time, ...). Without one DDP warns on every run that it
// collects time stats only for CPU and CUDA, and reports none.
//
// As CUDA's: device events recorded on the current stream, so the times are
// the device's, not the host's (which only queues the work). Measured at the
// next iteration's forward, when the events have long completed.
// Tests: tests/distributed/test_ddp.py.
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

#include <array>
#include <optional>

namespace openreg::ccl {
namespace {

class OpenRegTimer final : public c10d::Timer {
 public:
  explicit OpenRegTimer(c10::Device device) : device_(device) {}

  void record(Event event) override {
    Timer::record(event);  // the host-side timestamp
    c10::DeviceGuard guard(device_);
    auto& slot = events_[static_cast<size_t>(event)];
    // Timing events, created when first recorded (as CUDAEvent).
    if (!slot) slot.emplace(c10::DeviceType::PrivateUse1, c10::EventFlag::BACKEND_DEFAULT);
    slot->record(c10::impl::VirtualGuardImpl(c10::DeviceType::PrivateUse1).getStream(device_));
  }

  std::optional<int64_t> measureDifference(Event start, Event end) override {
    auto& from = events_[static_cast<size_t>(start)];
    auto& to = events_[static_cast<size_t>(end)];
    // Not recorded (no backward yet, or no_sync): nothing to measure.
    if (!from || !to) return std::nullopt;
    c10::DeviceGuard guard(device_);
    from->synchronize();
    to->synchronize();
    const double ms = from->elapsedTime(*to);
    // An end recorded in an earlier iteration than the start (no_sync).
    if (ms < 0) return std::nullopt;
    return static_cast<int64_t>(ms * 1e6);
  }

 private:
  c10::Device device_;
  std::array<std::optional<c10::Event>, 5> events_;  // indexed by Timer::Event
};

}  // namespace
}  // namespace openreg::ccl

namespace c10d {  // where the registry's Registerer lives
using OpenRegTimer = openreg::ccl::OpenRegTimer;
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::DeviceType::PrivateUse1, OpenRegTimer);
}  // namespace c10d
