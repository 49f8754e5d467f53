// PyTorch hook: c10::DeviceAllocator for PrivateUse1 (installed with
// c10::SetAllocator), so torch.empty(device="openreg"), torch.openreg.memory_*
// and torch.accelerator.memory_* all go through it.
//
// A stream-ordered caching allocator with CUDA's contract: a freed block is
// immediately reusable by work on the stream that allocated it (stream order
// keeps that safe); if the block was used on other streams (record_stream),
// it is only reused once events recorded on those streams have completed.
// Memory is returned to the driver only by empty_cache() or on an
// allocation failure (retry), after synchronising the device.
//
// Blocks are not split: requests are rounded up (512 B under 1 MiB, 2 MiB
// above) and a cached block is reused for a request of at least half its size.
//
// Thread safety: one mutex per device guards that device's blocks and stats.
// Tests: tests/runtime/test_memory.py.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

namespace openreg {

class OpenRegCachingAllocator;
// The process-wide allocator instance (also reachable via c10::GetAllocator).
c10::DeviceAllocator* getCachingAllocator();

}  // namespace openreg
