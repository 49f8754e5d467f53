// Sends to and receives from a rank's own group rank, which NCCL allows (an
// all-to-all written as send/recv pairs over every rank, a batch_isend_irecv
// ring of one rank) and gloo refuses. Transports only connect distinct ranks,
// so the backend matches these itself: by tag in posting order, as between
// ranks, copying the payload once both sides are posted. A send completes when
// its receive is posted (its buffer is read then), so an unmatched one waits,
// up to the timeout, like a send no peer receives.
// Threading: the group's runner only (its worker, or a caller running inline).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "Transport.h"

namespace openreg::ccl {

class SelfChannel {
 public:
  explicit SelfChannel(int rank) : rank_(rank) {}

  RequestPtr isend(uint64_t tag, const std::string& what, const void* data, size_t bytes);
  RequestPtr irecv(uint64_t tag, const std::string& what, void* dest, size_t bytes);
  // The group failed: forget what waits (its works fail with the group).
  void clear();

 private:
  struct Pending {
    RequestPtr req;
    uint64_t tag;
    std::string what;
    const void* data;  // a send's payload
    void* dest;        // a receive's destination
    size_t bytes;
  };
  // Copies the send's payload into the receive and completes both; throws on
  // a size mismatch.
  void match(const Pending& send, const Pending& recv);
  // Matches `mine` with the first waiting other side of its tag, or queues it.
  RequestPtr post(Pending mine, bool isSend);
  static std::optional<Pending> takeFirst(std::deque<Pending>& q, uint64_t tag);

  const int rank_;
  std::deque<Pending> sends_;
  std::deque<Pending> recvs_;
};

}  // namespace openreg::ccl
