// torch.openreg.MemPool / use_mem_pool (OpenRegMemPool.h).
#include "OpenRegMemPool.h"

#include <c10/util/Exception.h>

#include <map>
#include <mutex>

#include "OpenRegCachingAllocator.h"
#include "OpenRegFunctions.h"

namespace openreg {
namespace {

// Pools by id, counted by their users, each with the allocator's number.
struct PoolRegistry {
  std::mutex mutex;
  uint64_t next = 1;
  struct Pool {
    uint64_t number;
    int users = 0;
  };
  std::map<c10::MempoolId_t, Pool> pools;         // GUARDED_BY mutex
  std::map<uint64_t, c10::MempoolId_t> idOfNumber;  // GUARDED_BY mutex
};

PoolRegistry& registry() {
  static auto* pools = new PoolRegistry();  // graphs and pools may die at teardown
  return *pools;
}

uint64_t numberOf(c10::MempoolId_t id) {
  PoolRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.pools.find(id);
  return it == r.pools.end() ? 0 : it->second.number;
}

}  // namespace

c10::MempoolId_t newPoolId(bool shared) {
  PoolRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const uint64_t n = r.next++;
  return shared ? c10::MempoolId_t{0, n} : c10::MempoolId_t{n, 0};
}

uint64_t acquirePool(c10::MempoolId_t id) {
  PoolRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto [it, fresh] = r.pools.try_emplace(id);
  if (fresh) {
    it->second.number = r.next++;
    r.idOfNumber[it->second.number] = id;
  }
  it->second.users++;
  return it->second.number;
}

uint64_t releasePoolUse(c10::MempoolId_t id) {
  PoolRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.pools.find(id);
  if (it == r.pools.end() || --it->second.users > 0) return 0;
  const uint64_t number = it->second.number;
  r.idOfNumber.erase(number);
  r.pools.erase(it);
  return number;
}

int poolUseCount(c10::MempoolId_t id) {
  PoolRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.pools.find(id);
  return it == r.pools.end() ? 0 : it->second.users;
}

c10::MempoolId_t poolIdOf(uint64_t number) {
  PoolRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.idOfNumber.find(number);
  return it == r.idOfNumber.end() ? c10::MempoolId_t{0, 0} : it->second;
}

MemPool::MemPool(bool useOnOom, bool noSplit)
    : id_(newPoolId(/*shared=*/true)), device_(current_device()) {
  setPoolOptions(acquirePool(id_), useOnOom, noSplit);
}

MemPool::~MemPool() {
  const uint64_t number = releasePoolUse(id_);
  if (!number) return;  // a graph or an open use_mem_pool still uses it
  try {
    releasePool(number, /*returnUnused=*/true);
  } catch (const c10::Error&) {  // a destructor
  }
}

void beginAllocateCurrentThreadToPool(c10::DeviceIndex device, c10::MempoolId_t id) {
  TORCH_CHECK_VALUE(poolUseCount(id) > 0, "use_mem_pool: no memory pool has id (", id.first,
                    ", ", id.second, ")");
  beginAllocateThreadToPool(device, acquirePool(id));
}

void endAllocateCurrentThreadToPool(c10::DeviceIndex device, c10::MempoolId_t id) {
  const uint64_t number = numberOf(id);
  endAllocateThreadToPool(device, number);
  if (releasePoolUse(id)) releasePool(number, /*returnUnused=*/true);  // its MemPool died inside
}

}  // namespace openreg
