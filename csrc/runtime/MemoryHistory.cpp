#include "MemoryHistory.h"

#include <c10/util/ApproximateClock.h>

#include <atomic>
#include <mutex>

namespace openreg {
namespace {

struct Settings {
  bool trace = false;
  GatherContextFn gather = nullptr;
  RecordContext when = RecordContext::kNever;
  size_t maxEntries = 0;
  uint64_t generation = 0;  // bumped by a clear
};

std::mutex g_mutex;
Settings g_settings;  // GUARDED_BY g_mutex
std::atomic<bool> g_on{false};  // anything recorded: the allocator's fast check

Settings settings() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_settings;
}

}  // namespace

const char* memoryActionName(MemoryAction action) {
  switch (action) {
    case MemoryAction::kAlloc: return "alloc";
    case MemoryAction::kFreeRequested: return "free_requested";
    case MemoryAction::kFreeCompleted: return "free_completed";
    case MemoryAction::kSegmentAlloc: return "segment_alloc";
    case MemoryAction::kSegmentFree: return "segment_free";
    case MemoryAction::kOom: return "oom";
  }
  return "unknown";
}

void recordMemoryHistory(bool traceActions, GatherContextFn gather, RecordContext when,
                         size_t maxEntries, bool clear) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_settings.trace = traceActions && maxEntries > 0;
  g_settings.gather = gather;
  g_settings.when = gather ? when : RecordContext::kNever;
  g_settings.maxEntries = maxEntries;
  if (clear) ++g_settings.generation;
  g_on.store(g_settings.trace || g_settings.when != RecordContext::kNever);
}

bool recordsContext(RecordContext level) {
  if (!g_on.load(std::memory_order_relaxed)) return false;
  const Settings s = settings();
  return s.gather && s.when >= level;
}

std::shared_ptr<c10::GatheredContext> gatherContext(RecordContext level) {
  if (!g_on.load(std::memory_order_relaxed)) return nullptr;
  const Settings s = settings();
  return s.gather && s.when >= level ? s.gather() : nullptr;
}

void MemoryTrace::dropIfCleared() {
  const uint64_t generation = settings().generation;
  if (generation != generation_) {
    entries_.clear();
    generation_ = generation;
  }
}

void MemoryTrace::record(MemoryAction action, const void* addr, size_t size,
                         c10::StreamId stream, std::shared_ptr<c10::GatheredContext> context) {
  if (!g_on.load(std::memory_order_relaxed)) return;
  const Settings s = settings();
  dropIfCleared();
  if (!s.trace) return;
  entries_.push_back({action, reinterpret_cast<uintptr_t>(addr), size, stream,
                      c10::getTime() / 1000, std::move(context)});
  while (entries_.size() > s.maxEntries) entries_.pop_front();
}

std::vector<MemoryTraceEntry> MemoryTrace::entries() {
  dropIfCleared();
  return {entries_.begin(), entries_.end()};
}

}  // namespace openreg
