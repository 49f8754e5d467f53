#include "OpenRegKinetoPlugin.h"

#include "OpenRegStream.h"

#include <kineto/libkineto.h>

#include <limits>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace openreg {
namespace detail {
std::atomic<bool> g_tracingKernels{false};
}  // namespace detail

namespace {

using libkineto::ActivityType;

// One kernel run, as the stream worker saw it.
struct KernelRun {
  int64_t start = 0, end = 0;  // c10::getTime()'s clock: the profiler's own
  int32_t correlation = 0;     // the launching operator's (0: none known)
  int32_t device = 0;
  int32_t stream = 0;  // c10::StreamId, or kCollectiveRow (the header)
  const char* op = nullptr;  // the launching operator's name (static), if known
  std::string name;          // a collective's (a kernel is named after its operator)
  uint32_t flow = 0;         // its launch's (Launch), 0 if none
};

// A kernel's launch on the host (cudaLaunchKernel's counterpart).
struct Launch {
  int64_t start = 0, end = 0;
  int32_t correlation = 0;
  int32_t thread = 0;  // system thread id
  uint32_t flow = 0;   // shared with its KernelRun: the trace's arrow
};

// Kineto records one profile at a time, so the runs of the one session that
// records live here, where every stream worker can append to them.
std::mutex g_runsMutex;
std::vector<KernelRun> g_runs;
std::vector<Launch> g_launches;  // GUARDED_BY g_runsMutex
std::atomic<uint32_t> g_flows{0};
std::atomic<uint64_t> g_session{0};  // which session records (a count)
std::atomic<uint64_t> g_tracedDevices{0};  // bit d: a kernel was traced on device d

// Correlation ids of the operators running on this thread, innermost last:
// Kineto pushes one as an operator starts (pushCorrelationId), on the
// operator's own thread. Each is tagged with the session it was pushed in:
// an operator still running when a profile stops leaves its id behind.
struct Pushed {
  uint64_t session;
  uint64_t id;
};
thread_local std::vector<Pushed> t_operators;
thread_local bool t_untraced = false;  // UntracedLaunches


class KernelTraceSession final : public libkineto::IActivityProfilerSession {
 public:
  explicit KernelTraceSession(std::set<ActivityType> types) : types_(std::move(types)) {}

  void start() override {
    {
      std::lock_guard<std::mutex> lock(g_runsMutex);
      g_runs.clear();
      g_launches.clear();
    }
    g_session.fetch_add(1);
    trackLaunchingOps();  // kernel names, also when no CPU operator is recorded to link to
    detail::g_tracingKernels.store(true);
    status_ = libkineto::TraceStatus::RECORDING;
  }

  // torch.profiler synchronizes only the current device first: wait for the
  // others a traced kernel was queued on, so every kernel launched in the
  // window has its record (a failed stream runs nothing more: not an error here).
  void stop() override {
    detail::g_tracingKernels.store(false);
    untrackLaunchingOps();
    const uint64_t devices = g_tracedDevices.exchange(0);
    for (int d = 0; d < orMaxDevices; ++d)
      if (devices & (uint64_t{1} << d))
        synchronizeComputeStreams(static_cast<c10::DeviceIndex>(d), /*raisesKernelErrors=*/false);
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return {}; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) { return nullptr; }, 0,
                 std::numeric_limits<int64_t>::max());
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback operatorOf, int64_t startTime,
                    int64_t endTime) override {
    std::vector<KernelRun> runs;
    std::vector<Launch> launches;
    {
      std::lock_guard<std::mutex> lock(g_runsMutex);
      runs.swap(g_runs);
      launches.swap(g_launches);
    }
    trace_ = std::make_unique<libkineto::CpuTraceBuffer>();
    trace_->span = libkineto::TraceSpan(startTime, endTime, "openreg");
    trace_->gpuOpCount = static_cast<int>(runs.size());
    for (const KernelRun& run : runs) {
      if (run.start < startTime) continue;  // (stop() waited for the rest to end)
      const libkineto::ITraceActivity* op = run.correlation ? operatorOf(run.correlation) : nullptr;
      const std::string opName = run.op ? run.op : op ? op->name() : "(no operator)";
      // A copy kernel is a memcpy on the device's timeline, as CUPTI shows.
      const bool copy = opName == "aten::copy_" || opName == "aten::_copy_from" ||
                        opName == "aten::_local_scalar_dense";  // .item(): a DtoH copy
      const ActivityType type = copy ? ActivityType::GPU_MEMCPY : ActivityType::CONCURRENT_KERNEL;
      if (!types_.count(type)) continue;
      trace_->emplace_activity(trace_->span, type,
                               !run.name.empty() ? run.name : (copy ? "Memcpy " : "kernel ") + opName);
      libkineto::GenericTraceActivity& a = *trace_->activities.back();
      a.startTime = run.start;
      a.endTime = run.end;
      a.id = run.correlation;
      a.device = run.device;
      a.resource = run.stream;
      a.linked = op;
      if (run.flow) {
        a.flow.id = run.flow;
        a.flow.type = libkineto::kLinkAsyncCpuGpu;
        a.flow.start = 0;
      }
      a.log(logger);
      streams_.insert({run.device, run.stream});
    }
    if (!types_.count(ActivityType::PRIVATEUSE1_RUNTIME)) return;
    for (const Launch& launch : launches) {
      if (launch.start < startTime) continue;
      trace_->emplace_activity(trace_->span, ActivityType::PRIVATEUSE1_RUNTIME,
                               "openregLaunchKernel");
      libkineto::GenericTraceActivity& a = *trace_->activities.back();
      a.startTime = launch.start;
      a.endTime = launch.end;
      a.id = launch.correlation;
      a.device = libkineto::processId();
      a.resource = launch.thread;
      a.threadId = launch.thread;
      a.linked = launch.correlation ? operatorOf(launch.correlation) : nullptr;
      a.flow.id = launch.flow;
      a.flow.type = libkineto::kLinkAsyncCpuGpu;
      a.flow.start = 1;
      a.log(logger);
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override { return nullptr; }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> infos;
    for (const auto& [device, stream] : streams_)
      infos.push_back({stream, stream, device,
                       stream == kCollectiveRow ? std::string("oreg_ccl")
                                                : "openreg stream " + std::to_string(stream)});
    return infos;
  }

  // Kineto keeps the activities alive with the trace it returns.
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return std::move(trace_);
  }

  void pushCorrelationId(uint64_t id) override {
    const uint64_t session = g_session.load();
    if (!t_operators.empty() && t_operators.back().session != session) t_operators.clear();
    t_operators.push_back({session, id});
  }

  void popCorrelationId() override {
    if (!t_operators.empty()) t_operators.pop_back();
  }

 private:
  std::set<ActivityType> types_;  // of those this profiler offers, the ones asked for
  std::unique_ptr<libkineto::CpuTraceBuffer> trace_;
  std::set<std::pair<int32_t, int32_t>> streams_;  // (device, stream) seen
};

class OpenRegActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override {
    static const std::string name = "openreg";
    return name;
  }

  const std::set<ActivityType>& availableActivities() const override {
    static const std::set<ActivityType> types{ActivityType::CONCURRENT_KERNEL,
                                              ActivityType::GPU_MEMCPY,
                                              ActivityType::PRIVATEUSE1_RUNTIME};
    return types;
  }

  // A session only for a profile that asks for device activities
  // (ProfilerActivity.PrivateUse1 asks for both of ours).
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<ActivityType>& activityTypes, const libkineto::Config&) override {
    std::set<ActivityType> wanted;
    for (ActivityType t : availableActivities())
      if (activityTypes.count(t)) wanted.insert(t);
    // Launch events alone (ProfilerActivity.CPU asks for those) do not start a session.
    if (!wanted.count(ActivityType::CONCURRENT_KERNEL) && !wanted.count(ActivityType::GPU_MEMCPY))
      return nullptr;
    return std::make_unique<KernelTraceSession>(std::move(wanted));
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*startMs*/, int64_t /*durationMs*/, const std::set<ActivityType>& activityTypes,
      const libkineto::Config& config) override {
    return configure(activityTypes, config);
  }
};

struct Registrar {
  Registrar() {
    libkineto::api().registerProfilerFactory(
        [] { return std::make_unique<OpenRegActivityProfiler>(); });
  }
} g_registrar;

}  // namespace

TracedLaunch::TracedLaunch(const c10::Stream& stream, std::function<void()>& kernel) {
  if (t_untraced) return;
  KernelRun run;
  run.correlation = correlation_ = launchingCorrelation();
  run.op = launchingOpName();
  run.device = stream.device_index();
  run.stream = static_cast<int32_t>(stream.id());
  run.flow = flow_ = g_flows.fetch_add(1, std::memory_order_relaxed) + 1;
  g_tracedDevices.fetch_or(uint64_t{1} << run.device, std::memory_order_relaxed);
  kernel = [run, body = std::move(kernel)]() mutable {
    run.start = c10::getTime();
    body();  // a kernel that throws fails its stream; it gets no record
    run.end = c10::getTime();
    std::lock_guard<std::mutex> lock(g_runsMutex);
    g_runs.push_back(std::move(run));
  };
  start_ = c10::getTime();
}

TracedLaunch::~TracedLaunch() {
  if (!flow_) return;
  Launch launch{start_, c10::getTime(), correlation_, libkineto::systemThreadId(), flow_};
  std::lock_guard<std::mutex> lock(g_runsMutex);
  g_launches.push_back(launch);
}

void recordRun(int device, int32_t stream, int32_t correlation, const char* op, std::string name,
               int64_t startNs) {
  KernelRun run;
  run.correlation = correlation;
  run.op = op;
  run.device = device;
  run.stream = stream;
  run.name = std::move(name);
  run.start = startNs;
  run.end = c10::getTime();
  std::lock_guard<std::mutex> lock(g_runsMutex);
  g_runs.push_back(std::move(run));
}

int32_t launchingCorrelation() {
  if (t_operators.empty() || t_operators.back().session != g_session.load()) return 0;
  return static_cast<int32_t>(t_operators.back().id);
}

UntracedLaunches::UntracedLaunches() : previous_(t_untraced) { t_untraced = true; }
UntracedLaunches::~UntracedLaunches() { t_untraced = previous_; }

TraceOrigin collectiveOrigin(int device, const std::string& op, const std::string& desc) {
  if (!tracingKernels() || device < 0) return {};
  g_tracedDevices.fetch_or(uint64_t{1} << device, std::memory_order_relaxed);
  return {true, device, launchingCorrelation(), launchingOpName(), "oreg_ccl " + op + " " + desc};
}

}  // namespace openreg
