#include "RoutedTransport.h"

#include <c10/util/Exception.h>

#include "shm/ShmTransport.h"
#include "zmq/ZmqTransport.h"

namespace openreg::ccl {

RoutedTransport::RoutedTransport(const Topology& topology, const Rendezvous& rdv,
                                 std::chrono::milliseconds timeout)
    : topo_(topology) {
  const auto& local = topo_.localRanks();
  if (local.size() > 1)
    shm_ = ShmTransport::connect(topo_.localIndex(), static_cast<int>(local.size()),
                                 rdv.prefixed("host" + std::to_string(topo_.host()) + "/"), local);
  std::vector<bool> remote(topo_.size());
  for (int r = 0; r < topo_.size(); ++r) remote[r] = !topo_.isLocal(r);
  ShmTransport* shm = shm_.get();
  zmq_ = ZmqTransport::connect(topo_.rank, topo_.size(), remote, rdv, timeout,
                               shm ? std::function<void()>([shm] { shm->wakeup(); }) : nullptr);
}

RoutedTransport::~RoutedTransport() {
  zmq_.reset();  // stop the I/O thread before the doorbell it rings goes away
}

RequestPtr RoutedTransport::isend(Channel ch, int dst, uint64_t tag, const std::string& what,
                                  const void* data, size_t bytes) {
  TORCH_CHECK(dst >= 0 && dst < size() && dst != rank(), "oreg_ccl: invalid destination rank ", dst);
  if (!topo_.isLocal(dst)) return zmq_->isend(ch, dst, tag, what, data, bytes);
  auto req = shm_->isend(ch, topo_.localIndex(dst), tag, what, data, bytes);
  req->peer = dst;
  return req;
}

RequestPtr RoutedTransport::irecv(Channel ch, int src, uint64_t tag, const std::string& what,
                                  size_t bytes, Sink sink, void* direct) {
  if (src == kAnySource && ch == Channel::kP2P)
    return irecvAnySource(tag, what, bytes, std::move(sink), direct);
  TORCH_CHECK(src >= 0 && src < size() && src != rank(), "oreg_ccl: invalid source rank ", src);
  if (!topo_.isLocal(src)) return zmq_->irecv(ch, src, tag, what, bytes, std::move(sink), direct);
  auto req = shm_->irecv(ch, topo_.localIndex(src), tag, what, bytes, std::move(sink), direct);
  req->peer = src;
  return req;
}

RequestPtr RoutedTransport::irecvAnySource(uint64_t tag, const std::string& what, size_t bytes,
                                           Sink sink, void* direct) {
  // One half in each transport, sharing a `taken` flag: the first to match a
  // message takes it, and the other is dropped where it would have matched
  // (PostedRecv::take), so exactly one message is consumed. Each transport
  // keeps posting order among its own receives, as MPI's matching rules ask.
  auto whole = std::make_shared<Request>();
  whole->peer = kAnySource;
  auto taken = std::make_shared<std::atomic<bool>>(false);
  RequestPtr local, remote;
  if (shm_) local = shm_->irecvAnyOf(tag, what, bytes, sink, direct, taken);
  try {
    remote = zmq_->irecvAnyOf(tag, what, bytes, std::move(sink), taken);
  } catch (...) {
    taken->store(true);  // retire the posted half too
    throw;
  }
  if (local) {
    onDone(local, [whole, ranks = topo_.localRanks(), half = local.get()] {
      completeRequest(*whole, ranks[half->peer]);  // local index -> group rank
    });
  }
  onDone(remote, [whole, half = remote.get()] { completeRequest(*whole, half->peer); });
  return whole;
}

void RoutedTransport::progress(Clock::time_point until, Clock::time_point deadline) {
  if (zmq_->poll()) return;
  if (!shm_) return zmq_->progress(until);
  // Also returns when the ZeroMQ side notifies; bounded so that the ZeroMQ
  // side's periodic checks (dropped peers) keep running.
  shm_->progress(std::min(until, Clock::now() + std::chrono::milliseconds(100)), deadline);
  zmq_->poll();
}

void RoutedTransport::wakeup() {
  if (shm_) shm_->wakeup();
  zmq_->wakeup();
}

void RoutedTransport::cancel(const std::string& why, bool propagate) {
  if (shm_) shm_->cancel(why, propagate);
  zmq_->cancel(why, propagate);
}

std::string RoutedTransport::failure() const {
  std::string f = zmq_->failure();
  if (f.empty() && shm_) f = shm_->failure();
  return f;
}

std::string RoutedTransport::unreceived(Channel ch) {
  std::string local = shm_ ? shm_->unreceived(ch) : "";
  return local.empty() ? zmq_->unreceived(ch) : local;
}

void RoutedTransport::shutdown() {
  zmq_->shutdown();
  if (shm_) shm_->shutdown();
}

void RoutedTransport::quiesce() {
  if (shm_) shm_->quiesce();
  zmq_->quiesce();
}

void RoutedTransport::awaitPeersFailed(Clock::duration bound) { zmq_->awaitPeersFailed(bound); }

}  // namespace openreg::ccl
