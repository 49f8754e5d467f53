#include "OpenRegHostAllocator.h"  // PyTorch hook: at::HostAllocator; contract in the header

#include <chrono>
#include <cstring>
#include <mutex>
#include <utility>

#include "OpenRegException.h"
#include "OpenRegFunctions.h"
#include "OpenRegStream.h"

namespace openreg {
namespace {

// An event marking a stream's use of a freed block (owned, as CUDA's EventPool
// entries are): the block is reused once every such event has completed.
class BlockUseEvent {
 public:
  BlockUseEvent() = default;
  BlockUseEvent(BlockUseEvent&& other) noexcept
      : event_(std::exchange(other.event_, nullptr)), captured_(other.captured_) {}
  BlockUseEvent& operator=(BlockUseEvent&& other) noexcept {
    std::swap(event_, other.event_);
    std::swap(captured_, other.captured_);
    return *this;
  }
  ~BlockUseEvent() {
    if (event_) orEventDestroy(event_);
  }

  void record(const c10::Stream& stream) {
    // A graph's copy from the block runs at each replay: the block is never
    // free again (CUDA's host allocator leaks such blocks on purpose).
    // (Checked with the record: a capture may begin on another thread.)
    OPENREG_CHECK(orEventCreate(&event_, /*enable_timing=*/false));
    const orError error = orEventRecordUnlessCapturing(event_, rawStream(stream));
    if (error == orErrorStreamCaptureUnsupported) {
      captured_ = true;
      return;
    }
    OPENREG_CHECK(error);
  }
  // A failed stream runs nothing more: its uses are over too.
  bool done() const { return !captured_ && orEventQueryNoSync(event_) != orErrorNotReady; }

 private:
  orEvent event_ = nullptr;
  bool captured_ = false;
};

// PyTorch's caching host allocator (the one CUDA and XPU use) over the
// driver's pinned memory: only these runtime calls are openreg's.
struct OpenRegHostAllocatorImpl final : at::CachingHostAllocatorImpl<c10::Stream, BlockUseEvent> {
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

 private:
  void allocate_host_memory(size_t size, void** ptr) override {
    const auto start = std::chrono::steady_clock::now();
    OPENREG_CHECK(orHostAlloc(ptr, size));
    addTime(stats_.host_alloc_time, start);
  }
  void free_block(at::HostBlock<c10::Stream>* block) override {
    const auto start = std::chrono::steady_clock::now();
    orHostFree(block->ptr_);
    addTime(stats_.host_free_time, start);
  }
  void record_stream(std::optional<std::vector<BlockUseEvent>>& events,
                     c10::Stream stream) override {
    events->emplace_back().record(stream);
  }
  bool query_event(BlockUseEvent& event) override { return event.done(); }
  c10::Stream get_current_stream() const override { return getCurrentStream(current_device()); }
  // PyTorch's host allocator asks this only while its own pools capture
  // (begin_allocate_to_pool, which openreg's graphs do not use); BlockUseEvent
  // keeps a block a capture copies from.
  bool stream_is_capturing(c10::Stream stream) const override {
    return orStreamIsCapturing(rawStream(stream));
  }

  // host_memory_stats()'s host_alloc_time / host_free_time, in microseconds.
  void addTime(c10::CachingAllocator::DurationStat& stat,
               std::chrono::steady_clock::time_point start) {
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::steady_clock::now() - start);
    std::lock_guard<std::mutex> lock(stats_.timing_mutex_);
    stat.increase(us.count());
  }
};

void freePinned(void* ctx);

struct OpenRegHostAllocator final
    : at::CachingHostAllocatorInterface<OpenRegHostAllocatorImpl, freePinned> {
  // A forked child refuses before PyTorch's allocator takes its locks, which a
  // parent thread may have held at the fork (as the device allocator does).
  at::DataPtr allocate(size_t size) override {
    if (C10_UNLIKELY(orIsForkedChild())) OPENREG_CHECK(orErrorForkedChild);
    return CachingHostAllocatorInterface::allocate(size);
  }
  bool record_event(void* ptr, void* ctx, c10::Stream stream) override {
    if (C10_UNLIKELY(orIsForkedChild())) OPENREG_CHECK(orErrorForkedChild);
    return CachingHostAllocatorInterface::record_event(ptr, ctx, stream);
  }
  void empty_cache() override {
    if (!orIsForkedChild()) CachingHostAllocatorInterface::empty_cache();
  }
  // A child's statistics are empty, as its device ones are.
  at::HostStats get_stats() override {
    return orIsForkedChild() ? at::HostStats{} : CachingHostAllocatorInterface::get_stats();
  }
  void reset_accumulated_stats() override {
    if (!orIsForkedChild()) CachingHostAllocatorInterface::reset_accumulated_stats();
  }
  void reset_peak_stats() override {
    if (!orIsForkedChild()) CachingHostAllocatorInterface::reset_peak_stats();
  }
};

OpenRegHostAllocator g_host_allocator;

void freePinned(void* ctx) {
  // As the device allocator: a forked child never touches the parent's state.
  if (ctx && !orIsForkedChild()) g_host_allocator.free(ctx);
}

}  // namespace

at::HostAllocator* getHostAllocator() { return &g_host_allocator; }

REGISTER_HOST_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_host_allocator)

}  // namespace openreg
