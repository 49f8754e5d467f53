// PyTorch hook: at::GraphImplInterface (the GraphImplRegistry behind
// torch.accelerator.Graph), what CUDAGraph is for CUDA: capture the kernels a
// region launches on the current stream, then replay them with one launch.
// Registered at run time, once PrivateUse1 is renamed "openreg" (the
// registry keys on the name): registerGraphImpl(), from openreg/_registration.py.
//
// Capture is the driver's (orStreamBeginCapture: a capturing stream, and any
// stream that forks into the capture by waiting for an event recorded in it,
// records launches instead of running them; a sync raises "operation not
// permitted when stream is capturing", as CUDA's). Memory is CUDA's
// private pool: the capturing stream allocates from the graph's pool, which
// keeps every block it handed out (freed or not) away from other allocations
// and from empty_cache while a graph using it lives, so replays read and
// write the same addresses the capture did and nothing else.
// Tests: tests/runtime/test_graphs.py.
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
