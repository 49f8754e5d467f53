// Python side of torch.openreg.memory._record_memory_history, _snapshot and
// memory_snapshot (torch.cuda.memory's): the allocator's segments and action
// traces (csrc/runtime/MemoryHistory.h) as the dictionaries CUDA's snapshots
// hold, so torch.cuda._memory_viz and pytorch.org/memory_viz read them. The
// tracebacks are PyTorch's own: torch::CapturedTraceback gathers them at an
// allocation, torch::py_symbolize turns them into frames when a snapshot is
// taken (as torch.cuda does).
// Tests: tests/runtime/test_memory_history.py.
#include "MemorySnapshot.h"

#include <torch/csrc/profiler/combined_traceback.h>

#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "../runtime/OpenRegCachingAllocator.h"
#include "../runtime/OpenRegMemPool.h"

// Declared as in torch/csrc/profiler/python/combined_traceback.h, which the
// wheel ships without the nlohmann/json header it includes.
namespace torch {
TORCH_API std::vector<pybind11::object> py_symbolize(std::vector<CapturedTraceback*>& to_symbolize);
TORCH_PYTHON_API void installCapturedTracebackPython();
}  // namespace torch

namespace openreg {
namespace {

std::shared_ptr<c10::GatheredContext> gatherPython() {
  return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/true, /*cpp=*/false);
}

std::shared_ptr<c10::GatheredContext> gatherPythonAndCpp() {
  return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/true, /*cpp=*/true);
}

// CUDA's arguments and messages (torch/csrc/cuda/memory_snapshot.cpp).
void recordHistory(std::optional<std::string> enabled, std::optional<std::string> context,
                   const std::string& stacks, size_t maxEntries, bool clear) {
  TORCH_CHECK(!enabled || *enabled == "state" || *enabled == "all",
              "expected state to be 'state', 'all', or None");
  TORCH_CHECK(!context || *context == "state" || *context == "alloc" || *context == "all",
              "expected context to be 'state', 'alloc', 'all', or None");
  TORCH_CHECK(stacks == "python" || stacks == "all", "expected stacks to be 'python', or 'all'");
  RecordContext when = RecordContext::kNever;
  if (enabled && context)
    when = *context == "state" ? RecordContext::kState
           : *context == "alloc" ? RecordContext::kAlloc
                                 : RecordContext::kAll;
  static std::once_flag unwinder;  // each call would add one more to torch's chain
  if (when != RecordContext::kNever) std::call_once(unwinder, torch::installCapturedTracebackPython);
  recordMemoryHistory(enabled && *enabled == "all",
                      when == RecordContext::kNever ? nullptr
                      : stacks == "all"             ? gatherPythonAndCpp
                                                    : gatherPython,
                      when, enabled ? maxEntries : 0, clear || !enabled);  // CUDA clears when stopped
}

// Frames for each recorded traceback, symbolized together (shared frames
// are resolved once).
class Frames {
 public:
  void add(const std::shared_ptr<c10::GatheredContext>& context) {
    auto* traceback = dynamic_cast<torch::CapturedTraceback*>(context.get());
    if (traceback && index_.emplace(traceback, tracebacks_.size()).second)
      tracebacks_.push_back(traceback);
  }
  void symbolize() { frames_ = torch::py_symbolize(tracebacks_); }
  py::object of(const std::shared_ptr<c10::GatheredContext>& context) const {
    auto it = index_.find(dynamic_cast<torch::CapturedTraceback*>(context.get()));
    return it == index_.end() ? py::list() : frames_[it->second];
  }

 private:
  std::vector<torch::CapturedTraceback*> tracebacks_;
  std::unordered_map<torch::CapturedTraceback*, size_t> index_;
  std::vector<py::object> frames_;
};

py::dict snapshot() {
  const std::vector<SegmentInfo> segments = memorySnapshot();
  const std::vector<std::vector<MemoryTraceEntry>> traces = memoryTraces();
  Frames frames;
  for (const SegmentInfo& s : segments)
    for (const BlockInfo& b : s.blocks) frames.add(b.context);
  for (const auto& trace : traces)
    for (const MemoryTraceEntry& e : trace) frames.add(e.context);
  frames.symbolize();

  py::list segmentList;
  for (const SegmentInfo& s : segments) {
    py::list blocks;
    for (const BlockInfo& b : s.blocks)
      blocks.append(py::dict(py::arg("address") = b.address, py::arg("size") = b.size,
                             py::arg("requested_size") = b.requested_size,
                             py::arg("state") = b.state, py::arg("frames") = frames.of(b.context)));
    segmentList.append(py::dict(
        py::arg("device") = static_cast<int>(s.device), py::arg("address") = s.address,
        py::arg("total_size") = s.total_size, py::arg("allocated_size") = s.allocated_size,
        py::arg("active_size") = s.active_size, py::arg("requested_size") = s.requested_size,
        py::arg("stream") = s.stream, py::arg("segment_type") = s.small ? "small" : "large",
        py::arg("segment_pool_id") = poolIdOf(s.pool), py::arg("is_expandable") = false,
        py::arg("frames") = py::list(), py::arg("blocks") = blocks));
  }
  py::list deviceTraces;
  for (const auto& trace : traces) {
    py::list entries;
    for (const MemoryTraceEntry& e : trace) {
      py::dict entry(py::arg("action") = memoryActionName(e.action), py::arg("size") = e.size,
                     py::arg("stream") = e.stream, py::arg("time_us") = e.time_us,
                     py::arg("frames") = frames.of(e.context));
      if (e.action == MemoryAction::kOom) entry["device_free"] = e.addr;
      else entry["addr"] = e.addr;
      entries.append(entry);
    }
    deviceTraces.append(entries);
  }
  return py::dict(py::arg("segments") = segmentList, py::arg("device_traces") = deviceTraces);
}

}  // namespace

void bindMemorySnapshot(py::module& m) {
  m.def("_record_memory_history", &recordHistory);
  m.def("_snapshot", &snapshot);
}

}  // namespace openreg
