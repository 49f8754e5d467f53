#include "OpenRegFunctions.h"  // current device (cudaSetDevice) for the hooks; contract in the header

#include <c10/util/Exception.h>

#include <atomic>

#include "OpenRegException.h"
#include "driver/Driver.h"

namespace openreg {
namespace {
thread_local c10::DeviceIndex t_current_device = 0;
}

c10::DeviceIndex device_count() noexcept {
  return static_cast<c10::DeviceIndex>(orDeviceCount());
}

void check_device_index(int64_t index) {
  if (C10_LIKELY(index >= 0 && index < device_count())) return;
  // A bad OPENREG_DEVICE_COUNT leaves no devices: say why.
  TORCH_CHECK(orConfigError().empty(), "openreg error: ", orConfigError());
  // Which knob limits the devices: OPENREG_VISIBLE_DEVICES when it hides some.
  const bool by_visibility = orDeviceCount() < orPhysicalDeviceCount();
  if (device_count() == 0)
    OPENREG_THROW_ACCELERATOR_ERROR(
        orErrorInvalidDevice, "openreg error: no openreg devices are available (",
        by_visibility ? "OPENREG_VISIBLE_DEVICES lists none" : "OPENREG_DEVICE_COUNT=0", ")");
  OPENREG_THROW_ACCELERATOR_ERROR(
      orErrorInvalidDevice, "openreg error: invalid device ordinal: openreg:", index,
      " requested, but only ", static_cast<int>(device_count()),
      " openreg devices exist (valid indices are 0..", static_cast<int>(device_count()) - 1,
      by_visibility ? "; OPENREG_VISIBLE_DEVICES shows only these)"
                    : "; set OPENREG_DEVICE_COUNT for more)");
}

c10::DeviceIndex current_device() { return t_current_device; }

void set_device(c10::DeviceIndex index) {
  check_device_index(index);
  t_current_device = index;
}

c10::DeviceIndex exchange_device(c10::DeviceIndex index) {
  c10::DeviceIndex previous = t_current_device;
  // -1 leaves the device as it is; another negative index is refused (torch
  // narrows "openreg:200" to -56; cudaSetDevice refuses it too).
  if (index != -1 && index != previous) set_device(index);
  return previous;
}

c10::DeviceIndex resolve_device(c10::DeviceIndex index) {
  if (index == -1) return t_current_device;  // c10's "current device"; other negatives are bad
  check_device_index(index);
  return index;
}

namespace {
std::atomic<int> g_sync_debug_mode{0};
}  // namespace

void set_sync_debug_mode(int mode) {
  TORCH_CHECK(mode >= 0 && mode <= 2, "invalid value of debug_mode, expected one of 0,1,2");
  g_sync_debug_mode.store(mode, std::memory_order_relaxed);
}

int get_sync_debug_mode() { return g_sync_debug_mode.load(std::memory_order_relaxed); }

void warn_or_error_on_sync(const char* what) {
  const int mode = get_sync_debug_mode();
  if (C10_LIKELY(mode == 0)) return;
  TORCH_CHECK(mode != 2, "called a synchronizing openreg operation (", what, ")");
  TORCH_WARN("called a synchronizing openreg operation (", what, ")");
}

}  // namespace openreg
