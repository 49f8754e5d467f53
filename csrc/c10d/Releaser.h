// Releaser: destroys finished operations off the backend's worker thread.
//
// A finished operation may hold the last C++ reference to a tensor that has a
// Python object; dropping it decrements that object, which takes the GIL. The
// worker must never wait for the GIL (a caller may hold it while it waits for
// the worker), so finished operations go to one process-wide thread that may
// wait for the GIL safely, because nothing waits for it. Their memory goes
// back to the caching allocator as soon as they finish, not at the group's
// next call. (NCCL's watchdog avoids the question by never owning outputs;
// here the worker owns the work of an operation nobody waited on yet.)
#pragma once

#include <functional>
#include <memory>
#include <type_traits>
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
  releaseLater(std::unique_ptr<Garbage>(new Boxed<std::decay_t<T>>(std::forward<T>(value))));
}

// Runs `f` with the GIL released if this thread holds it.
void withoutGil(const std::function<void()>& f);

// Destroys what is queued, then stops the thread; later garbage is leaked
// (the process is exiting). Call without holding the GIL: Python's atexit does.
void stopReleaser();

}  // namespace openreg::ccl
