// Graph capture and replay (OpenRegGraph.cpp): torch.accelerator.Graph on openreg.
#pragma once

#include <c10/core/Allocator.h>

#include <cstdint>
#include <optional>

namespace openreg {

// Registers openreg's at::GraphImplInterface; call after the PrivateUse1
// backend got its name (openreg/_registration.py).
void registerGraphImpl();
// torch.openreg.graph_pool_handle(): a pool id graphs can share.
c10::MempoolId_t graphPoolHandle();
// The capture the calling thread's current stream of `device` takes part in
// (CUDA's capture id: each capture of the process has its own), or none.
std::optional<uint64_t> currentCaptureId(c10::DeviceIndex device);
// Whether capture `id` is still recording.
bool captureIsOpen(uint64_t id);

}  // namespace openreg
