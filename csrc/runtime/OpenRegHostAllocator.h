// PyTorch hook: the pinned host memory allocator (at::HostAllocator, returned
// by PrivateUse1HooksInterface::getPinnedMemoryAllocator and registered with
// REGISTER_HOST_ALLOCATOR), behind Tensor.pin_memory() and is_pinned().
//
// Like CUDA's caching host allocator, a pinned block used by an asynchronous
// copy is recorded on the copy's stream (record_event) and only returned to
// the OS once that work has run, so copy kernels hold raw pointers and never
// own (or drop) the user's tensor on a worker thread.
// Tests: tests/runtime/test_pinned.py.
#pragma once

#include <ATen/core/CachingHostAllocator.h>

namespace openreg {
at::HostAllocator* getHostAllocator();
}
