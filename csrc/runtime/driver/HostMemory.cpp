// Pinned ("page-locked") host memory. On a real GPU pinning lets DMA run
// asynchronously; here it marks the allocation (and mlocks it, best effort,
// as cudaHostAlloc locks its pages) so the runtime can apply CUDA's rule:
// non_blocking copies are asynchronous only with pinned memory.
#include "Internal.h"

#include <pthread.h>
#include <sys/mman.h>

#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>

namespace openreg {
namespace {
std::mutex g_mutex;
std::map<const char*, size_t> g_pinned;  // base -> size; GUARDED_BY g_mutex

// A fork happens with the lock free: a child inherits a lock another thread
// held as held forever, and its first pin_memory() (which asks orIsPinned)
// would hang on it.
struct ForkWithTheLockFree {
  ForkWithTheLockFree() {
    pthread_atfork([] { g_mutex.lock(); }, [] { g_mutex.unlock(); }, [] { g_mutex.unlock(); });
  }
} g_fork_with_the_lock_free;
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
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_pinned.upper_bound(p);
  if (it == g_pinned.begin()) return false;
  --it;
  return p >= it->first && p < it->first + std::max<size_t>(it->second, 1);
}

}  // namespace openreg
