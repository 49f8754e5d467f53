// Per-operator call counts of the generic fallback: FallbackStats.h.
#include "FallbackStats.h"

#include <ATen/core/operator_name.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

namespace openreg {
namespace kernels {
namespace {

// Per-operator call counts (FallbackStats.h), keyed by the dispatcher's
// OperatorName, whose address is stable for the operator's lifetime.
struct FallbackCounter {
  std::mutex mutex;
  std::unordered_map<const c10::OperatorName*, std::pair<std::string, uint64_t>> counts;  // GUARDED_BY mutex
};

FallbackCounter& fallbackCounter() {
  static FallbackCounter* counter = new FallbackCounter();  // leaked: used until exit
  return *counter;
}

}  // namespace

void recordFallback(const c10::OperatorName& op, bool async) {
  static const bool log = [] {
    const char* env = std::getenv("OPENREG_LOG_FALLBACK");
    return env && *env && std::string(env) != "0";
  }();
  FallbackCounter& c = fallbackCounter();
  const c10::OperatorName* key = &op;
  std::lock_guard<std::mutex> lock(c.mutex);
  auto [it, inserted] = c.counts.try_emplace(key);
  if (inserted) {
    it->second.first = c10::toString(*key);
    if (log)
      std::fprintf(stderr, "openreg fallback (%s): %s\n", async ? "async" : "sync",
                   it->second.first.c_str());
  }
  ++it->second.second;
}

}  // namespace kernels

std::vector<std::pair<std::string, uint64_t>> fallbackCounts() {
  auto& c = kernels::fallbackCounter();
  std::lock_guard<std::mutex> lock(c.mutex);
  std::vector<std::pair<std::string, uint64_t>> out;
  for (const auto& [key, entry] : c.counts) out.push_back(entry);
  return out;
}

void resetFallbackCounts() {
  auto& c = kernels::fallbackCounter();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.counts.clear();
}

}  // namespace openreg
