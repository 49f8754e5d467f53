// PyTorch hook: the pinned host memory allocator (at::HostAllocator, returned
// by PrivateUse1HooksInterface::getPinnedMemoryAllocator and registered with
// REGISTER_HOST_ALLOCATOR), behind Tensor.pin_memory() and is_pinned().
//
// PyTorch's caching host allocator (at::CachingHostAllocatorImpl, as CUDA's
// and XPU's) over the driver's pinned memory: blocks of power-of-two sizes
// are cached for reuse; a block used by an asynchronous copy is recorded on
// the copy's stream (record_event) and reused only once that work has run, so
// copy kernels hold raw pointers and never own (or drop) the user's tensor on
// a worker thread. Statistics: torch.openreg.host_memory_stats().
// Tests: tests/runtime/test_pinned.py.
#pragma once

#include <ATen/core/CachingHostAllocator.h>

namespace openreg {
at::HostAllocator* getHostAllocator();
}
