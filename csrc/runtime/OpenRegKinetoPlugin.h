// PyTorch hook: a Kineto child profiler (libkineto::IActivityProfiler,
// registered with libkineto::api().registerProfilerFactory), the device side
// of torch.profiler.profile(activities=[ProfilerActivity.PrivateUse1]): every
// kernel that runs on an openreg stream while a profile records becomes a
// device activity (a CONCURRENT_KERNEL, a GPU_MEMCPY for copies) on its
// device and stream, timed on the stream's worker and linked to the operator
// that launched it, as CUPTI's kernel records are for CUDA. So
// key_averages() shows device time per operator and the Chrome trace shows
// one row per stream; oreg_ccl adds its collectives (recordCollectiveRun) and
// keeps its streams' waits for them out (UntracedLaunches).
// Tests: tests/runtime/test_profiler.py, tests/distributed/test_semantics.py.
#pragma once

#include <c10/core/Stream.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

namespace openreg {

namespace detail {
extern std::atomic<bool> g_tracingKernels;
}

// True while a profile that asked for device activities records: one relaxed
// load on every launch when not profiling.
inline bool tracingKernels() { return detail::g_tracingKernels.load(std::memory_order_relaxed); }

// A launch of `kernel` on `stream` while a profile records (launchKernel):
// wraps `kernel` so that its run is timed and recorded, with the operator
// launching it (taken now, on the launching thread); the launch itself, from
// construction to destruction, becomes a host event ("openregLaunchKernel",
// as cudaLaunchKernel) with a flow arrow to the kernel in the trace.
class TracedLaunch {
 public:
  TracedLaunch(const c10::Stream& stream, std::function<void()>& kernel);
  ~TracedLaunch();
  TracedLaunch(const TracedLaunch&) = delete;
  TracedLaunch& operator=(const TracedLaunch&) = delete;

 private:
  uint32_t flow_ = 0;  // 0: not traced (an UntracedLaunches scope)
  int32_t correlation_ = 0;
  int64_t start_ = 0;
};

// While one lives, this thread's launches are no device work in the trace:
// oreg_ccl's kernels that hold a stream until a collective is done, or mark
// where one may start, stand for what CUDA's streams do with events (a gap in
// the stream's row; the collective itself is on its own row).
class UntracedLaunches {
 public:
  UntracedLaunches();
  ~UntracedLaunches();
  UntracedLaunches(const UntracedLaunches&) = delete;
  UntracedLaunches& operator=(const UntracedLaunches&) = delete;

 private:
  bool previous_;
};

// Work the host did itself in `stream`'s order, from `startNs` (c10::getTime)
// until now (a blocking copy or an operator run synchronously on an idle
// stream): recorded as a kernel of that stream, as the device would have run it.
void recordHostRun(const c10::Stream& stream, int64_t startNs);

// A collective of oreg_ccl on `device`'s tensors, as NCCL's kernel on its own
// stream: what it takes from its issue (the c10d operator issuing it, on the
// caller's thread) and, once its worker ran it, its run from `startNs` to now
// under `name`, on the device's "oreg_ccl" row.
struct TraceOrigin {
  bool traced = false;  // issued while a profile recorded kernels
  int32_t correlation = 0;
  const char* op = nullptr;
};
TraceOrigin collectiveOrigin(int device);
// `name`: what the trace calls it (e.g. "oreg_ccl allreduce 1024 x Float SUM").
void recordCollectiveRun(int device, const TraceOrigin& origin, std::string name, int64_t startNs);

}  // namespace openreg
