// Copies of message payloads: memcpy, or non-temporal (streaming) stores for
// large messages.
//
// A message of several MiB, with its destination, no longer fits the caches
// on its way, so its copy runs at DRAM speed either way; memcpy (glibc uses
// streaming stores only above ~3/4 of the L3) first reads every destination
// line it then overwrites, and evicts lines the next step needs. Streaming
// stores skip both: an 8 MiB copy ran at 24.4 GB/s instead of 11.8 here. A
// small message's copy stays in cache, where memcpy is faster (1 MiB: 48 vs
// 28 GB/s), so the choice goes by the size of the whole message
// (OREG_CCL_STREAMING_COPY_BYTES, Config.h).
#pragma once

#include <cstddef>

namespace openreg::ccl {

// Copies n bytes (a piece of a message of messageBytes) from src to dst.
void copyMessage(void* dst, const void* src, size_t n, size_t messageBytes);

}  // namespace openreg::ccl
