#include "OpenRegCachingAllocator.h"  // PyTorch hook: c10::DeviceAllocator; contract in the header
#include "OpenRegIPCTypes.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <optional>
#include <thread>
#include <cstring>
#include <iomanip>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <c10/core/Allocator.h>
#include <c10/core/AllocatorConfig.h>
#include <c10/util/Exception.h>
#include <c10/util/llvmMathExtras.h>

#include "MemoryHistory.h"
#include "OpenRegException.h"
#include "OpenRegFunctions.h"
#include "OpenRegStream.h"

namespace openreg {
namespace {

// PYTORCH_ALLOC_CONF (or PYTORCH_CUDA_ALLOC_CONF), parsed by c10 for every
// accelerator and changed at run time by torch._C._accelerator_setAllocatorSettings.
using Config = c10::CachingAllocator::AcceleratorAllocatorConfig;
using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

// CUDA's sizes: requests round up to 512 B; those up to 1 MiB come from 2 MiB
// segments (small pool), those up to 10 MiB from 20 MiB segments, larger ones
// get a segment of their own rounded up to 2 MiB (large pool). A cached block
// serves any request of its pool that fits, split off the rest when enough
// remains, and freed neighbours of one segment merge again.
constexpr size_t kMinBlockSize = 512;
constexpr size_t kSmallSize = 1 << 20;
constexpr size_t kSmallSegment = 2 << 20;
constexpr size_t kMinLargeAlloc = 10 << 20;
constexpr size_t kLargeSegment = 20 << 20;
constexpr size_t kLargeRounding = 2 << 20;
constexpr size_t kMaxRequest = size_t(1) << 62;

// roundup_power2_divisions: N equal steps between two powers of two (1200 B
// in 4 steps between 1024 and 2048 -> 1280), so fewer distinct sizes reuse better.
size_t roundUpToPower2Division(size_t size, size_t divisions) {
  if (c10::llvm::isPowerOf2_64(size)) return size;
  const size_t floor = c10::llvm::PowerOf2Floor(size);
  const size_t step = floor / c10::llvm::PowerOf2Floor(divisions);
  if (step == 0) return floor << 1;
  return (size + step - 1) / step * step;
}

size_t roundSize(size_t size) {
  if (size < kMinBlockSize) return kMinBlockSize;
  const size_t divisions = Config::roundup_power2_divisions(size);
  if (divisions > 1 && size > kMinBlockSize * divisions) return roundUpToPower2Division(size, divisions);
  return (size + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

// max_split_size_mb: blocks at least this large are "oversize", never split,
// and serve only requests they exceed by less than max_non_split_rounding_mb.
bool isOversize(size_t size) { return size >= Config::max_split_size(); }

size_t segmentSize(size_t size) {
  if (size <= kSmallSize) return kSmallSegment;
  if (size < kMinLargeAlloc) return kLargeSegment;
  return (size + kLargeRounding - 1) / kLargeRounding * kLargeRounding;
}

struct Block {
  enum class State { kAllocated, kPendingFree, kCached };

  void* ptr = nullptr;
  size_t size = 0;        // rounded size (a part of a segment)
  size_t requested = 0;   // what the caller asked for
  c10::StreamId stream = 0;  // the stream whose allocation created the segment
  bool small = false;        // pool, fixed by the segment
  bool oversize = false;     // counted in oversize_allocations while allocated
  State state = State::kCached;
  uint64_t cached_at = 0;    // the large pool's lookup count when cached (its age, for garbage collection)
  // Other streams that use it (record_stream), of any device: a copy on
  // another device's stream reads this device's memory too.
  std::unordered_set<c10::Stream> stream_uses;
  Block* prev = nullptr;  // neighbours within the segment
  Block* next = nullptr;
  std::shared_ptr<c10::GatheredContext> context;  // of its allocation, while recorded (MemoryHistory.h)
  bool isSplit() const { return prev || next; }
};

// A MemPool's settings (OpenRegMemPool.h), one table for every device: a
// pool may be used on any of them.
struct PoolOptions {
  bool useOnOom = false;  // its cached blocks serve other allocations that found no memory
  bool noSplit = false;   // its blocks are never split
};
struct PoolOptionsTable {
  std::mutex mutex;
  std::map<uint64_t, PoolOptions> pools;  // GUARDED_BY mutex; only pools with an option set
  std::atomic<bool> any{false};           // !pools.empty(), read without the lock
};
PoolOptionsTable& poolOptionsTable() {
  static auto* table = new PoolOptionsTable();
  return *table;
}
std::optional<PoolOptions> poolOptions(uint64_t number) {
  PoolOptionsTable& t = poolOptionsTable();
  if (!t.any.load(std::memory_order_acquire)) return std::nullopt;
  std::lock_guard<std::mutex> lock(t.mutex);
  auto it = t.pools.find(number);
  return it == t.pools.end() ? std::nullopt : std::optional<PoolOptions>(it->second);
}
std::vector<uint64_t> poolsUsedOnOom() {
  PoolOptionsTable& t = poolOptionsTable();
  std::vector<uint64_t> numbers;
  if (!t.any.load(std::memory_order_acquire)) return numbers;
  std::lock_guard<std::mutex> lock(t.mutex);
  for (const auto& [number, options] : t.pools)
    if (options.useOnOom) numbers.push_back(number);
  return numbers;
}

// torch.openreg.use_mem_pool's routes, innermost last. Process-wide, not
// thread-local: as CUDA's, a block may be ended on another thread than the
// one that began it.
struct ThreadRoute {
  std::thread::id thread;
  c10::DeviceIndex device;
  uint64_t pool;
};
struct ThreadRoutes {
  std::mutex mutex;
  std::vector<ThreadRoute> routes;  // GUARDED_BY mutex
  std::atomic<size_t> count{0};     // routes.size(), read without the lock
};
ThreadRoutes& threadRoutes() {
  static auto* routes = new ThreadRoutes();
  return *routes;
}

// The pool the calling thread allocates from on `device`, or 0.
uint64_t threadPool(c10::DeviceIndex device) {
  ThreadRoutes& r = threadRoutes();
  if (r.count.load(std::memory_order_acquire) == 0) return 0;
  const auto me = std::this_thread::get_id();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto it = r.routes.rbegin(); it != r.routes.rend(); ++it)
    if (it->thread == me && it->device == device) return it->pool;
  return 0;
}

struct BlockOrder {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    if (a->size != b->size) return a->size < b->size;
    return a->ptr < b->ptr;
  }
};
using BlockPool = std::set<Block*, BlockOrder>;

std::string formatBytes(size_t bytes) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(2);
  if (bytes < 1024) os << bytes << " bytes";
  else if (bytes < (1 << 20)) os << bytes / 1024.0 << " KiB";
  else if (bytes < (1 << 30)) os << bytes / 1048576.0 << " MiB";
  else os << bytes / 1073741824.0 << " GiB";
  return os.str();
}

void statAdd(Stat& s, int64_t amount) {
  s.current += amount;
  s.peak = std::max(s.peak, s.current);
  if (amount > 0) s.allocated += amount;
  else s.freed -= amount;
}

void statAdd(StatArray& stats, bool small, int64_t amount) {
  statAdd(stats[static_cast<size_t>(StatType::AGGREGATE)], amount);
  statAdd(stats[static_cast<size_t>(small ? StatType::SMALL_POOL : StatType::LARGE_POOL)], amount);
}

class DeviceCache {
 public:
  explicit DeviceCache(c10::DeviceIndex device) : device_(device) {
    // Once per device: a bad OPENREG_DEVICE_MEMORY (or count) is an error, not a default.
    TORCH_CHECK(orConfigError().empty(), "openreg error: ", orConfigError());
  }

  void* malloc(size_t requested, c10::StreamId stream) {
    std::shared_ptr<c10::GatheredContext> context = gatherContext(RecordContext::kState);
    std::lock_guard<std::mutex> lock(mutex_);
    processPendingFrees();
    // Beyond any device (and where rounding up would wrap around).
    if (requested > kMaxRequest) raiseOutOfMemory(requested);
    if (Config::use_expandable_segments())
      TORCH_WARN_ONCE("expandable_segments is not simulated by openreg's caching allocator; "
                      "it allocates fixed segments as with expandable_segments:False");
    const size_t size = roundSize(requested);
    const bool small = size <= kSmallSize;
    // A capturing stream allocates from its graph's private pool: blocks keyed
    // by the pool instead of a stream, which no other allocation finds.
    if (!captures_.empty()) stream = captureKey(stream);
    // torch.openreg.use_mem_pool on this thread (a capture's pool comes first).
    if (uint64_t number = threadPool(device_); number && !pools_.count(stream))
      stream = poolKey(number, stream);
    Block* block = takeCached(small, size, stream);
    const bool traced = recordsContext(RecordContext::kAlloc);
    if (!block) {
      // Collecting waits for the device, which would end a capture (see allocateSegment).
      if (garbageCollectionOn() && captures_.empty()) collectGarbage();
      block = allocateSegment(small, size, stream);
      if (block)
        trace_.record(MemoryAction::kSegmentAlloc, block->ptr, block->size, owningStream(stream),
                      traced ? context : nullptr);
      else
        block = takeFromPoolsUsedOnOom(small, size, stream);
      // CUDA's message names the segment it tried to get, not the request.
      if (!block) raiseOutOfMemory(segmentSize(size));
    }
    splitIfWorthIt(block, size);
    block->state = Block::State::kAllocated;
    block->requested = requested;
    block->oversize = isOversize(block->size);
    if (block->oversize) statAdd(stats_.oversize_allocations, 1);
    statAdd(stats_.allocation, small, 1);
    statAdd(stats_.allocated_bytes, small, block->size);
    statAdd(stats_.active, small, 1);
    statAdd(stats_.active_bytes, small, block->size);
    statAdd(stats_.requested_bytes, small, requested);
    live_[block->ptr] = block;
    reportToProfiler(block->ptr, static_cast<int64_t>(block->size));
    trace_.record(MemoryAction::kAlloc, block->ptr, requested, owningStream(stream),
                  traced ? context : nullptr);
    block->context = std::move(context);
    return block->ptr;
  }

  // False if ptr is not an allocated block's (never for our DataPtrs).
  bool free(void* ptr) {
    std::shared_ptr<c10::GatheredContext> context = gatherContext(RecordContext::kAll);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(ptr);
    if (it == live_.end()) return false;
    Block* block = it->second;
    live_.erase(it);
    // As CUDA's: a free without its own traceback shows its allocation's.
    if (!context && recordsContext(RecordContext::kAlloc)) context = block->context;
    trace_.record(MemoryAction::kFreeRequested, block->ptr, block->requested,
                  owningStream(block->stream), context);
    statAdd(stats_.allocation, block->small, -1);
    statAdd(stats_.allocated_bytes, block->small, -static_cast<int64_t>(block->size));
    if (block->oversize) statAdd(stats_.oversize_allocations, -1);
    reportToProfiler(block->ptr, -static_cast<int64_t>(block->size));
    if (block->stream_uses.empty()) {
      trace_.record(MemoryAction::kFreeCompleted, block->ptr, block->requested, owningStream(block->stream),
                    std::move(context));
      makeCached(block);
      return true;
    }
    // Used on other streams: reusable only after their queued work completes.
    block->state = Block::State::kPendingFree;
    PendingFree pending{block, {}, {}, {}, std::move(context)};
    for (const c10::Stream& s : block->stream_uses) {
      pending.devices.push_back(s.device_index());
      // A capturing stream takes no event: recorded once its capture ends
      // (CUDA defers these too), until then the block waits.
      orStream raw = rawStream(s);
      if (orEvent e = recordedEvent(raw)) pending.events.push_back(e);
      else pending.deferred.push_back(raw);
    }
    block->stream_uses.clear();
    pending_.push_back(std::move(pending));
    return true;
  }

  void recordStream(void* ptr, c10::Stream stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(ptr);
    if (it == live_.end()) return;  // not from this allocator (e.g. a view of freed memory)
    if (stream != streamOf(owningStream(it->second->stream))) it->second->stream_uses.insert(stream);
  }

  // ---- graph capture (OpenRegGraph.cpp): CUDA's private memory pools ----
  // From capture_begin to capture_end, `stream`'s allocations come from
  // `pool`'s blocks; the pool keeps its memory, allocated or freed, out of
  // every other allocation and out of empty_cache until releasePool, so a
  // replay writes only memory its graph owns.
  void beginAllocateToPool(uint64_t number, c10::StreamId stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    captures_[rawStreamOf(stream)] = poolKey(number, stream);
  }
  void endAllocateToPool(c10::StreamId stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    captures_.erase(rawStreamOf(stream));
  }
  // A pool whose last user is gone: its blocks become ordinary blocks of the
  // streams that allocated them, and with returnUnused (a MemPool's end, as
  // CUDA's emptyCache(pool)) its segments with nothing allocated go back to
  // the driver; both once the device's work queued now has run, as a queued
  // replay or kernel may still write the pool's memory. Ordered by events,
  // not waited for: the caller is a destructor, often holding the GIL (a
  // graph collected by Python's garbage collector would otherwise stall every
  // thread of the program behind the device's queue; CUDA's graph reset does
  // not wait either). Until then the pool keeps its memory, as while it lived.
  void releasePool(uint64_t number, bool returnUnused) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto first = poolKeys_.lower_bound({number, std::numeric_limits<c10::StreamId>::min()});
    if (first == poolKeys_.end() || first->first.first != number) return;  // none of it here
    PoolRelease release{number, {}, {}, {}};
    // Only segments unused now: one freed later may have queued kernels
    // behind these events.
    if (returnUnused)
      for (bool small : {true, false})
        for (Block* b : pool(small)) {
          auto key = pools_.find(b->stream);
          if (key != pools_.end() && key->second.number == number && !b->isSplit())
            release.unused.push_back(b);
        }
    // Each stream is owed an event, which eventsDone records (none for an
    // idle stream; a capturing one's once its capture ends). Queued before
    // recording: a failed record leaves the release pending, not lost.
    release.deferred = computeStreams(device_);
    releases_.push_back(std::move(release));
    processPoolReleases();
  }

  // Waits for streams with mutex_ held (as does an OOM retry): safe because a
  // finished kernel's closure, destroyed by that wait, holds only non-owning
  // views of device memory (Launch.h), never a block it would free here.
  void emptyCache() {
    std::lock_guard<std::mutex> lock(mutex_);
    // Events owed by streams whose capture ended are recorded before the
    // wait, so that it covers them (as CUDA inserts its deferred events).
    processPendingFrees();
    // Cached blocks may still be read by queued kernels of their stream; the
    // driver's free is immediate, so wait first (cudaFree synchronises too).
    waitForDeviceAndPendingUses();
    processPendingFrees();
    releaseCachedSegments();
  }

  DeviceStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    processPoolReleases();  // memory already given back is not reported reserved
    DeviceStats stats = stats_;
    // As CUDA's: the setting in force, -1 when unlimited.
    stats.max_split_size = static_cast<int64_t>(Config::max_split_size());
    return stats;
  }
  void resetPeak() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Stat* s : allStats()) s->peak = s->current;
  }
  void setFraction(double fraction) {
    std::lock_guard<std::mutex> lock(mutex_);
    fraction_ = fraction;
    fraction_set_ = true;
  }
  double fraction() {
    std::lock_guard<std::mutex> lock(mutex_);
    return fraction_;
  }

  void snapshot(std::vector<SegmentInfo>& out) {
    if (orIsForkedChild()) return;  // nothing of the parent's (see cache())
    std::lock_guard<std::mutex> lock(mutex_);
    processPoolReleases();
    std::vector<Block*> heads;  // each segment's first block
    auto addHead = [&](Block* b) {
      if (!b->prev) heads.push_back(b);
    };
    for (auto& [ptr, block] : live_) addHead(block);
    for (const PendingFree& p : pending_) addHead(p.block);
    for (Block* b : small_blocks_) addHead(b);
    for (Block* b : large_blocks_) addHead(b);
    std::sort(heads.begin(), heads.end(), [](Block* a, Block* b) { return a->ptr < b->ptr; });
    for (Block* head : heads) {
      auto key = pools_.find(head->stream);
      SegmentInfo segment{device_, reinterpret_cast<uintptr_t>(head->ptr), 0, 0, 0, 0,
                          owningStream(head->stream), head->small,
                          key == pools_.end() ? 0 : key->second.number, {}};
      for (Block* b = head; b; b = b->next) {
        const char* state = b->state == Block::State::kAllocated     ? "active_allocated"
                            : b->state == Block::State::kPendingFree ? "active_pending_free"
                                                                     : "inactive";
        size_t requested = b->state == Block::State::kCached ? 0 : b->requested;
        segment.blocks.push_back(
            {reinterpret_cast<uintptr_t>(b->ptr), b->size, requested, state, b->context});
        segment.total_size += b->size;
        if (b->state == Block::State::kAllocated) segment.allocated_size += b->size;
        if (b->state != Block::State::kCached) {
          segment.active_size += b->size;
          segment.requested_size += requested;
        }
      }
      out.push_back(std::move(segment));
    }
  }

  std::vector<MemoryTraceEntry> traceEntries() {
    std::lock_guard<std::mutex> lock(mutex_);
    return trace_.entries();
  }

  void resetAccumulated() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Stat* s : allStats()) s->allocated = s->freed = 0;
    stats_.num_alloc_retries = 0;
    stats_.num_ooms = 0;
    stats_.num_device_alloc = 0;
    stats_.num_device_free = 0;
  }

 private:
  struct PendingFree {
    Block* block;
    std::vector<orEvent> events;
    std::vector<orStream> deferred;         // capturing streams still owed an event
    std::vector<c10::DeviceIndex> devices;  // of the streams the events are on
    std::shared_ptr<c10::GatheredContext> context;  // of the free, if recorded
  };
  // releasePool's, once the work queued on the device at its call has run.
  struct PoolRelease {
    uint64_t number;
    std::vector<Block*> unused;  // cached whole segments to give back (returnUnused)
    std::vector<orEvent> events;
    std::vector<orStream> deferred;  // capturing streams still owed an event
  };

  // profile_memory=True: the profiler's device memory columns and timeline
  // (a thread-local check when no profiler runs).
  void reportToProfiler(void* ptr, int64_t bytes) {
    c10::reportMemoryUsageToProfiler(ptr, bytes, stats_.allocated_bytes[0].current,
                                     stats_.reserved_bytes[0].current,
                                     c10::Device(c10::DeviceType::PrivateUse1, device_));
  }

  c10::Stream streamOf(c10::StreamId id) const {
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, device_), id);
  }

  std::vector<Stat*> allStats() {
    std::vector<Stat*> all = {&stats_.oversize_allocations, &stats_.oversize_segments};
    for (StatArray* a : {&stats_.allocation, &stats_.segment, &stats_.active, &stats_.inactive_split,
                         &stats_.allocated_bytes, &stats_.reserved_bytes, &stats_.active_bytes,
                         &stats_.inactive_split_bytes, &stats_.requested_bytes})
      for (Stat& s : *a) all.push_back(&s);
    return all;
  }

  BlockPool& pool(bool small) { return small ? small_blocks_ : large_blocks_; }

  bool inLivePool(const Block* b) const { return pools_.count(b->stream) != 0; }
  // The stream a block's memory is ordered with (a pool's: the one that allocated it).
  c10::StreamId owningStream(c10::StreamId key) const {
    auto it = pools_.find(key);
    return it == pools_.end() ? key : it->second.owner;
  }
  // One key per pool and allocating stream: a pool's blocks stay ordered
  // with the stream that allocated them, also after releasePool.
  c10::StreamId poolKey(uint64_t number, c10::StreamId stream) {
    auto [it, fresh] = poolKeys_.try_emplace({number, stream});
    if (fresh) {
      it->second = static_cast<c10::StreamId>((uint64_t{1} << 62) | ++poolKeysMade_);
      pools_.emplace(it->second, PoolKey{stream, number});
    }
    return it->second;
  }
  std::optional<PoolOptions> optionsOf(c10::StreamId key) const {
    auto pool = pools_.find(key);
    return pool == pools_.end() ? std::nullopt : poolOptions(pool->second.number);
  }
  // CUDA's last resort for an allocation outside any pool that found no
  // memory: a cached block of the stream in a MemPool made with use_on_oom.
  Block* takeFromPoolsUsedOnOom(bool small, size_t size, c10::StreamId stream) {
    if (pools_.count(stream)) return nullptr;
    for (uint64_t number : poolsUsedOnOom()) {
      auto key = poolKeys_.find({number, stream});
      if (key == poolKeys_.end()) continue;
      if (Block* block = takeCached(small, size, key->second)) return block;
    }
    return nullptr;
  }
  static void rekey(Block* block, c10::StreamId from, c10::StreamId to) {
    if (block->stream == from) block->stream = to;
  }

  // The only ways into and out of a pool, so that the statistics of cached
  // parts of split segments ("inactive split", memory empty_cache cannot
  // return) follow every move. A cached block's isSplit() cannot change while
  // it is pooled: only merging into it removes neighbours, and that takes it out first.
  void insertCached(Block* block) {
    block->state = Block::State::kCached;
    block->cached_at = large_lookups_;
    pool(block->small).insert(block);
    if (block->isSplit()) {
      statAdd(stats_.inactive_split, block->small, 1);
      statAdd(stats_.inactive_split_bytes, block->small, block->size);
    }
  }
  void eraseCached(Block* block) {
    pool(block->small).erase(block);
    if (block->isSplit()) {
      statAdd(stats_.inactive_split, block->small, -1);
      statAdd(stats_.inactive_split_bytes, block->small, -static_cast<int64_t>(block->size));
    }
  }

  // A freed block (its other streams done) becomes cached, merged with cached neighbours.
  // Requested bytes count until then, as active ones (CUDA's free_block).
  void makeCached(Block* block) {
    statAdd(stats_.active, block->small, -1);
    statAdd(stats_.active_bytes, block->small, -static_cast<int64_t>(block->size));
    statAdd(stats_.requested_bytes, block->small, -static_cast<int64_t>(block->requested));
    block->requested = 0;
    block->context.reset();
    if (Block* prev = block->prev; prev && prev->state == Block::State::kCached) {
      eraseCached(prev);
      block->ptr = prev->ptr;
      block->size += prev->size;
      block->prev = prev->prev;
      if (block->prev) block->prev->next = block;
      delete prev;
    }
    if (Block* next = block->next; next && next->state == Block::State::kCached) {
      eraseCached(next);
      block->size += next->size;
      block->next = next->next;
      if (block->next) block->next->prev = block;
      delete next;
    }
    insertCached(block);
  }

  // CUDA's rule: split a small block if a minimal block remains, a large one
  // only if more than a small allocation's worth remains and the request is not oversize.
  void splitIfWorthIt(Block* block, size_t size) {
    if (auto options = optionsOf(block->stream); options && options->noSplit) return;
    const size_t rest = block->size - size;
    if (block->small ? rest < kMinBlockSize : rest <= kSmallSize || isOversize(size)) return;
    auto* remaining = new Block();
    remaining->ptr = static_cast<char*>(block->ptr) + size;
    remaining->size = rest;
    remaining->stream = block->stream;
    remaining->small = block->small;
    remaining->prev = block;
    remaining->next = block->next;
    if (remaining->next) remaining->next->prev = remaining;
    block->next = remaining;
    block->size = size;
    insertCached(remaining);
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

  // An event recorded on `s` now, or null if `s` captures (checked with the
  // record: a capture may begin on another thread at any time).
  static orEvent recordedEvent(orStream s) {
    orEvent event = nullptr;
    OPENREG_CHECK(orEventCreate(&event, false));
    const orError error = orEventRecordUnlessCapturing(event, s);
    if (error == orErrorStreamCaptureUnsupported) {
      orEventDestroy(event);
      return nullptr;
    }
    if (error != orSuccess) orEventDestroy(event);
    OPENREG_CHECK(error);
    return event;
  }

  orStream rawStreamOf(c10::StreamId stream) const {
    return rawStream(c10::Stream(c10::Stream::UNSAFE,
                                 c10::Device(c10::DeviceType::PrivateUse1, device_), stream));
  }

  // The key an allocation on `stream` uses while the device captures: its
  // capture's pool, also for a stream that forked into a capture (through an
  // event), so every kernel a graph replays uses memory the graph owns.
  c10::StreamId captureKey(c10::StreamId stream) {
    orStream origin = orStreamCaptureOrigin(rawStreamOf(stream));
    if (!origin) return stream;
    auto it = captures_.find(origin);
    return it == captures_.end() ? stream : it->second;
  }

  void processPoolReleases() {
    for (auto it = releases_.begin(); it != releases_.end();) {
      if (!eventsDone(it->events, it->deferred, /*skipIdle=*/true)) {
        ++it;
        continue;
      }
      for (orEvent e : it->events) orEventDestroy(e);
      finishPoolRelease(*it);
      it = releases_.erase(it);
    }
  }

  // Records the events owed by streams whose capture has ended (with
  // skipIdle, none for an idle one; a pending free's block needs the event to
  // retire the stream's accesses in the race checker); true once none is
  // owed and every event has completed (a failed stream's counts: it runs
  // nothing more).
  static bool eventsDone(std::vector<orEvent>& events, std::vector<orStream>& deferred,
                         bool skipIdle) {
    for (auto s = deferred.begin(); s != deferred.end();) {
      if (skipIdle && orStreamIsIdle(*s)) {  // (false while it captures)
        s = deferred.erase(s);
      } else if (orEvent e = recordedEvent(*s)) {
        events.push_back(e);
        s = deferred.erase(s);
      } else {
        ++s;  // still capturing
      }
    }
    bool done = deferred.empty();
    for (orEvent e : events) done = done && orEventQueryNoSync(e) != orErrorNotReady;
    return done;
  }

  // Also while a stream of the device captures: giving memory back waits for nothing.
  void finishPoolRelease(const PoolRelease& release) {
    for (Block* b : release.unused) releaseSegment(pool(b->small), pool(b->small).find(b));
    auto it = poolKeys_.lower_bound({release.number, std::numeric_limits<c10::StreamId>::min()});
    while (it != poolKeys_.end() && it->first.first == release.number) {
      const c10::StreamId key = it->second, owner = it->first.second;
      pools_.erase(key);
      for (auto& [ptr, block] : live_) rekey(block, key, owner);
      for (PendingFree& p : pending_) rekey(p.block, key, owner);
      for (bool small : {true, false}) {
        std::vector<Block*> moved;
        for (Block* b : pool(small))
          if (b->stream == key) moved.push_back(b);
        for (Block* b : moved) {
          pool(small).erase(b);
          b->stream = owner;
          pool(small).insert(b);
        }
      }
      it = poolKeys_.erase(it);
    }
  }

  void processPendingFrees() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (!eventsDone(it->events, it->deferred, /*skipIdle=*/false)) {
        ++it;
        continue;
      }
      for (orEvent e : it->events) {
        orSanitizerRetire(it->block->ptr, it->block->size, e);
        orEventDestroy(e);
      }
      trace_.record(MemoryAction::kFreeCompleted, it->block->ptr, it->block->requested,
                    owningStream(it->block->stream), std::move(it->context));
      makeCached(it->block);
      it = pending_.erase(it);
    }
    processPoolReleases();
  }

  // The smallest cached block of the pool, allocated on this stream, that
  // fits (an oversize one only for an oversize request it barely exceeds).
  Block* takeCached(bool small, size_t size, c10::StreamId stream) {
    if (!small) large_lookups_++;
    Block key;
    key.stream = stream;
    key.size = size;
    auto it = pool(small).lower_bound(&key);
    if (it == pool(small).end() || (*it)->stream != stream) return nullptr;
    Block* block = *it;
    if (isOversize(size) ? block->size >= size + Config::max_non_split_rounding_size()
                         : isOversize(block->size))
      return nullptr;
    eraseCached(block);
    return block;
  }

  // A new segment for `stream`, after returning cached memory if need be;
  // null when the device (or the memory fraction) has no room for it.
  Block* allocateSegment(bool small, size_t size, c10::StreamId stream) {
    const size_t bytes = segmentSize(size);
    void* ptr = nullptr;
    orError error = mallocWithinFraction(bytes, &ptr);
    // While a stream of the device captures, waiting for the device would
    // invalidate the capture: as CUDA's allocator, fail at once with an OOM.
    if (error == orErrorMemoryAllocation && hasCachedOrPending() && captures_.empty()) {
      // CUDA's order: return just enough oversize blocks and try again, then
      // every unused segment and retry.
      waitForDeviceAndPendingUses();
      processPendingFrees();
      if (releaseOversizeBlocks(size, stream)) error = mallocWithinFraction(bytes, &ptr);
      if (error == orErrorMemoryAllocation) {
        stats_.num_alloc_retries++;
        releaseCachedSegments();
        error = mallocWithinFraction(bytes, &ptr);
      }
    }
    if (error == orErrorMemoryAllocation) return nullptr;
    OPENREG_CHECK(error);
    auto* block = new Block();
    block->ptr = ptr;
    block->size = bytes;
    block->stream = stream;
    block->small = small;
    stats_.num_device_alloc++;
    statAdd(stats_.segment, small, 1);
    statAdd(stats_.reserved_bytes, small, bytes);
    if (isOversize(bytes)) {
      statAdd(stats_.oversize_segments, 1);
      oversize_segments_.insert(ptr);
    }
    return block;
  }

  [[noreturn]] void raiseOutOfMemory(size_t bytes) {
    stats_.num_ooms++;
    size_t total = orDeviceTotalMemory();
    size_t used = orMemoryUsed(device_);
    trace_.record(MemoryAction::kOom, reinterpret_cast<void*>(total > used ? total - used : 0),
                  bytes, 0, nullptr);
    size_t allocated = static_cast<size_t>(stats_.allocated_bytes[0].current);
    size_t reserved = static_cast<size_t>(stats_.reserved_bytes[0].current);
    std::string limit;
    if (fraction_ < 1.0)
      limit = formatBytes(allowedBytes()) + " allowed by set_per_process_memory_fraction; ";
    TORCH_CHECK_WITH(
        OutOfMemoryError, false, "openreg out of memory. Tried to allocate ",
        formatBytes(bytes), ". Device ", static_cast<int>(device_),
        " has a total capacity of ", formatBytes(total), " of which ",
        formatBytes(total > used ? total - used : 0), " is free. ", limit,
        "Of the allocated memory ", formatBytes(allocated), " is allocated by PyTorch, and ",
        formatBytes(reserved - allocated),
        " is reserved by PyTorch but unallocated. The simulated capacity is set by "
        "OPENREG_DEVICE_MEMORY.");
  }

  size_t allowedBytes() const {
    return static_cast<size_t>(fraction_ * static_cast<double>(orDeviceTotalMemory()));
  }

  // The driver's allocation, refused beyond the per-process fraction as
  // CUDA's allocator refuses it (it counts what the cache has reserved).
  orError mallocWithinFraction(size_t bytes, void** ptr) {
    if (fraction_ < 1.0 &&
        static_cast<size_t>(stats_.reserved_bytes[0].current) + bytes > allowedBytes())
      return orErrorMemoryAllocation;
    return orMalloc(device_, ptr, bytes);
  }

  bool hasCachedOrPending() const {
    return !small_blocks_.empty() || !large_blocks_.empty() || !pending_.empty() || !releases_.empty();
  }

  // Returns a whole cached segment (an unsplit block) to the driver; the
  // caller has waited for the streams that may still use it.
  BlockPool::iterator releaseSegment(BlockPool& blocks, BlockPool::iterator it) {
    Block* block = *it;
    OPENREG_CHECK(orFree(block->ptr));
    trace_.record(MemoryAction::kSegmentFree, block->ptr, block->size, owningStream(block->stream),
                  nullptr);
    stats_.num_device_free++;
    statAdd(stats_.segment, block->small, -1);
    statAdd(stats_.reserved_bytes, block->small, -static_cast<int64_t>(block->size));
    // Counted by what it was when allocated: max_split_size_mb may have changed since.
    if (oversize_segments_.erase(block->ptr)) statAdd(stats_.oversize_segments, -1);
    delete block;
    return blocks.erase(it);
  }

  // Returns to the driver every segment with nothing allocated from it (a
  // cached block that is not split); a segment in part allocated stays.
  void releaseCachedSegments() {
    for (bool small : {true, false}) {
      BlockPool& blocks = pool(small);
      for (auto it = blocks.begin(); it != blocks.end();)
        it = (*it)->isSplit() || inLivePool(*it) ? std::next(it) : releaseSegment(blocks, it);
    }
  }

  // With max_split_size_mb set, the first answer to an allocation failure:
  // the smallest cached oversize block of the stream that covers the request,
  // else the largest ones until their sizes do (false: not enough of them).
  bool releaseOversizeBlocks(size_t size, c10::StreamId stream) {
    if (Config::max_split_size() == std::numeric_limits<size_t>::max()) return false;
    if (pools_.count(stream)) return false;  // a live graph's pool keeps its memory
    Block key;
    key.stream = stream;
    key.size = std::max(size, Config::max_split_size());
    auto it = large_blocks_.lower_bound(&key);
    if (it != large_blocks_.end() && (*it)->stream == stream && !(*it)->isSplit()) {
      releaseSegment(large_blocks_, it);
      return true;
    }
    size_t released = 0;
    while (released < key.size && it != large_blocks_.begin()) {
      --it;
      Block* block = *it;
      if (block->stream != stream || !isOversize(block->size)) break;
      if (block->isSplit()) continue;
      released += block->size;
      it = releaseSegment(large_blocks_, it);
    }
    return released >= key.size;
  }

  // garbage_collection_threshold (CUDA's: only under a memory fraction).
  bool garbageCollectionOn() const {
    return fraction_set_ && Config::garbage_collection_threshold() > 0.0;
  }

  // Before a new segment, once the cache reserves more than the threshold x
  // the allowed memory: return the unsplit large cached segments that have
  // waited longest since they were cached (those at least as old as the
  // average, repeatedly) until it is back under the threshold.
  void collectGarbage() {
    const auto threshold =
        static_cast<size_t>(Config::garbage_collection_threshold() * static_cast<double>(allowedBytes()));
    const auto reserved = static_cast<size_t>(stats_.reserved_bytes[0].current);
    if (reserved <= threshold) return;
    const size_t target = reserved - threshold;
    size_t reclaimed = 0;
    bool waited = false;
    while (reclaimed < target) {
      uint64_t total_age = 0;
      size_t count = 0;
      for (Block* b : large_blocks_)
        if (!b->isSplit() && !inLivePool(b)) {
          total_age += large_lookups_ - b->cached_at;
          count++;
        }
      if (count == 0) return;
      if (!waited) {
        waitForDevice();  // a queued kernel may still use a cached block
        waited = true;
      }
      const double average = static_cast<double>(total_age) / static_cast<double>(count);
      for (auto it = large_blocks_.begin(); it != large_blocks_.end() && reclaimed < target;) {
        Block* b = *it;
        if (b->isSplit() || inLivePool(b) ||
            static_cast<double>(large_lookups_ - b->cached_at) < average) {
          ++it;
          continue;
        }
        reclaimed += b->size;
        it = releaseSegment(large_blocks_, it);
      }
    }
  }

  const c10::DeviceIndex device_;
  std::mutex mutex_;
  BlockPool small_blocks_;                         // GUARDED_BY mutex_
  BlockPool large_blocks_;                         // GUARDED_BY mutex_
  std::vector<PendingFree> pending_;               // GUARDED_BY mutex_
  std::vector<PoolRelease> releases_;              // GUARDED_BY mutex_
  std::unordered_map<void*, Block*> live_;         // GUARDED_BY mutex_
  std::unordered_set<void*> oversize_segments_;    // their base pointers; GUARDED_BY mutex_
  DeviceStats stats_;                              // GUARDED_BY mutex_
  double fraction_ = 1.0;                          // GUARDED_BY mutex_
  bool fraction_set_ = false;                      // GUARDED_BY mutex_
  uint64_t large_lookups_ = 0;  // large-pool searches, the clock of block ages; GUARDED_BY mutex_
  MemoryTrace trace_;                              // GUARDED_BY mutex_
  // A graph pool's blocks carry a key in place of their stream, one per
  // (pool, capturing stream), above any stream id c10 hands out.
  std::map<std::pair<uint64_t, c10::StreamId>, c10::StreamId> poolKeys_;  // GUARDED_BY mutex_
  uint64_t poolKeysMade_ = 0;                                  // GUARDED_BY mutex_
  // A capture's origin stream -> its pool key. GUARDED_BY mutex_
  std::unordered_map<orStream, c10::StreamId> captures_;
  struct PoolKey {
    c10::StreamId owner;  // the stream it stands for
    uint64_t number;      // its pool
  };
  std::unordered_map<c10::StreamId, PoolKey> pools_;        // live keys; GUARDED_BY mutex_
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
    // The context is the pointer itself, as CUDA's: copy-on-write storages
    // (torch._lazy_clone) wrap only such "simple" data pointers.
    void* ptr;
    try {
      ptr = cache(device).malloc(nbytes, stream.id());
    } catch (const c10::OutOfMemoryError&) {
      // Blocks kept for other processes that have released them since (CUDA's
      // IPC collect callback): freed, then one more try.
      if (collectSharedBlocks() == 0) throw;
      ptr = cache(device).malloc(nbytes, stream.id());
    }
    // Read first: a store on every allocation would bounce the flag's cache line.
    if (!allocated_[device].load(std::memory_order_relaxed))
      allocated_[device].store(true, std::memory_order_relaxed);
    return c10::DataPtr(ptr, ptr, &deleteBlock, c10::Device(c10::DeviceType::PrivateUse1, device));
  }

  c10::DeleterFnPtr raw_deleter() const override { return &deleteBlock; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    // Allocator::clone's copy (a copy-on-write storage getting memory of its
    // own): queued on the current stream, as cudaMemcpyAsync would be, so it
    // follows the work queued there, waits for nothing, and in a graph
    // capture is recorded like any kernel. It must not throw: ATen's
    // copy-on-write bookkeeping has already let go of the shared memory.
    if (count == 0) return;
    // `dest` is this allocator's: Allocator::clone allocated it.
    const auto device = static_cast<c10::DeviceIndex>(orPointerDevice(dest));
    orStream raw = rawStream(getCurrentStream(device));
    std::vector<orAccess> accesses;
    if (orSanitizerEnabled())
      accesses = {{src, count, false, "copy-on-write copy"}, {dest, count, true, "copy-on-write copy"}};
    const orError error = orLaunchKernel(
        raw, [dest, src, count] { std::memcpy(orKernelPtr(dest), orKernelPtr(src), count); },
        std::move(accesses));
    if (error != orSuccess)  // a failed stream runs nothing more; a race is reported
      TORCH_WARN("openreg: a copy-on-write copy could not be queued: ",
                 error == orErrorDataRace ? orSanitizerLastReport() : orGetErrorString(error));
  }

  // As CUDA's: torch.accelerator's memory queries answer {} / 0 without
  // initialising the device (a later fork's child could not use it).
  bool initialized() override { return orIsInitialized() && !orIsForkedChild(); }

  void emptyCache(c10::MempoolId_t) override {
    if (orIsForkedChild()) return;  // nothing of the child's to free (see cache())
    for (c10::DeviceIndex d = 0; d < device_count(); ++d)
      if (caches_[d]) caches_[d]->emptyCache();
  }

  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    if (recordStreamOfShared(ptr, stream)) return;  // received from another process
    // Looked up by address, so a copy-on-write storage's (whose deleter is
    // not ours) is found too; other memory is not in the cache and is skipped.
    int device = orPointerDevice(ptr.get());
    if (device < 0) return;
    // Validated now: the free that uses it runs in a deleter, which must not throw.
    (void)rawStream(stream);
    cache(static_cast<c10::DeviceIndex>(device)).recordStream(ptr.get(), stream);
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

  bool hasAllocated(c10::DeviceIndex device) const {
    return allocated_[device].load(std::memory_order_relaxed);
  }

  void snapshot(std::vector<SegmentInfo>& out) {
    if (orIsForkedChild()) return;  // nothing of the parent's (see cache())
    for (c10::DeviceIndex d = 0; d < device_count(); ++d)
      if (caches_[d]) caches_[d]->snapshot(out);
  }

  // On every device with a cache: a pool's keys may be on any of them.
  void releasePool(uint64_t pool, bool returnUnused) {
    if (orIsForkedChild()) return;  // the parent's pools (see cache())
    {
      // First: an allocation that finds no memory must not take a block the
      // release is about to give back.
      PoolOptionsTable& t = poolOptionsTable();
      std::lock_guard<std::mutex> lock(t.mutex);
      t.pools.erase(pool);
      t.any.store(!t.pools.empty(), std::memory_order_release);
    }
    for (c10::DeviceIndex d = 0; d < device_count(); ++d)
      if (caches_[d]) caches_[d]->releasePool(pool, returnUnused);
  }

  std::vector<std::vector<MemoryTraceEntry>> traces() {
    std::vector<std::vector<MemoryTraceEntry>> out(device_count());
    if (orIsForkedChild()) return out;  // see cache()
    for (c10::DeviceIndex d = 0; d < device_count(); ++d)
      if (caches_[d]) out[d] = caches_[d]->traceEntries();
    return out;
  }

  DeviceCache& cache(c10::DeviceIndex device) {
    // A forked child's caches are the parent's, and a parent thread may have
    // held a cache's mutex at the fork (no one unlocks it here): refuse as
    // the driver does, before taking it.
    if (C10_UNLIKELY(orIsForkedChild())) OPENREG_CHECK(orErrorForkedChild);
    check_device_index(device);
    std::call_once(once_[device], [&] { caches_[device] = std::make_unique<DeviceCache>(device); });
    return *caches_[device];
  }

  static void deleteBlock(void* ptr) {
    // A forked child freeing a tensor it inherited: the cache's mutex may have
    // been held by a parent thread at fork, and the parent's streams do not
    // exist here. The memory is the parent's; leave it.
    if (!ptr || orIsForkedChild()) return;
    instance().cache(static_cast<c10::DeviceIndex>(orPointerDevice(ptr))).free(ptr);
  }

  static OpenRegCachingAllocatorImpl& instance();

 private:
  std::array<std::once_flag, orMaxDevices> once_;
  std::array<std::unique_ptr<DeviceCache>, orMaxDevices> caches_;
  std::array<std::atomic<bool>, orMaxDevices> allocated_{};  // a tensor was allocated there
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

bool deviceHasAllocated(c10::DeviceIndex device) {
  return device >= 0 && device < orMaxDevices && OpenRegCachingAllocatorImpl::instance().hasAllocated(device);
}

void* rawAlloc(size_t bytes, c10::Stream stream) {
  if (bytes == 0) return nullptr;
  (void)rawStream(stream);  // an openreg stream that exists
  return OpenRegCachingAllocatorImpl::instance().cache(stream.device_index()).malloc(bytes, stream.id());
}

void rawDelete(void* ptr) {
  if (!ptr) return;
  int device = orPointerDevice(ptr);
  TORCH_CHECK(device >= 0 && OpenRegCachingAllocatorImpl::instance()
                                 .cache(static_cast<c10::DeviceIndex>(device))
                                 .free(ptr),
              "invalid device pointer: ", ptr);
}

void setMemoryFraction(double fraction, c10::DeviceIndex device) {
  OpenRegCachingAllocatorImpl::instance().cache(device).setFraction(fraction);
}

double getMemoryFraction(c10::DeviceIndex device) {
  return OpenRegCachingAllocatorImpl::instance().cache(device).fraction();
}

std::vector<SegmentInfo> memorySnapshot() {
  std::vector<SegmentInfo> segments;
  OpenRegCachingAllocatorImpl::instance().snapshot(segments);
  return segments;
}

std::vector<std::vector<MemoryTraceEntry>> memoryTraces() {
  return OpenRegCachingAllocatorImpl::instance().traces();
}

void beginAllocateToPool(c10::DeviceIndex device, uint64_t pool, c10::StreamId stream) {
  OpenRegCachingAllocatorImpl::instance().cache(device).beginAllocateToPool(pool, stream);
}

void endAllocateToPool(c10::DeviceIndex device, c10::StreamId stream) {
  OpenRegCachingAllocatorImpl::instance().cache(device).endAllocateToPool(stream);
}

void releasePool(uint64_t pool, bool returnUnused) {
  OpenRegCachingAllocatorImpl::instance().releasePool(pool, returnUnused);
}

void beginAllocateThreadToPool(c10::DeviceIndex device, uint64_t pool) {
  ThreadRoutes& r = threadRoutes();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.routes.push_back({std::this_thread::get_id(), device, pool});
  r.count.store(r.routes.size(), std::memory_order_release);
}

void endAllocateThreadToPool(c10::DeviceIndex device, uint64_t pool) {
  ThreadRoutes& r = threadRoutes();
  std::lock_guard<std::mutex> lock(r.mutex);
  // The calling thread's innermost route to the pool, else another thread's.
  auto matches = [&](const ThreadRoute& route, bool mine) {
    return route.device == device && route.pool == pool &&
           (!mine || route.thread == std::this_thread::get_id());
  };
  for (bool mine : {true, false})
    for (auto it = r.routes.rbegin(); it != r.routes.rend(); ++it)
      if (matches(*it, mine)) {
        r.routes.erase(std::next(it).base());
        r.count.store(r.routes.size(), std::memory_order_release);
        return;
      }
}

void setPoolOptions(uint64_t pool, bool useOnOom, bool noSplit) {
  if (!useOnOom && !noSplit) return;
  PoolOptionsTable& t = poolOptionsTable();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.pools[pool] = {useOnOom, noSplit};
  t.any.store(true, std::memory_order_release);
}

}  // namespace openreg
