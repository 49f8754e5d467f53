// FutureStreams: the streams on which a process group's futures for openreg
// tensors record their completion; the role ProcessGroupNCCL's NCCL stream
// plays for its futures.
//
// Such a future is completed when getFuture() is called, on the caller's
// thread, as NCCL's is at issue: its callbacks (DDP communication hooks) run
// there in program order, so collectives they issue are issued in the same
// order on every rank. Its data is ready once the event it recorded fires,
// after a kernel on this stream that holds it until the collective completes;
// consumers (Future::wait(), then()) make their streams wait for that event.
//
// One stream per group and device, dedicated (not from the pool): it blocks
// for as long as a collective runs, which must not hold up other groups' or
// users' work. Handed back when the group and its works are gone.
#pragma once

#include <c10/core/Stream.h>

#include <mutex>
#include <vector>

#include "../runtime/OpenRegStream.h"

namespace openreg::ccl {

class FutureStreams {
 public:
  FutureStreams() = default;
  FutureStreams(const FutureStreams&) = delete;
  FutureStreams& operator=(const FutureStreams&) = delete;
  ~FutureStreams() {
    for (const auto& s : streams_) releaseDedicatedStream(s);
  }

  c10::Stream of(c10::DeviceIndex device) {
    std::lock_guard<std::mutex> g(mutex_);
    for (const auto& s : streams_)
      if (s.device_index() == device) return s;
    streams_.push_back(createDedicatedStream(device));
    return streams_.back();
  }

 private:
  std::mutex mutex_;
  std::vector<c10::Stream> streams_;  // GUARDED_BY(mutex_); a group rarely uses more than one device
};

}  // namespace openreg::ccl
