// The shared half of an interprocess event (orEventCreateInterprocess, ~
// cudaEventInterprocess): a page of a memfd that every process holding the
// event maps. Records in any of them take the next generation number; the
// stream that reaches a record publishes it there, and waiters in any process
// watch it (a futex on the shared page, so a waiter sleeps in the kernel).
// A waiter also watches the recording process: one that exits before its
// record is reached ends the wait with orErrorIpcPeerExited instead of a hang.
// Driver-internal (Stream.cpp's events use it).
#pragma once

#include <cstdint>
#include <memory>

#include "Driver.h"

namespace openreg::detail {

struct IpcEventPage;  // the shared layout (IpcEvent.cpp)

class IpcEvent {
 public:
  // A new event, or the one `handle` names in another process (nullptr, with
  // *error set, when it cannot be opened).
  static std::shared_ptr<IpcEvent> create(orError* error);
  static std::shared_ptr<IpcEvent> open(const orIpcEventHandle& handle, orError* error);
  ~IpcEvent();

  orIpcEventHandle handle() const { return handle_; }
  // A record's generation (1, 2, ...); this process is its recorder.
  uint64_t claim();
  // The stream reached the record of `generation` (its kernels failed or not).
  void publish(uint64_t generation, bool failed);
  // The latest record's generation (0: never recorded).
  uint64_t latest() const;
  // orSuccess / orErrorNotReady / orErrorLaunchFailure (its stream failed) /
  // orErrorIpcPeerExited for the record of `generation`.
  orError status(uint64_t generation) const;
  // Blocks until status(generation) is not orErrorNotReady, and returns it.
  orError wait(uint64_t generation) const;
  // The pid of the process that made the record of `generation` (0: unknown).
  int64_t recorder(uint64_t generation) const;

 private:
  IpcEvent() = default;
  IpcEventPage* page_ = nullptr;
  int fd_ = -1;  // the creator keeps its memfd open: the handle names it
  orIpcEventHandle handle_{};
};

}  // namespace openreg::detail
