// StreamOrder: how much of an openreg stream a process group's next operation
// need not wait for.
//
// An operation on openreg tensors may start only once the work queued before
// it on the caller's stream has run (NCCL's stream semantics). The general
// way costs two thread hand-offs: the backend queues a marker kernel on the
// stream, the stream thread runs it and wakes the group's worker. But the
// worker runs the group's collectives one at a time in issue order, so some
// stream work is known to end before the group's next operation starts:
//  - everything queued before an earlier operation of the group was ready
//    (it ran before that operation started);
//  - a wait() on an earlier collective of the group, queued right after that
//    (it ends when the collective ends).
// StreamOrder keeps the stream position up to which that holds. An operation
// issued with nothing else queued on its stream since needs no marker:
// collectives issued back to back (`dist.all_reduce` in a loop, waited for or
// not) run without a round trip through the stream thread. Sends and receives
// complete after the next operation may have started, so waiting for one
// covers nothing; nor does waiting for a coalesced group (it may hold sends
// and receives; only a single collective's work extends the order).
//
// Positions are exact: an item queued by another thread (a kernel in a
// future's callback, an allocator's event) is never taken for covered work.
// The backend checks and updates the order in the same critical section in
// which it queues the operation, so the order describes the queue's.
#pragma once

#include <cstdint>
#include <mutex>

#include "../runtime/driver/Driver.h"

namespace openreg::ccl {

class StreamOrder {
 public:
  // True if nothing but covered work was queued on `stream`.
  bool covers(orStream stream) {
    std::lock_guard<std::mutex> g(mutex_);
    return stream == stream_ && orStreamLaunchCount(stream) == launches_;
  }
  // An operation's marker kernel was queued on `stream` after `before` items:
  // the operation waits for it, so everything up to it ends before the
  // group's next operation starts. Unless another thread queued work in
  // between and the marker's position is unknown: then nothing is covered.
  void coverMarker(orStream stream, uint64_t before) {
    std::lock_guard<std::mutex> g(mutex_);
    const bool known = orStreamLaunchCount(stream) == before + 1;
    stream_ = known ? stream : nullptr;
    launches_ = before + 1;
  }
  // A wait for one of the group's collectives was queued on `stream` after
  // `before` items: right behind covered work, it is covered too (it ends
  // when that collective ends, before the next operation starts).
  void coverWait(orStream stream, uint64_t before) {
    std::lock_guard<std::mutex> g(mutex_);
    if (stream == stream_ && before == launches_ && orStreamLaunchCount(stream) == before + 1)
      launches_ = before + 1;
  }

 private:
  std::mutex mutex_;
  orStream stream_ = nullptr;  // GUARDED_BY(mutex_)
  uint64_t launches_ = 0;      // GUARDED_BY(mutex_)
};

}  // namespace openreg::ccl
