// The shared half of an interprocess event (orEventCreateInterprocess, ~
// cudaEventInterprocess): a page of a memfd that every process holding the
// event maps. The creator's events share its memfds (an arena of 1024 pages
// each); a page counts the processes' events on it, and is given to a new
// event only once none holds it (a new incarnation, so stale handles fail). A record in any of them takes the next generation number and
// one of 64 slots, which it holds until its stream reaches it and publishes
// that there; waiters in any process watch the slot (a futex on the shared page, so a waiter sleeps in the kernel).
// A waiter also watches the recording process: one that exits before its
// record is reached ends the wait with orErrorIpcPeerExited instead of a hang.
// Driver-internal (Stream.cpp's events use it).
#pragma once

#include <atomic>
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
  // Records are named by ids (0: none), made here as this process records.
  // The id of a new record (waits while 64 records are outstanding).
  uint64_t claim();
  // The stream reached the record `id` (its kernels failed or not).
  void publish(uint64_t id, bool failed);
  // The latest record, of any process.
  uint64_t latest() const;
  // orSuccess / orErrorNotReady / orErrorLaunchFailure (its stream failed) /
  // orErrorIpcPeerExited for the record `id`.
  orError status(uint64_t id) const;
  // Blocks until status(id) is not orErrorNotReady, and returns it.
  orError wait(uint64_t id) const;
  // The pid of the process that made the record `id` (0: unknown).
  int64_t recorder(uint64_t id) const;

 private:
  IpcEvent() = default;
  IpcEventPage* page_ = nullptr;
  bool own_mapping_ = false;  // an opened event maps its page alone; a created one is in an arena
  int64_t owner_pid_ = 0;  // that mapped page_ (a fork's child must not unmap it)
  std::atomic<int> next_hint_{0};  // where this process looks for a free slot first
  orIpcEventHandle handle_{};
};

}  // namespace openreg::detail
