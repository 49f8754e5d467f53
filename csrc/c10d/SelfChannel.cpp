#include "SelfChannel.h"

#include <cstring>

#include "Errors.h"

namespace openreg::ccl {

std::optional<SelfChannel::Pending> SelfChannel::takeFirst(std::deque<Pending>& q, uint64_t tag) {
  for (auto it = q.begin(); it != q.end(); ++it) {
    if (it->tag != tag) continue;
    Pending p = std::move(*it);
    q.erase(it);
    return p;
  }
  return std::nullopt;
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

RequestPtr SelfChannel::post(Pending mine, bool isSend) {
  mine.req = std::make_shared<Request>();
  mine.req->peer = rank_;
  std::optional<Pending> other = takeFirst(isSend ? recvs_ : sends_, mine.tag);
  if (!other)
    (isSend ? sends_ : recvs_).push_back(mine);
  else if (isSend)
    match(mine, *other);
  else
    match(*other, mine);
  return mine.req;
}

RequestPtr SelfChannel::isend(uint64_t tag, const std::string& what, const void* data,
                              size_t bytes) {
  return post({nullptr, tag, what, data, nullptr, bytes}, /*isSend=*/true);
}

RequestPtr SelfChannel::irecv(uint64_t tag, const std::string& what, void* dest, size_t bytes) {
  return post({nullptr, tag, what, nullptr, dest, bytes}, /*isSend=*/false);
}

void SelfChannel::clear() {
  sends_.clear();
  recvs_.clear();
}

}  // namespace openreg::ccl
