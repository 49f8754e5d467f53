#include "OpenRegGraph.h"  // PyTorch hook: at::GraphImplInterface; contract in the header

#include <ATen/core/GraphImplInterface.h>
#include <c10/core/DeviceType.h>

#include <mutex>
#include <optional>
#include <unordered_map>

#include "LaunchingOp.h"
#include "OpenRegCachingAllocator.h"
#include "OpenRegException.h"
#include "OpenRegFunctions.h"
#include "OpenRegKinetoPlugin.h"
#include "OpenRegMemPool.h"
#include "OpenRegStream.h"

namespace openreg {
namespace {

// Open captures by the stream that began them (the origin every stream of
// the capture reports): what per-capture state (the generators') keys on.
std::mutex g_captures_mutex;
std::unordered_map<orStream, uint64_t> g_open_captures;  // GUARDED_BY g_captures_mutex
uint64_t g_next_capture_id = 1;                          // GUARDED_BY g_captures_mutex

void openCapture(orStream origin) {
  std::lock_guard<std::mutex> lock(g_captures_mutex);
  g_open_captures[origin] = g_next_capture_id++;
}

void closeCapture(orStream origin) {
  std::lock_guard<std::mutex> lock(g_captures_mutex);
  g_open_captures.erase(origin);
}

class OpenRegGraph final : public at::GraphImplInterface {
 public:
  explicit OpenRegGraph(const at::GraphImplArgs& /*args: keep_graph changes nothing here*/) {}
  ~OpenRegGraph() override { reset(); }

  void capture_begin(c10::MempoolId_t pool, at::GraphCaptureMode /*mode*/) override {
    TORCH_CHECK(!graph_ && !capturing_,
                "This Graph instance already owns a captured graph. To capture a new graph, "
                "create a new instance or call reset() first.");
    device_ = current_device();
    stream_ = getCurrentStream(device_);
    TORCH_CHECK(stream_ != getDefaultStream(device_),
                "openreg graphs must be captured on a non-default stream. (However, after "
                "capture, it's ok to replay them on the default stream.)");
    TORCH_CHECK(!orStreamIsCapturing(rawStream(stream_)),
                "The current stream is already capturing a graph; captures do not nest.");
    pool_ = pool == c10::MempoolId_t{0, 0} ? newPoolId(/*shared=*/false) : pool;
    poolNumber_ = acquirePool(pool_);
    beginAllocateToPool(device_, poolNumber_, stream_.id());
    orError error = orStreamBeginCapture(rawStream(stream_));
    if (error != orSuccess) {
      endAllocateToPool(device_, stream_.id());
      releasePoolRef();
      OPENREG_CHECK(error);
    }
    openCapture(rawStream(stream_));
    capturing_ = true;
  }

  void capture_end() override {
    TORCH_CHECK(capturing_, "Graph::capture_end without a preceding capture_begin");
    TORCH_CHECK(getCurrentStream(device_) == stream_,
                "Capture must end on the same stream it began on.");
    endAllocateToPool(device_, stream_.id());
    closeCapture(rawStream(stream_));
    capturing_ = false;
    orGraph graph = nullptr;
    const orError error = orStreamEndCapture(rawStream(stream_), &graph);
    if (error != orSuccess) {  // a refused call invalidated it: no graph
      releasePoolRef();
      OPENREG_CHECK(error);
    }
    graph_ = graph;
    if (orGraphKernelCount(graph_) == 0)
      TORCH_WARN("The openreg graph is empty. This usually means that the graph was attempted "
                 "to be captured on the wrong device or stream.");
  }

  void instantiate() override {
    TORCH_CHECK(graph_, "Graph::instantiate without a preceding successful capture.");
  }

  void replay() override {
    TORCH_CHECK(graph_, "Called Graph::replay without a preceding successful capture.");
    c10::Stream stream = getCurrentStream(device_);
    orStream raw = rawStream(stream);
    // One kernel, which torch.profiler shows as "kernel Graph::replay".
    NamedLaunch name("Graph::replay");
    orError error;
    if (orStreamIsCapturing(raw)) {
      // Recorded in the other capture, not run (nothing to trace): its
      // prepared kernels (collectives) are made at each of that graph's launches.
      error = orGraphLaunch(graph_, raw);
    } else {
      std::function<void()> kernel = orGraphPrepare(graph_)(raw);
      std::optional<TracedLaunch> traced;
      if (tracingKernels()) traced.emplace(stream, kernel);
      error = orLaunchKernel(raw, std::move(kernel), orGraphAccesses(graph_));
    }
    TORCH_CHECK(error != orErrorDataRace, orSanitizerLastReport());
    if (error != orSuccess)
      checkKernelError(error, c10::str(stream), orStreamLastException(raw));
  }

  void reset() override {
    if (capturing_) {  // an abandoned capture: stop recording, keep nothing
      endAllocateToPool(device_, stream_.id());
      closeCapture(rawStream(stream_));
      orGraph partial = nullptr;
      if (orStreamEndCapture(rawStream(stream_), &partial) == orSuccess) orGraphDestroy(partial);
      capturing_ = false;
    }
    if (graph_) {
      orGraphDestroy(graph_);  // a replay still queued keeps its kernels
      graph_ = nullptr;
    }
    releasePoolRef();
  }

  c10::MempoolId_t pool() const override { return pool_; }

  void enable_debug_mode() override {}

  void debug_dump(const std::string& /*path*/) override {
    TORCH_CHECK(false, "openreg graphs have no debug dump");
  }

 private:
  // Never throws (reset() runs in the destructor).
  void releasePoolRef() {
    if (pool_ == c10::MempoolId_t{0, 0}) return;
    if (releasePoolUse(pool_)) {
      // The pool's memory goes back to its streams once no replay queued now
      // can still write it (releasePool orders that after the device's queue).
      try {
        releasePool(poolNumber_, /*returnUnused=*/false);
      } catch (const c10::Error&) {
      }
    }
    pool_ = {0, 0};
    poolNumber_ = 0;
  }

  c10::DeviceIndex device_ = 0;
  c10::Stream stream_{c10::Stream::DEFAULT, c10::Device(c10::DeviceType::PrivateUse1, 0)};
  c10::MempoolId_t pool_{0, 0};
  uint64_t poolNumber_ = 0;
  bool capturing_ = false;
  orGraph graph_ = nullptr;
};

}  // namespace

void registerGraphImpl() {
  // Keyed by the backend's name (DeviceTypeName of PrivateUse1), known only
  // once Python has renamed it: so registered then, not at load time.
  static std::once_flag once;
  std::call_once(once, [] {
    at::GraphImplRegistry()->Register(
        c10::DeviceTypeName(c10::DeviceType::PrivateUse1, /*lower_case=*/false),
        [](const at::GraphImplArgs& args) -> std::unique_ptr<at::GraphImplInterface> {
          return std::make_unique<OpenRegGraph>(args);
        });
  });
}

c10::MempoolId_t graphPoolHandle() { return newPoolId(/*shared=*/true); }

std::optional<uint64_t> captureIdOf(const c10::Stream& stream) {
  orStream origin = orStreamCaptureOrigin(rawStream(stream));
  if (!origin) return std::nullopt;
  std::lock_guard<std::mutex> lock(g_captures_mutex);
  auto it = g_open_captures.find(origin);
  if (it == g_open_captures.end()) return std::nullopt;
  return it->second;
}

bool captureIsOpen(uint64_t id) {
  std::lock_guard<std::mutex> lock(g_captures_mutex);
  for (const auto& [origin, open] : g_open_captures)
    if (open == id) return true;
  return false;
}

}  // namespace openreg
