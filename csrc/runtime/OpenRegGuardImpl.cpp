// PyTorch hook: c10::impl::DeviceGuardImplInterface for PrivateUse1
// (registered with C10_REGISTER_GUARD_IMPL). This is what DeviceGuard,
// StreamGuard, torch.Stream, torch.Event and torch.accelerator call for
// "openreg": device switching, streams, and events.
// Tests: tests/runtime/test_streams.py, tests/runtime/test_device.py.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "OpenRegCachingAllocator.h"
#include "OpenRegException.h"
#include "OpenRegFunctions.h"
#include "OpenRegIpcEvent.h"
#include "OpenRegStream.h"

namespace openreg {
namespace {

struct OpenRegGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

  c10::DeviceType type() const override { return kType; }

  c10::Device exchangeDevice(c10::Device d) const override {
    TORCH_INTERNAL_ASSERT(d.is_privateuseone());
    return c10::Device(kType, exchange_device(d.index()));
  }
  c10::Device getDevice() const override { return c10::Device(kType, current_device()); }
  void setDevice(c10::Device d) const override {
    TORCH_INTERNAL_ASSERT(d.is_privateuseone());
    // Index -1 is the current device: no change, as torch.openreg.set_device(-1).
    // torch.accelerator.set_stream first sets the stream's device index, -1
    // for a stream of another type, whose type is then refused with a clear message.
    if (d.index() == -1) return;
    set_device(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    try {
      set_device(d.index());
    } catch (...) {
    }
  }
  c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }
  // torch.accelerator.get_device_capability(): openreg holds every dtype the
  // CPU does (its kernels are the CPU's), so the CPU's answer: all of them.
  c10::DeviceCapability getDeviceCapability(c10::Device) const override {
    return c10::DeviceCapability();
  }

  // torch.Stream.native_handle: the driver's stream, as CUDA's cudaStream_t.
  void* getStreamNativeHandle(const c10::Stream s) const override { return rawStream(s); }

  c10::Stream getStream(c10::Device d) const override { return getCurrentStream(d.index()); }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return openreg::getDefaultStream(d.index());
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high_priority) const override {
    return getStreamFromPool(d.index(), high_priority ? -1 : 0);
  }
  c10::Stream getNewStream(c10::Device d, int priority) const override {
    return getStreamFromPool(d.index(), priority);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    // Before its index is read: a CPU stream's -1 would name a bogus device.
    TORCH_CHECK(s.device_type() == kType, "Expected an openreg stream, got a stream of device ",
                s.device());
    c10::Stream previous = getCurrentStream(s.device_index());
    setCurrentStream(s);
    return previous;
  }
  bool queryStream(const c10::Stream& s) const override {
    const orStream raw = rawStream(s);
    orError e = orStreamQuery(raw);
    if (e == orErrorNotReady) return false;
    // A failed kernel's own message, as synchronize() and the events give it.
    if (e != orSuccess) checkKernelError(e, c10::str(s), orStreamLastException(raw));
    return true;
  }
  void synchronizeStream(const c10::Stream& s) const override {
    warn_or_error_on_sync("Stream.synchronize");  // as CUDAStream::synchronize
    openreg::synchronizeStream(s);
  }
  void synchronizeDevice(c10::DeviceIndex index) const override { openreg::synchronizeDevice(index); }
  // torch.Stream.is_capturing(): a graph capture (OpenRegGraph.cpp) is recording it.
  bool isStreamCapturing(const c10::Stream& s) const override {
    return orStreamIsCapturing(rawStream(s));
  }

  // Events are created lazily on first record, like CUDA's.
  void record(void** event, const c10::Stream& s, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == s.device_index(),
                "Event device index ", static_cast<int>(device_index),
                " does not match recording stream's device index ",
                static_cast<int>(s.device_index()), ".");
    if (!*event) {
      // An interprocess event made by OpenRegIpcEvent.cpp, which records
      // nothing here (see there).
      if (orEvent made = takeEventToAdopt()) {
        *event = made;
        return;
      }
      orEvent created = nullptr;
      OPENREG_CHECK(orEventCreate(&created, flag == c10::EventFlag::BACKEND_DEFAULT));
      *event = created;
    }
    OPENREG_CHECK(orEventRecord(static_cast<orEvent>(*event), rawStream(s)));
  }
  void block(void* event, const c10::Stream& s) const override {
    if (!event) return;  // an unrecorded event is complete
    orStream stream = rawStream(s);
    orError error = orStreamWaitEvent(stream, static_cast<orEvent>(event));
    // The waiting stream failed earlier: its kernel's own error, as elsewhere.
    if (error != orSuccess) checkKernelError(error, c10::str(s), orStreamLastException(stream));
  }
  bool queryEvent(void* event) const override {
    if (!event) return true;
    orError e = orEventQuery(static_cast<orEvent>(event));
    if (e == orErrorNotReady) return false;
    checkEventError(e, event);
    return true;
  }
  void synchronizeEvent(void* event) const override {
    if (event) checkEventError(orEventSynchronize(static_cast<orEvent>(event)), event);
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    if (event) orEventDestroy(static_cast<orEvent>(event));
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end,
                "Both events must be recorded before calculating elapsed time.");
    float ms = 0;
    orError e = orEventElapsedTime(&ms, static_cast<orEvent>(start), static_cast<orEvent>(end));
    TORCH_CHECK(e != orErrorInvalidValue,
                "Both events must be recorded, and created with argument 'enable_timing=True', "
                "before calculating elapsed time.");
    TORCH_CHECK(e != orErrorInvalidDevice,
                "Both events must be recorded on the same device to calculate elapsed time.");
    TORCH_CHECK(e != orErrorNotReady,
                "Both events must be completed before calculating elapsed time.");
    checkEventError(e, orEventQuery(static_cast<orEvent>(start)) != orSuccess ? start : end);
    return ms;
  }
  // A failed kernel before the event: its stream's message.
  static void checkEventError(orError e, void* event) {
    if (e == orSuccess) return;
    orStream stream = orEventStream(static_cast<orEvent>(event));
    const bool remote = !stream && orEventIsInterprocess(static_cast<orEvent>(event));
    checkKernelError(e,
                     remote ? "the stream of another process that recorded an interprocess event"
                            : "the stream of an event",
                     stream ? orStreamLastException(stream) : nullptr);
  }
  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& s) const override {
    getCachingAllocator()->recordStream(data_ptr, s);
  }
};

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, OpenRegGuardImpl);

}  // namespace openreg
