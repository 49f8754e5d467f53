// Mirrors c10/cuda/CUDAFunctions.h: device selection (the per-thread current
// device, like cudaSetDevice, and index validation with CUDA-style errors),
// used by OpenRegGuardImpl, OpenRegHooks and the Python module; and, as
// CUDA keeps it there too, torch.cuda.set_sync_debug_mode's setting.
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

// torch.cuda.set_sync_debug_mode's setting, process-wide as CUDA's:
// 0 off, 1 warn, 2 error.
void set_sync_debug_mode(int mode);
int get_sync_debug_mode();
// Called where the host waits for the device on the user's behalf (`.item()`,
// a blocking copy, an operator run synchronously, Stream.synchronize): warns
// or raises "called a synchronizing openreg operation" as the mode says, like
// CUDA's warn_or_error_on_sync. `what` names the operation.
void warn_or_error_on_sync(const char* what);

}  // namespace openreg
