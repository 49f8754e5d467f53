// Device selection for the PyTorch side of openreg: the per-thread current
// device (like cudaSetDevice) and index validation with CUDA-style errors.
// Used by OpenRegGuardImpl, OpenRegHooks and the Python module.
#pragma once

#include <c10/core/Device.h>

namespace openreg {

c10::DeviceIndex device_count() noexcept;
// Raises (RuntimeError) naming the valid range if `index` is not a device.
// Any integer: Python passes indices before they are narrowed to a DeviceIndex.
void check_device_index(int64_t index);
c10::DeviceIndex current_device();
void set_device(c10::DeviceIndex index);
c10::DeviceIndex exchange_device(c10::DeviceIndex index);
// Resolves -1 ("current") to the current device, validating the result.
c10::DeviceIndex resolve_device(c10::DeviceIndex index);

}  // namespace openreg
