#include "OpenRegHostAllocator.h"  // PyTorch hook: at::HostAllocator; contract in the header

#include <mutex>
#include <unordered_map>
#include <vector>

#include "OpenRegException.h"
#include "OpenRegStream.h"

namespace openreg {
namespace {

class OpenRegHostAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    releaseCompleted();
    void* ptr = nullptr;
    if (nbytes > 0) OPENREG_CHECK(orHostAlloc(&ptr, nbytes));
    return c10::DataPtr(ptr, ptr, &freePinned, c10::Device(c10::DeviceType::CPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &freePinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  // `ptr` is a block's base address; the block outlives the work queued so far
  // on `stream`.
  bool record_event(void* ptr, void* /*ctx*/, c10::Stream stream) override {
    orEvent event = nullptr;
    OPENREG_CHECK(orEventCreate(&event, false));
    OPENREG_CHECK(orEventRecord(event, rawStream(stream)));
    std::lock_guard<std::mutex> lock(mutex_);
    // A long-lived buffer reused for copy after copy keeps only pending uses.
    auto& events = uses_[ptr];
    std::erase_if(events, [](orEvent e) {
      if (orEventQueryNoSync(e) == orErrorNotReady) return false;  // a failed stream runs no more
      orEventDestroy(e);
      return true;
    });
    events.push_back(event);
    return true;
  }

  void empty_cache() override { releaseCompleted(); }
  at::HostStats get_stats() override { return {}; }
  void reset_accumulated_stats() override {}
  void reset_peak_stats() override {}

  void free(void* ptr) {
    if (orIsForkedChild()) return;  // as the device allocator: never touch the parent's state
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = uses_.find(ptr);
      if (it != uses_.end()) {
        deferred_.push_back(ptr);  // released by releaseCompleted() once its work ran
        return;
      }
    }
    orHostFree(ptr);
    releaseCompleted();
  }

 private:
  static void freePinned(void* ptr);

  void releaseCompleted() {
    std::vector<void*> ready;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = deferred_.begin(); it != deferred_.end();) {
        auto& events = uses_[*it];
        bool done = true;
        for (orEvent e : events) done = done && orEventQueryNoSync(e) != orErrorNotReady;
        if (!done) {
          ++it;
          continue;
        }
        for (orEvent e : events) orEventDestroy(e);
        uses_.erase(*it);
        ready.push_back(*it);
        it = deferred_.erase(it);
      }
    }
    for (void* p : ready) orHostFree(p);
  }

  std::mutex mutex_;
  std::unordered_map<void*, std::vector<orEvent>> uses_;  // GUARDED_BY mutex_
  std::vector<void*> deferred_;                           // GUARDED_BY mutex_
};

OpenRegHostAllocator g_host_allocator;

void OpenRegHostAllocator::freePinned(void* ptr) {
  if (ptr) g_host_allocator.free(ptr);
}

}  // namespace

at::HostAllocator* getHostAllocator() { return &g_host_allocator; }

REGISTER_HOST_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_host_allocator)

}  // namespace openreg
