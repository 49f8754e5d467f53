// PyTorch hook: at::PrivateUse1HooksInterface, registered with
// at::RegisterPrivateUse1HooksInterface. ATen asks it for device count,
// generators, pinned memory and storage resizing of "openreg" tensors.
// Tests: tests/runtime/test_device.py, test_generators.py, test_pinned.py.
#include <ATen/detail/PrivateUse1HooksInterface.h>

#include <c10/core/DeviceGuard.h>
#include <c10/core/Storage.h>
#include <cstring>

#include "OpenRegCachingAllocator.h"
#include "OpenRegException.h"
#include "OpenRegFunctions.h"
#include "OpenRegGenerator.h"
#include "OpenRegHostAllocator.h"
#include "OpenRegStream.h"

namespace openreg {
namespace {

struct OpenRegHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  // As torch.openreg.is_available(): a bad OPENREG_DEVICE_MEMORY makes every
  // device unusable, whatever the count.
  bool isAvailable() const override { return orConfigError().empty() && device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return orIsInitialized(); }
  void init() const override {}

  c10::DeviceIndex deviceCount() const override { return device_count(); }
  void setCurrentDevice(c10::DeviceIndex device) const override { set_device(device); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    return exchange_device(device);
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchange_device(device);
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return openreg::getDefaultGenerator(device);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device) const override {
    return createGenerator(device);
  }

  bool isPinnedPtr(const void* data) const override { return orIsPinned(data); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return getHostAllocator(); }

  at::Device getDeviceFromPtr(void* data) const override {
    int device = orPointerDevice(data);
    TORCH_CHECK(device >= 0, "Pointer ", data, " is not openreg device memory");
    return c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device));
  }

  // Storage.resize_() for openreg storages: new block, old contents copied
  // in stream order.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override {
    auto* impl = storage.unsafeGetStorageImpl();
    TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
    c10::DeviceIndex device = impl->device().index();
    c10::DataPtr fresh;
    {
      c10::DeviceGuard guard(impl->device());  // restored even if allocate throws (OOM)
      fresh = impl->allocator()->allocate(new_bytes);
    }
    size_t keep = std::min(new_bytes, impl->nbytes());
    if (keep > 0) {
      c10::Stream stream = getCurrentStream(device);
      void* dst = orKernelPtr(fresh.get());
      void* src = orKernelPtr(impl->data());
      // The old block is freed right after; stream order makes that safe.
      std::vector<orAccess> accesses;
      if (orSanitizerEnabled())
        accesses = {{impl->data(), keep, /*write=*/false}, {fresh.get(), keep, /*write=*/true}};
      OPENREG_CHECK(orLaunchKernel(rawStream(stream), [dst, src, keep] { std::memcpy(dst, src, keep); },
                                   std::move(accesses)));
    }
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(new_bytes);
  }
};

struct Registrar {
  Registrar() {
    static OpenRegHooks hooks;
    at::RegisterPrivateUse1HooksInterface(&hooks);
  }
} g_registrar;

}  // namespace
}  // namespace openreg
