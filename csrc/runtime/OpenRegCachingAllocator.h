// PyTorch hook: c10::DeviceAllocator for PrivateUse1 (installed with
// c10::SetAllocator), so torch.empty(device="openreg"), torch.openreg.memory_*
// and torch.accelerator.memory_* all go through it.
//
// A stream-ordered caching allocator with CUDA's contract: a freed block is
// immediately reusable by work on the stream that allocated it (stream order
// keeps that safe); if the block was used on other streams (record_stream),
// it is only reused once events recorded on those streams have completed.
// Memory is returned to the driver only by empty_cache(), on an allocation
// failure (retry), after synchronising the device, or, with a memory fraction
// and PYTORCH_ALLOC_CONF's garbage_collection_threshold, oldest cached
// segments first before a new segment is taken.
//
// Segments and blocks as CUDA's: requests round up to 512 B and are carved
// from driver segments (2 MiB for requests up to 1 MiB, 20 MiB up to 10 MiB,
// else the request rounded up to 2 MiB); a cached block is split to serve a
// smaller request and merges with its freed neighbours; empty_cache() returns
// segments with nothing allocated in them. PYTORCH_ALLOC_CONF's
// max_split_size_mb, max_non_split_rounding_mb, roundup_power2_divisions and
// garbage_collection_threshold act as on CUDA (c10's AcceleratorAllocatorConfig
// parses them); expandable_segments is not simulated (a warning).
//
// While torch.openreg.memory._record_memory_history records, each device's
// cache keeps its actions and its blocks' tracebacks (MemoryHistory.h).
//
// Thread safety: one mutex per device guards that device's blocks and stats.
// Tests: tests/runtime/test_memory.py.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "MemoryHistory.h"

namespace openreg {

// The process-wide allocator instance (also reachable via c10::GetAllocator).
c10::DeviceAllocator* getCachingAllocator();

// Whether a tensor was ever allocated on the device in this process.
bool deviceHasAllocated(c10::DeviceIndex device);

// torch.openreg.caching_allocator_alloc / _delete: a block for `stream` (its
// device's cache), freed by address like a tensor's.
void* rawAlloc(size_t bytes, c10::Stream stream);
void rawDelete(void* ptr);

// torch.openreg.set_per_process_memory_fraction: what the cache may reserve on
// the device, as a fraction of its capacity (allocations beyond it raise OOM).
void setMemoryFraction(double fraction, c10::DeviceIndex device);
double getMemoryFraction(c10::DeviceIndex device);

// torch.openreg.memory_snapshot: every segment of every device, its blocks in
// address order (the fields of torch.cuda.memory_snapshot()).
struct BlockInfo {
  uintptr_t address;
  size_t size;
  size_t requested_size;
  const char* state;  // "active_allocated", "active_pending_free" or "inactive"
  std::shared_ptr<c10::GatheredContext> context;  // of its allocation, if recorded
};
struct SegmentInfo {
  c10::DeviceIndex device;
  uintptr_t address;
  size_t total_size, allocated_size, active_size, requested_size;
  c10::StreamId stream;
  bool small;
  uint64_t pool;  // the allocator's number of its pool, 0 for none
  std::vector<BlockInfo> blocks;
};
std::vector<SegmentInfo> memorySnapshot();
// Each device's allocator actions while _record_memory_history records (MemoryHistory.h).
std::vector<std::vector<MemoryTraceEntry>> memoryTraces();

// Graph capture (OpenRegGraph.cpp), CUDA's private pools: while `stream`
// captures, its allocations come from `pool` (a number > 0), whose memory no
// other allocation or empty_cache touches until releasePool (its last user is
// gone); its blocks then become those of the streams that allocated them, on
// every device, and with returnUnused its unused segments go back to the
// driver. releasePool does not wait: that happens once the work queued on
// the device at its call has run, seen by the device's next allocation,
// empty_cache or memory statistics.
void beginAllocateToPool(c10::DeviceIndex device, uint64_t pool, c10::StreamId stream);
void endAllocateToPool(c10::DeviceIndex device, c10::StreamId stream);
void releasePool(uint64_t pool, bool returnUnused);

// torch.openreg.MemPool / use_mem_pool (OpenRegMemPool.cpp), the same pools
// outside graphs: between begin and end the calling thread's allocations on
// `device`, on any stream, come from `pool` (the innermost such pool). Any
// thread may end it.
void beginAllocateThreadToPool(c10::DeviceIndex device, uint64_t pool);
void endAllocateThreadToPool(c10::DeviceIndex device, uint64_t pool);
// use_on_oom: the pool's cached blocks serve an allocation of the device that
// found no memory; no_split: its blocks are not split. On every device;
// cleared by releasePool.
void setPoolOptions(uint64_t pool, bool useOnOom, bool noSplit);

}  // namespace openreg
