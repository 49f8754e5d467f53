#include "OpenRegStream.h"  // streams behind OpenRegGuardImpl; contract in the header

#include <array>
#include <atomic>
#include <mutex>

#include <c10/util/Exception.h>

#include "OpenRegException.h"
#include "OpenRegFunctions.h"

namespace openreg {
namespace {

// As CUDA's pools (kStreamsPerPool): a program that takes N < 32 streams gets N
// different ones, so work it thinks independent is never serialised behind
// itself (which would also hide a missing synchronisation from the race
// checker). A driver stream and its worker thread exist only once used.
constexpr int kStreamPoolSize = 32;
constexpr int kPooledStreams = 1 + 2 * kStreamPoolSize;
constexpr int kStreamsPerDevice = kPooledStreams + kMaxDedicatedStreams;

struct DeviceStreams {
  std::array<std::once_flag, kStreamsPerDevice> created;
  // Set once, by rawStream; read without creating by synchronizeComputeStreams.
  std::array<std::atomic<orStream>, kStreamsPerDevice> streams{};
  std::atomic<uint32_t> next_low{0};
  std::atomic<uint32_t> next_high{0};
  // Trivially destructible, as the rest: a group may release its stream
  // during the process's static destruction.
  std::mutex dedicated_mutex;
  uint32_t next_dedicated = 0;  // GUARDED_BY(dedicated_mutex)
  uint32_t free_count = 0;      // GUARDED_BY(dedicated_mutex)
  std::array<c10::StreamId, kMaxDedicatedStreams> free_ids{};  // GUARDED_BY(dedicated_mutex)
};

std::array<DeviceStreams, orMaxDevices> g_devices;
// Per thread, per device: the StreamId of the current stream (0 = default).
thread_local std::array<c10::StreamId, orMaxDevices> t_current{};

int priorityOfId(c10::StreamId id) {
  return id > kStreamPoolSize && id < kPooledStreams ? -1 : 0;
}

void checkStream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "Expected an openreg stream, got a stream of device ", stream.device());
  TORCH_CHECK(stream.id() >= 0 && stream.id() < kStreamsPerDevice,
              "Invalid openreg stream id ", stream.id());
  check_device_index(stream.device_index());  // a hand-built torch.Stream may name any index
}

}  // namespace

c10::Stream getDefaultStream(c10::DeviceIndex device) {
  device = resolve_device(device);
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, device), 0);
}

c10::Stream getStreamFromPool(c10::DeviceIndex device, int priority) {
  TORCH_CHECK(priority <= 0, "Expected openreg stream priority to be less than or equal to 0, got ",
              priority);
  device = resolve_device(device);
  auto& d = g_devices[device];
  c10::StreamId id = priority < 0
                         ? 1 + kStreamPoolSize + (d.next_high++ % kStreamPoolSize)
                         : 1 + (d.next_low++ % kStreamPoolSize);
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, device), id);
}

c10::Stream createDedicatedStream(c10::DeviceIndex device) {
  device = resolve_device(device);
  auto& d = g_devices[device];
  c10::StreamId id;
  {
    std::lock_guard<std::mutex> g(d.dedicated_mutex);
    if (d.free_count > 0) {
      id = d.free_ids[--d.free_count];
    } else {
      TORCH_CHECK(d.next_dedicated < kMaxDedicatedStreams, "openreg:", static_cast<int>(device),
                  " has no dedicated stream left: ", kMaxDedicatedStreams, " are in use");
      id = kPooledStreams + d.next_dedicated++;
    }
  }
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, device), id);
}

void releaseDedicatedStream(const c10::Stream& stream) {
  checkStream(stream);
  TORCH_CHECK(stream.id() >= kPooledStreams, "openreg stream ", stream.id(), " is not dedicated");
  auto& d = g_devices[stream.device_index()];
  std::lock_guard<std::mutex> g(d.dedicated_mutex);
  d.free_ids[d.free_count++] = stream.id();
}

c10::Stream getCurrentStream(c10::DeviceIndex device) {
  device = resolve_device(device);
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, device),
                     t_current[device]);
}

void setCurrentStream(const c10::Stream& stream) {
  checkStream(stream);
  t_current[stream.device_index()] = stream.id();
}

orStream rawStream(const c10::Stream& stream) {
  checkStream(stream);
  c10::DeviceIndex device = resolve_device(stream.device_index());
  auto& d = g_devices[device];
  auto id = static_cast<size_t>(stream.id());
  orError error = orSuccess;
  std::call_once(d.created[id], [&] {
    orStream created = nullptr;
    error = orStreamCreate(device, &created);
    if (created) orSanitizerSetLabel(created, c10::str(stream));
    d.streams[id].store(created, std::memory_order_release);
  });
  OPENREG_CHECK(error);
  orStream raw = d.streams[id].load(std::memory_order_acquire);
  TORCH_CHECK(raw != nullptr, "openreg stream ", id, " failed to initialise earlier");
  return raw;
}

int streamPriority(const c10::Stream& stream) {
  checkStream(stream);
  return priorityOfId(stream.id());
}

void checkKernelError(orError error, const std::string& where, std::exception_ptr cause) {
  if (error == orErrorLaunchFailure) {
    const std::string text = c10::str(
        "openreg kernel failed asynchronously on ", where, ": ", orErrorMessage(cause),
        "\nKernel errors are reported at a later API call, as on CUDA; "
        "the stream is unusable afterwards.");
    if (cause) {
      try {
        std::rethrow_exception(cause);
      } catch (const c10::DistBackendError&) {
        C10_THROW_ERROR(DistBackendError, text);
      } catch (...) {
      }
    }
    OPENREG_THROW_ACCELERATOR_ERROR(error, text);
  }
  OPENREG_CHECK(error);
}

void synchronizeStream(const c10::Stream& stream) {
  orStream raw = rawStream(stream);
  orError error = orStreamSynchronize(raw);
  if (error != orSuccess)
    checkKernelError(error, c10::str(stream), orStreamLastException(raw));
}

void synchronizeComputeStreams(c10::DeviceIndex device, bool raisesKernelErrors) {
  device = resolve_device(device);
  for (int id = 0; id < kPooledStreams; ++id) {
    orStream raw = g_devices[device].streams[id].load(std::memory_order_acquire);
    if (!raw) continue;  // never used: nothing queued
    orError error = orStreamDrain(raw);
    if (error == orErrorLaunchFailure && !raisesKernelErrors) continue;
    if (error != orSuccess)
      checkKernelError(error, c10::str("stream ", id, " on device openreg:", static_cast<int>(device)),
                       orStreamLastException(raw));
  }
}

std::vector<orStream> computeStreams(c10::DeviceIndex device) {
  device = resolve_device(device);
  std::vector<orStream> streams;
  for (int id = 0; id < kPooledStreams; ++id)
    if (orStream raw = g_devices[device].streams[id].load(std::memory_order_acquire)) streams.push_back(raw);
  return streams;
}

bool currentStreamIsCapturing(c10::DeviceIndex device) {
  if (device < 0 || device >= orMaxDevices) return false;
  orStream raw = g_devices[device].streams[t_current[device]].load(std::memory_order_acquire);
  return raw && orStreamIsCapturing(raw);
}

namespace {
std::mutex g_waiters_mutex;
std::vector<DeviceSynchronizeWaiter> g_waiters;  // GUARDED_BY g_waiters_mutex
}  // namespace

void addDeviceSynchronizeWaiter(DeviceSynchronizeWaiter waiter) {
  std::lock_guard<std::mutex> lock(g_waiters_mutex);
  g_waiters.push_back(std::move(waiter));
}

void synchronizeDevice(c10::DeviceIndex device) {
  device = resolve_device(device);
  std::vector<DeviceSynchronizeWaiter> waiters;
  {
    std::lock_guard<std::mutex> lock(g_waiters_mutex);
    waiters = g_waiters;
  }
  // Before the streams: a stream may hold for such work (a Work.wait()).
  // Not in a forked child, which has no threads to finish it (the driver
  // call below raises there).
  std::exception_ptr failed;
  if (!orIsForkedChild())
    for (const auto& waiter : waiters) {
      std::exception_ptr e = waiter(device);
      if (!failed) failed = e;
    }
  // The streams are waited for even when such work failed, so that nothing
  // is still running when the error reaches the caller.
  orError error = orDeviceSynchronize(device);
  if (error != orSuccess)
    checkKernelError(error, "openreg:" + std::to_string(device), orDeviceLastException(device));
  if (failed) std::rethrow_exception(failed);
}

}  // namespace openreg
