// Pinned ("page-locked") host memory. On a real GPU pinning lets DMA run
// asynchronously; here it only marks the allocation so the runtime can apply
// CUDA's rule: non_blocking copies are asynchronous only with pinned memory.
#include "Internal.h"

#include <sys/mman.h>

#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>

namespace openreg {
namespace {
std::mutex g_mutex;
std::map<const char*, size_t> g_pinned;  // base -> size; GUARDED_BY g_mutex
}  // namespace

orError orHostAlloc(void** ptr, size_t bytes) {
  if (!ptr) return orErrorInvalidValue;
  void* p = nullptr;
  if (posix_memalign(&p, 4096, bytes ? bytes : 1) != 0) return orErrorMemoryAllocation;
  mlock(p, bytes);  // best effort, like cudaHostAlloc; failure is harmless here
  std::lock_guard<std::mutex> lock(g_mutex);
  g_pinned[static_cast<const char*>(p)] = bytes;
  *ptr = p;
  return orSuccess;
}

orError orHostFree(void* ptr) {
  if (!ptr) return orSuccess;
  size_t bytes;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_pinned.find(static_cast<const char*>(ptr));
    if (it == g_pinned.end()) return orErrorInvalidValue;
    bytes = it->second;
    g_pinned.erase(it);
  }
  munlock(ptr, bytes);
  std::free(ptr);
  return orSuccess;
}

bool orIsPinned(const void* ptr) {
  auto p = static_cast<const char*>(ptr);
  // pin_memory() asks first. In a forked child a parent thread that was
  // pinning or freeing at the fork may have held the lock (it stays locked
  // there): the parent's pinned memory then counts as not pinned, which
  // leads the child to the refusal of pinning, not to a hang.
  std::unique_lock<std::mutex> lock(g_mutex, std::defer_lock);
  if (orIsForkedChild()) {
    if (!lock.try_lock()) return false;
  } else {
    lock.lock();
  }
  auto it = g_pinned.upper_bound(p);
  if (it == g_pinned.begin()) return false;
  --it;
  return p >= it->first && p < it->first + std::max<size_t>(it->second, 1);
}

}  // namespace openreg
