#include "SelfChannel.h"

#include <cstring>

#include "Errors.h"

namespace openreg::ccl {

SelfChannel::Pending SelfChannel::takeFirst(std::deque<Pending>& q, uint64_t tag, bool& found) {
  for (auto it = q.begin(); it != q.end(); ++it) {
    if (it->tag != tag) continue;
    Pending p = std::move(*it);
    q.erase(it);
    found = true;
    return p;
  }
  found = false;
  return {};
}

void SelfChannel::match(const Pending& send, const Pending& recv) {
  if (send.bytes != recv.bytes) {
    PostedRecv expected{recv.req, rank_, recv.tag, recv.what, recv.bytes, nullptr};
    OREG_CCL_THROW(sizeMismatchMessage(rank_, expected, rank_, send.bytes));
  }
  if (send.bytes) std::memcpy(recv.dest, send.data, send.bytes);
  completeRequest(*recv.req, rank_);
  completeRequest(*send.req, rank_);
}

RequestPtr SelfChannel::isend(uint64_t tag, const std::string& what, const void* data,
                              size_t bytes) {
  Pending send{std::make_shared<Request>(), tag, what, data, nullptr, bytes};
  send.req->peer = rank_;
  bool found;
  Pending recv = takeFirst(recvs_, tag, found);
  if (found)
    match(send, recv);
  else
    sends_.push_back(send);
  return send.req;
}

RequestPtr SelfChannel::irecv(uint64_t tag, const std::string& what, void* dest, size_t bytes) {
  Pending recv{std::make_shared<Request>(), tag, what, nullptr, dest, bytes};
  recv.req->peer = rank_;
  bool found;
  Pending send = takeFirst(sends_, tag, found);
  if (found)
    match(send, recv);
  else
    recvs_.push_back(recv);
  return recv.req;
}

void SelfChannel::clear() {
  sends_.clear();
  recvs_.clear();
}

}  // namespace openreg::ccl
