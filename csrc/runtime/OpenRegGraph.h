// Graph capture and replay (OpenRegGraph.cpp): torch.accelerator.Graph on openreg.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <optional>

namespace openreg {

// Registers openreg's at::GraphImplInterface; call after the PrivateUse1
// backend got its name (openreg/_registration.py).
void registerGraphImpl();
// torch.openreg.graph_pool_handle(): a pool id graphs can share.
c10::MempoolId_t graphPoolHandle();
// The capture `stream` takes part in (CUDA's capture id: each capture of the
// process has its own), or none.
std::optional<uint64_t> captureIdOf(const c10::Stream& stream);
// Whether capture `id` is still recording.
bool captureIsOpen(uint64_t id);

}  // namespace openreg
