// torch.openreg.MemPool and use_mem_pool: CUDA's MemPool (torch/csrc/cuda/
// MemPool.cpp) on openreg. A pool is a set of the caching allocator's blocks
// that only allocations routed to it use: a graph's capture
// (OpenRegGraph.cpp), or a thread inside use_mem_pool. This file keeps the
// pools' ids and use counts, shared by both.
// Tests: tests/runtime/test_mem_pool.py.
#pragma once

#include <c10/core/Allocator.h>

#include <cstdint>

namespace openreg {

// Pool ids as CUDA's: a graph's own {n, 0}; graph_pool_handle()'s and a
// MemPool's {0, n}, which graphs may share.
c10::MempoolId_t newPoolId(bool shared);
// Counts a user of pool `id` (a graph capturing into it, a MemPool, an open
// use_mem_pool); returns the allocator's number for the pool.
uint64_t acquirePool(c10::MempoolId_t id);
// Drops a user: the pool's number if that was the last one, else 0.
uint64_t releasePoolUse(c10::MempoolId_t id);
// Users of pool `id` (0 if it has none): MemPool.use_count().
int poolUseCount(c10::MempoolId_t id);
// The id of the pool the allocator numbers `number`, {0, 0} if none.
c10::MempoolId_t poolIdOf(uint64_t number);

// torch.openreg.MemPool: a pool made on the current device, a user of itself
// until destroyed, when its unused memory goes back to the device (as CUDA's
// ~MemPool empties its cache) unless a graph still uses the pool.
class MemPool {
 public:
  MemPool(bool useOnOom, bool noSplit);
  ~MemPool();
  MemPool(const MemPool&) = delete;
  MemPool& operator=(const MemPool&) = delete;

  c10::MempoolId_t id() const { return id_; }
  c10::DeviceIndex device() const { return device_; }

 private:
  c10::MempoolId_t id_;
  c10::DeviceIndex device_;
};

// use_mem_pool's entry and exit: the calling thread's allocations on `device`
// come from pool `id` in between (a user of the pool meanwhile).
void beginAllocateCurrentThreadToPool(c10::DeviceIndex device, c10::MempoolId_t id);
void endAllocateCurrentThreadToPool(c10::DeviceIndex device, c10::MempoolId_t id);

}  // namespace openreg
