// PyTorch hook: the pinned host memory allocator (at::HostAllocator, returned
// by PrivateUse1HooksInterface::getPinnedMemoryAllocator and registered with
// REGISTER_HOST_ALLOCATOR), behind Tensor.pin_memory() and is_pinned().
// Asynchronous copies keep the pinned storage alive until they run, so freeing
// needs no events here. Tests: tests/runtime/test_pinned.py.
#pragma once

#include <ATen/core/CachingHostAllocator.h>

namespace openreg {
at::HostAllocator* getHostAllocator();
}
