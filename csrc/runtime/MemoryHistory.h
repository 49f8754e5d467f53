// The recorder behind torch.openreg.memory._record_memory_history (CUDA's
// CUDACachingAllocator::recordHistory), used by the caching allocator: while
// on, each device keeps its last `maxEntries` allocator actions, and each
// allocated block the traceback of its allocation. Tracebacks come from the
// function the Python binding sets (csrc/python/MemorySnapshot.cpp: PyTorch's
// CapturedTraceback), so the runtime itself stays free of Python.
// Tests: tests/runtime/test_memory_history.py.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

namespace openreg {

// CUDA's RecordContext: from which level on actions carry a traceback
// (kState: live blocks only; kAlloc: allocations too; kAll: frees too).
enum class RecordContext { kNever = 0, kState = 1, kAlloc = 2, kAll = 3 };
using GatherContextFn = std::shared_ptr<c10::GatheredContext> (*)();

// The allocator's actions, named as in CUDA's snapshots (memory_viz reads them).
enum class MemoryAction { kAlloc, kFreeRequested, kFreeCompleted, kSegmentAlloc, kSegmentFree, kOom };
const char* memoryActionName(MemoryAction action);

struct MemoryTraceEntry {
  MemoryAction action;
  uintptr_t addr;  // for kOom: the device's free bytes (CUDA's "device_free")
  size_t size;
  c10::StreamId stream;
  int64_t time_us;
  std::shared_ptr<c10::GatheredContext> context;  // null when not recorded
};

// What is recorded from now on, process-wide as CUDA's setting:
// `traceActions` keeps the action trace; `gather` (null: none) makes the
// tracebacks of the actions `when` covers; `clear` drops the trace so far.
void recordMemoryHistory(bool traceActions, GatherContextFn gather, RecordContext when,
                         size_t maxEntries, bool clear);

// The traceback for an action of `level`, or null if none is recorded. Called
// before the allocator locks: gathering a Python traceback takes the GIL.
std::shared_ptr<c10::GatheredContext> gatherContext(RecordContext level);
// Whether actions of `level` keep their traceback.
bool recordsContext(RecordContext level);

// One device's trace; its cache's mutex guards it.
class MemoryTrace {
 public:
  void record(MemoryAction action, const void* addr, size_t size, c10::StreamId stream,
              std::shared_ptr<c10::GatheredContext> context);
  std::vector<MemoryTraceEntry> entries();

 private:
  void dropIfCleared();
  std::deque<MemoryTraceEntry> entries_;
  uint64_t generation_ = 0;  // of the setting that last cleared it
};

}  // namespace openreg
