// How often each operator took the generic fallback (Fallback.cpp): lets
// tests check that an operator is served by a native kernel, and shows which
// operators a workload still sends down the generic path.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace openreg {

// (operator name with overload, calls) since start or the last reset.
std::vector<std::pair<std::string, uint64_t>> fallbackCounts();
void resetFallbackCounts();

}  // namespace openreg
