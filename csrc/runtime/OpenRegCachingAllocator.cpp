#include "OpenRegCachingAllocator.h"  // PyTorch hook: c10::DeviceAllocator; contract in the header

#include <algorithm>
#include <array>
#include <cstring>
#include <iomanip>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>

#include "OpenRegException.h"
#include "OpenRegFunctions.h"
#include "OpenRegStream.h"

namespace openreg {
namespace {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

constexpr size_t kMinBlockSize = 512;
constexpr size_t kSmallSize = 1 << 20;       // <= 1 MiB: small pool
constexpr size_t kLargeRounding = 2 << 20;   // large blocks round to 2 MiB
constexpr int kMaxDevices = 64;

size_t roundSize(size_t size) {
  if (size <= kSmallSize) return std::max(kMinBlockSize, (size + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize);
  return (size + kLargeRounding - 1) / kLargeRounding * kLargeRounding;
}

struct Block {
  void* ptr = nullptr;
  size_t size = 0;        // rounded size, as reserved from the driver
  size_t requested = 0;   // what the caller asked for
  c10::DeviceIndex device = 0;
  c10::StreamId stream = 0;                    // allocating stream
  // Other streams that use it (record_stream), of any device: a copy on
  // another device's stream reads this device's memory too.
  std::unordered_set<c10::Stream> stream_uses;
  bool allocated = false;
  bool small() const { return size <= kSmallSize; }
};

struct BlockOrder {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    if (a->size != b->size) return a->size < b->size;
    return a->ptr < b->ptr;
  }
};

std::string formatBytes(size_t bytes) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(2);
  if (bytes < 1024) os << bytes << " bytes";
  else if (bytes < (1 << 20)) os << bytes / 1024.0 << " KiB";
  else if (bytes < (1 << 30)) os << bytes / 1048576.0 << " MiB";
  else os << bytes / 1073741824.0 << " GiB";
  return os.str();
}

void statAdd(StatArray& stats, bool small, int64_t amount) {
  for (size_t i : {static_cast<size_t>(StatType::AGGREGATE),
                   static_cast<size_t>(small ? StatType::SMALL_POOL : StatType::LARGE_POOL)}) {
    Stat& s = stats[i];
    s.current += amount;
    s.peak = std::max(s.peak, s.current);
    if (amount > 0) s.allocated += amount;
    else s.freed -= amount;
  }
}

class DeviceCache {
 public:
  explicit DeviceCache(c10::DeviceIndex device) : device_(device) {
    // Once per device: a bad OPENREG_DEVICE_MEMORY (or count) is an error, not a default.
    TORCH_CHECK(orConfigError().empty(), "openreg error: ", orConfigError());
  }

  Block* malloc(size_t requested, c10::StreamId stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    processPendingFrees();
    size_t size = roundSize(requested);
    Block* block = takeCached(size, stream);
    if (!block) block = allocateFromDriver(size, stream, requested);
    block->allocated = true;
    block->requested = requested;
    statAdd(stats_.allocation, block->small(), 1);
    statAdd(stats_.allocated_bytes, block->small(), block->size);
    statAdd(stats_.active, block->small(), 1);
    statAdd(stats_.active_bytes, block->small(), block->size);
    statAdd(stats_.requested_bytes, block->small(), requested);
    live_[block->ptr] = block;
    return block;
  }

  void free(Block* block) {
    std::lock_guard<std::mutex> lock(mutex_);
    live_.erase(block->ptr);
    block->allocated = false;
    statAdd(stats_.allocation, block->small(), -1);
    statAdd(stats_.allocated_bytes, block->small(), -static_cast<int64_t>(block->size));
    statAdd(stats_.requested_bytes, block->small(), -static_cast<int64_t>(block->requested));
    if (block->stream_uses.empty()) {
      release(block);
      return;
    }
    // Used on other streams: reusable only after their queued work completes.
    std::vector<orEvent> events;
    std::vector<c10::DeviceIndex> devices;
    for (const c10::Stream& s : block->stream_uses) {
      orEvent event = nullptr;
      OPENREG_CHECK(orEventCreate(&event, false));
      OPENREG_CHECK(orEventRecord(event, rawStream(s)));
      events.push_back(event);
      devices.push_back(s.device_index());
    }
    block->stream_uses.clear();
    pending_.push_back({block, std::move(events), std::move(devices)});
  }

  void recordStream(void* ptr, c10::Stream stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(ptr);
    if (it == live_.end()) return;  // not from this allocator (e.g. a view of freed memory)
    if (stream != streamOf(it->second->stream)) it->second->stream_uses.insert(stream);
  }

  void emptyCache() {
    std::lock_guard<std::mutex> lock(mutex_);
    // Cached blocks may still be read by queued kernels of their stream; the
    // driver's free is immediate, so wait first (cudaFree synchronises too).
    waitForDeviceAndPendingUses();
    processPendingFrees();
    releaseCached();
  }

  DeviceStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void resetPeak() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (StatArray* a : statArrays())
      for (Stat& s : *a) s.peak = s.current;
  }
  void resetAccumulated() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (StatArray* a : statArrays())
      for (Stat& s : *a) s.allocated = s.freed = 0;
    stats_.num_alloc_retries = 0;
    stats_.num_ooms = 0;
    stats_.num_device_alloc = 0;
    stats_.num_device_free = 0;
  }
  size_t reserved() {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<size_t>(stats_.reserved_bytes[0].current);
  }

 private:
  struct PendingFree {
    Block* block;
    std::vector<orEvent> events;
    std::vector<c10::DeviceIndex> devices;  // of the streams the events are on
  };

  c10::Stream streamOf(c10::StreamId id) const {
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, device_), id);
  }

  std::vector<StatArray*> statArrays() {
    return {&stats_.allocation, &stats_.segment, &stats_.active, &stats_.inactive_split,
            &stats_.allocated_bytes, &stats_.reserved_bytes, &stats_.active_bytes,
            &stats_.inactive_split_bytes, &stats_.requested_bytes};
  }

  void release(Block* block) {
    statAdd(stats_.active, block->small(), -1);
    statAdd(stats_.active_bytes, block->small(), -static_cast<int64_t>(block->size));
    cached_.insert(block);
  }

  // Waits for the streams kernels run on (not oreg_ccl's future streams, which
  // touch no memory and may hold until a peer joins). A stream whose kernel
  // failed runs nothing more, so its memory is as quiet as a finished
  // stream's; its error is that stream's to report, not the allocator's
  // (which would otherwise fail every later empty_cache and OOM retry).
  void waitForDevice() { synchronizeComputeStreams(device_, /*raisesKernelErrors=*/false); }

  // Before releasing the cache (empty_cache, an OOM retry): this device's
  // streams, and those of other devices whose streams still use a freed block
  // (record_stream with another device's stream), as CUDA's allocator waits
  // for every outstanding event there.
  void waitForDeviceAndPendingUses() {
    waitForDevice();
    std::vector<c10::DeviceIndex> others;
    for (const auto& p : pending_)
      for (c10::DeviceIndex d : p.devices)
        if (d != device_ && std::find(others.begin(), others.end(), d) == others.end())
          others.push_back(d);
    for (c10::DeviceIndex d : others) synchronizeComputeStreams(d, /*raisesKernelErrors=*/false);
  }

  void processPendingFrees() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      bool done = true;
      // A failed stream's event counts as done (it runs nothing more).
      for (orEvent e : it->events) done = done && orEventQueryNoSync(e) != orErrorNotReady;
      if (!done) {
        ++it;
        continue;
      }
      for (orEvent e : it->events) {
        orSanitizerRetire(it->block->ptr, it->block->size, e);
        orEventDestroy(e);
      }
      release(it->block);
      it = pending_.erase(it);
    }
  }

  Block* takeCached(size_t size, c10::StreamId stream) {
    Block key;
    key.stream = stream;
    key.size = size;
    key.ptr = nullptr;
    auto it = cached_.lower_bound(&key);
    if (it == cached_.end() || (*it)->stream != stream) return nullptr;
    // Don't hand a huge block to a tiny request; don't mix small and large pools.
    if ((*it)->size > 2 * size || (*it)->small() != (size <= kSmallSize)) return nullptr;
    Block* block = *it;
    cached_.erase(it);
    return block;
  }

  Block* allocateFromDriver(size_t size, c10::StreamId stream, size_t requested) {
    void* ptr = nullptr;
    orError error = orMalloc(device_, &ptr, size);
    if (error == orErrorMemoryAllocation && (!cached_.empty() || !pending_.empty())) {
      // Free the cache and retry, like CUDA's allocator.
      stats_.num_alloc_retries++;
      waitForDeviceAndPendingUses();
      processPendingFrees();
      releaseCached();
      error = orMalloc(device_, &ptr, size);
    }
    if (error == orErrorMemoryAllocation) {
      stats_.num_ooms++;
      size_t total = orDeviceTotalMemory();
      size_t used = orMemoryUsed(device_);
      size_t allocated = static_cast<size_t>(stats_.allocated_bytes[0].current);
      size_t reserved = static_cast<size_t>(stats_.reserved_bytes[0].current);
      TORCH_CHECK_WITH(
          OutOfMemoryError, false, "openreg out of memory. Tried to allocate ",
          formatBytes(requested), ". Device ", static_cast<int>(device_),
          " has a total capacity of ", formatBytes(total), " of which ",
          formatBytes(total > used ? total - used : 0), " is free. Of the allocated memory ",
          formatBytes(allocated), " is allocated by PyTorch, and ",
          formatBytes(reserved - allocated),
          " is reserved by PyTorch but unallocated. The simulated capacity is set by "
          "OPENREG_DEVICE_MEMORY.");
    }
    OPENREG_CHECK(error);
    auto* block = new Block();
    block->ptr = ptr;
    block->size = size;
    block->device = device_;
    block->stream = stream;
    stats_.num_device_alloc++;
    statAdd(stats_.segment, block->small(), 1);
    statAdd(stats_.reserved_bytes, block->small(), size);
    return block;
  }

  void releaseCached() {
    for (Block* block : cached_) {
      OPENREG_CHECK(orFree(block->ptr));
      stats_.num_device_free++;
      statAdd(stats_.segment, block->small(), -1);
      statAdd(stats_.reserved_bytes, block->small(), -static_cast<int64_t>(block->size));
      delete block;
    }
    cached_.clear();
  }

  const c10::DeviceIndex device_;
  std::mutex mutex_;
  std::set<Block*, BlockOrder> cached_;            // GUARDED_BY mutex_
  std::vector<PendingFree> pending_;               // GUARDED_BY mutex_
  std::unordered_map<void*, Block*> live_;         // GUARDED_BY mutex_
  DeviceStats stats_;                              // GUARDED_BY mutex_
};

class OpenRegCachingAllocatorImpl final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    c10::DeviceIndex device = current_device();
    if (nbytes == 0) {
      return c10::DataPtr(nullptr, nullptr, &deleteBlock,
                          c10::Device(c10::DeviceType::PrivateUse1, device));
    }
    c10::Stream stream = getCurrentStream(device);
    Block* block = cache(device).malloc(nbytes, stream.id());
    return c10::DataPtr(block->ptr, block, &deleteBlock,
                        c10::Device(c10::DeviceType::PrivateUse1, device));
  }

  c10::DeleterFnPtr raw_deleter() const override { return &deleteBlock; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    // Used by storage copies (e.g. clone of a Storage): runs after queued work.
    c10::DeviceIndex device = static_cast<c10::DeviceIndex>(orPointerDevice(dest));
    if (device < 0) device = static_cast<c10::DeviceIndex>(orPointerDevice(src));
    if (device >= 0) synchronizeStream(getCurrentStream(device));
    std::memcpy(orKernelPtr(dest), orKernelPtr(src), count);
  }

  bool initialized() override { return true; }

  void emptyCache(c10::MempoolId_t) override {
    for (c10::DeviceIndex d = 0; d < device_count(); ++d)
      if (caches_[d]) caches_[d]->emptyCache();
  }

  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    if (!ptr.get()) return;
    auto* block = static_cast<Block*>(ptr.get_context());
    if (!block || ptr.get_deleter() != &deleteBlock) return;
    // Validated now: the free that uses it runs in a deleter, which must not throw.
    (void)rawStream(stream);
    cache(block->device).recordStream(block->ptr, stream);
  }

  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    return cache(resolve_device(device)).stats();
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    cache(resolve_device(device)).resetAccumulated();
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    cache(resolve_device(device)).resetPeak();
  }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    device = resolve_device(device);
    size_t total = orDeviceTotalMemory();
    size_t used = orMemoryUsed(device);
    return {total > used ? total - used : 0, total};
  }

  DeviceCache& cache(c10::DeviceIndex device) {
    check_device_index(device);
    std::call_once(once_[device], [&] { caches_[device] = std::make_unique<DeviceCache>(device); });
    return *caches_[device];
  }

  static void deleteBlock(void* ctx) {
    // A forked child freeing a tensor it inherited: the cache's mutex may have
    // been held by a parent thread at fork, and the parent's streams do not
    // exist here. The memory is the parent's; leave it.
    if (!ctx || orIsForkedChild()) return;
    auto* block = static_cast<Block*>(ctx);
    instance().cache(block->device).free(block);
  }

  static OpenRegCachingAllocatorImpl& instance();

 private:
  std::array<std::once_flag, kMaxDevices> once_;
  std::array<std::unique_ptr<DeviceCache>, kMaxDevices> caches_;
};

OpenRegCachingAllocatorImpl& OpenRegCachingAllocatorImpl::instance() {
  // Leaked on purpose: tensors may be freed during interpreter teardown.
  static auto* allocator = new OpenRegCachingAllocatorImpl();
  return *allocator;
}

struct Registrar {
  Registrar() { c10::SetAllocator(c10::DeviceType::PrivateUse1, &OpenRegCachingAllocatorImpl::instance()); }
} g_registrar;

}  // namespace

c10::DeviceAllocator* getCachingAllocator() { return &OpenRegCachingAllocatorImpl::instance(); }

}  // namespace openreg
