// How often each operator took the generic fallback (Fallback.cpp): lets
// tests check that an operator is served by a native kernel, and shows which
// operators a workload still sends down the generic path.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace c10 {
struct OperatorName;
}

namespace openreg {

namespace kernels {
// Counts a call of the generic path (`async`: which path it took); with
// OPENREG_LOG_FALLBACK=1 also prints each operator the first time it is
// counted (to find operators worth a native kernel).
void recordFallback(const c10::OperatorName& op, bool async);
}  // namespace kernels

// (operator name with overload, calls) since start or the last reset.
std::vector<std::pair<std::string, uint64_t>> fallbackCounts();
void resetFallbackCounts();

}  // namespace openreg
