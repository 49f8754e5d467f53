#include "OpenRegFunctions.h"  // current device (cudaSetDevice) for the hooks; contract in the header

#include <c10/util/Exception.h>

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
  TORCH_CHECK(false,
              "openreg error: invalid device ordinal: openreg:", index,
              " requested, but only ", static_cast<int>(device_count()),
              " openreg devices exist (valid indices are 0..",
              static_cast<int>(device_count()) - 1,
              "; set OPENREG_DEVICE_COUNT for more)");
}

c10::DeviceIndex current_device() { return t_current_device; }

void set_device(c10::DeviceIndex index) {
  check_device_index(index);
  t_current_device = index;
}

c10::DeviceIndex exchange_device(c10::DeviceIndex index) {
  c10::DeviceIndex previous = t_current_device;
  if (index >= 0 && index != previous) set_device(index);
  return previous;
}

c10::DeviceIndex resolve_device(c10::DeviceIndex index) {
  if (index < 0) return t_current_device;
  check_device_index(index);
  return index;
}

}  // namespace openreg
