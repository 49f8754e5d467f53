// Graph capture and replay (OpenRegGraph.cpp): torch.accelerator.Graph on openreg.
#pragma once

#include <c10/core/Allocator.h>

namespace openreg {

// Registers openreg's at::GraphImplInterface; call after the PrivateUse1
// backend got its name (openreg/_registration.py).
void registerGraphImpl();
// torch.openreg.graph_pool_handle(): a pool id graphs can share.
c10::MempoolId_t graphPoolHandle();

}  // namespace openreg
