#include "OpenRegHostAllocator.h"

#include "OpenRegException.h"

namespace openreg {
namespace {

void freePinned(void* ptr) { orHostFree(ptr); }

class OpenRegHostAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nullptr;
    if (nbytes > 0) OPENREG_CHECK(orHostAlloc(&ptr, nbytes));
    return c10::DataPtr(ptr, ptr, &freePinned, c10::Device(c10::DeviceType::CPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &freePinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  bool record_event(void*, void*, c10::Stream) override { return true; }
  void empty_cache() override {}
  at::HostStats get_stats() override { return {}; }
  void reset_accumulated_stats() override {}
  void reset_peak_stats() override {}
};

OpenRegHostAllocator g_host_allocator;

}  // namespace

at::HostAllocator* getHostAllocator() { return &g_host_allocator; }

REGISTER_HOST_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_host_allocator)

}  // namespace openreg
