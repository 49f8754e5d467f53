// Releaser: destroys finished operations off the backend's worker thread.
//
// A finished operation may hold the last C++ reference to a tensor that has a
// Python object; dropping it decrements that object, which takes the GIL. The
// worker must never wait for the GIL (a caller may hold it while it waits for
// the worker), so finished operations go to one process-wide thread that may
// wait for the GIL safely, because nothing waits for it. This is the part NCCL's
// watchdog plays for completed work: device memory goes back to the caching
// allocator as soon as a collective finishes, not at the group's next call
// (FSDP2 would otherwise hold a whole backward's all-gather and reduce-scatter
// buffers until its next forward).
#pragma once

#include <memory>
#include <utility>

namespace openreg::ccl {

struct Garbage {
  virtual ~Garbage() = default;
};

template <class T>
struct Boxed final : Garbage {
  explicit Boxed(T&& v) : value(std::move(v)) {}
  T value;
};

// Queues `garbage` for destruction on the releaser thread (started on first use).
void releaseLater(std::unique_ptr<Garbage> garbage);

template <class T>
void releaseLater(T&& value) {
  releaseLater(std::unique_ptr<Garbage>(new Boxed<T>(std::forward<T>(value))));
}

// Destroys what is queued, then stops the thread; later garbage is leaked
// (the process is exiting). Call without holding the GIL: Python's atexit does.
void stopReleaser();

}  // namespace openreg::ccl
