// PyTorch hook: a Kineto child profiler (libkineto::IActivityProfiler,
// registered with libkineto::api().registerProfilerFactory), the device side
// of torch.profiler.profile(activities=[ProfilerActivity.PrivateUse1]): every
// kernel that runs on an openreg stream while a profile records becomes a
// device activity (a CONCURRENT_KERNEL, a GPU_MEMCPY for copies) on its
// device and stream, timed on the stream's worker and linked to the operator
// that launched it, as CUPTI's kernel records are for CUDA. So
// key_averages() shows device time per operator and the Chrome trace shows
// one row per stream; oreg_ccl adds its collectives (runTracedCollective) and
// keeps its streams' waits for them out (UntracedLaunches).
// Tests: tests/runtime/test_profiler.py, tests/distributed/test_semantics.py.
#pragma once

#include <c10/core/Stream.h>
#include <c10/util/ApproximateClock.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "LaunchingOp.h"

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

// Records a run from `startNs` (c10::getTime) to now, on `stream` of `device`
// or on its oreg_ccl row (`stream` kCollectiveRow), for the operator
// `correlation`/`op` launched it from, under `name` ("": after the operator).
constexpr int32_t kCollectiveRow = 1 << 20;  // far from any stream id openreg hands out
void recordRun(int device, int32_t stream, int32_t correlation, const char* op, std::string name,
               int64_t startNs);
// The profiler's id of the operator running on this thread (0: none).
int32_t launchingCorrelation();

// Runs `body`, work the host does itself in `stream`'s order (a blocking copy
// or an operator run synchronously on an idle stream): recorded as a kernel of
// that stream, as the device would have run it.
template <class Body>
void runAsStreamWork(const c10::Stream& stream, Body&& body) {
  if (!tracingKernels()) return body();
  const int64_t start = c10::getTime();
  body();
  recordRun(stream.device_index(), static_cast<int32_t>(stream.id()), launchingCorrelation(),
            launchingOpName(), "", start);
}

// A collective of oreg_ccl on `device`'s tensors, as NCCL's kernel on its own
// stream: what it takes from its issue (the c10d operator issuing it, on the
// caller's thread; not traced, nothing), then runTracedCollective runs it on
// the device's "oreg_ccl" row, named "oreg_ccl <op> <desc>" (e.g.
// "oreg_ccl allreduce 1024 x Float SUM").
struct TraceOrigin {
  bool traced = false;  // issued while a profile recorded kernels
  int device = -1;
  int32_t correlation = 0;
  const char* op = nullptr;
  std::string name;
};
TraceOrigin collectiveOrigin(int device, const std::string& op, const std::string& desc);
template <class Body>
void runTracedCollective(TraceOrigin& origin, Body&& body) {
  if (!origin.traced) return body();
  const int64_t start = c10::getTime();
  body();
  recordRun(origin.device, kCollectiveRow, origin.correlation, origin.op, std::move(origin.name),
            start);
}

}  // namespace openreg
