#include "ZmqTransport.h"

#include <c10/util/Exception.h>
#include <c10/util/thread_name.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <sstream>

#include "../Config.h"
#include "BindAddress.h"

namespace openreg::ccl {

static_assert(sizeof(zmq_msg_t) <= 64, "ZmqMessage storage too small");

ZmqMessage::ZmqMessage() { zmq_msg_init(reinterpret_cast<zmq_msg_t*>(storage_)); }
ZmqMessage::ZmqMessage(size_t bytes) {
  TORCH_CHECK(zmq_msg_init_size(reinterpret_cast<zmq_msg_t*>(storage_), bytes) == 0,
              "oreg_ccl: out of memory for a ", bytes, "-byte message");
}
ZmqMessage::ZmqMessage(void* data, size_t bytes, void (*release)(void*, void*), void* hint) {
  if (zmq_msg_init_data(reinterpret_cast<zmq_msg_t*>(storage_), data, bytes, release, hint) != 0) {
    release(data, hint);
    TORCH_CHECK(false, "oreg_ccl: zmq_msg_init_data failed");
  }
}
ZmqMessage::ZmqMessage(ZmqMessage&& other) noexcept : ZmqMessage() {
  zmq_msg_move(reinterpret_cast<zmq_msg_t*>(storage_), reinterpret_cast<zmq_msg_t*>(other.storage_));
}
ZmqMessage& ZmqMessage::operator=(ZmqMessage&& other) noexcept {
  if (this != &other)
    zmq_msg_move(reinterpret_cast<zmq_msg_t*>(storage_),
                 reinterpret_cast<zmq_msg_t*>(other.storage_));
  return *this;
}
ZmqMessage::~ZmqMessage() { zmq_msg_close(reinterpret_cast<zmq_msg_t*>(storage_)); }
void* ZmqMessage::data() { return zmq_msg_data(reinterpret_cast<zmq_msg_t*>(storage_)); }
size_t ZmqMessage::size() const {
  return zmq_msg_size(const_cast<zmq_msg_t*>(reinterpret_cast<const zmq_msg_t*>(storage_)));
}

namespace {

[[noreturn]] void throwDist(const std::string& msg) {
  throw c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, msg);
}

std::string zmqError(const char* what) {
  return std::string(what) + ": " + zmq_strerror(zmq_errno());
}

// `value`'s type must be the option's (int, int64_t or uint64_t; zmq_setsockopt(3)).
template <class T>
void setOption(void* socket, int option, T value) {
  TORCH_CHECK(zmq_setsockopt(socket, option, &value, sizeof(value)) == 0,
              zmqError("oreg_ccl: zmq_setsockopt"));
}

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

constexpr int kLingerMs = 1000;  // bounded flush of the last messages at close
// Below this a copy is cheaper than tracking the buffer's release.
constexpr size_t kZeroCopyBytes = 64 << 10;

// One send: its request completes when libzmq released every chunk, i.e.
// once the bytes are in the kernel, which delivers them even if this process
// dies right after (a copy still queued in libzmq would die with it).
struct TrackedSend {
  RequestPtr req;
  std::atomic<int64_t> chunks;
  void* transport;
  bool zeroCopy;  // the chunks point into the caller's buffer
  char* copy;     // otherwise: our copy of the payload (null if empty)
};

}  // namespace

ZmqTransport::ZmqTransport(int rank, int size, std::vector<bool> remote,
                           std::function<void()> notify)
    : rank_(rank),
      size_(size),
      remote_(std::move(remote)),
      notifyHook_(std::move(notify)),
      chunkBytes_(std::clamp<size_t>(config().zmqChunkBytes / kPieceAlign * kPieceAlign,
                                     kPieceAlign, 16 << 20)),
      endpoints_(size),
      dealers_(size, nullptr),
      monitors_(size, nullptr),
      disconnectedAt_(size),
      connected_(size),
      peerFailed_(size),
      inbox_(2 * size),
      collRecvs_(size),
      unsent_(size, 0),
      routingIds_(size) {
  for (auto& d : disconnectedAt_) d.store(0);
  for (auto& c : connected_) c.store(false);
  for (auto& f : peerFailed_) f.store(false);
  lastPeerCheck_ = Clock::now();
}

std::shared_ptr<ZmqTransport> ZmqTransport::connect(int rank, int size, std::vector<bool> remote,
                                                    const Rendezvous& rdv,
                                                    std::chrono::milliseconds timeout,
                                                    std::function<void()> notify) {
  std::shared_ptr<ZmqTransport> t(new ZmqTransport(rank, size, std::move(remote), std::move(notify)));
  // The group identity every message carries (see Wire.h).
  if (rank == 0) {
    std::random_device rd;
    t->group_ = (uint64_t(rd()) << 32) ^ rd();
    rdv.set("zmq/group", std::to_string(t->group_));
  } else {
    t->group_ = std::stoull(rdv.get("zmq/group"));
  }
  t->ctx_ = zmq_ctx_new();
  TORCH_CHECK(t->ctx_, zmqError("oreg_ccl: zmq_ctx_new"));
  // With two or more libzmq I/O threads, receiving (the ROUTER, thread 0) and
  // sending (the DEALERs, the others) run in parallel, as gloo's do.
  const int ioThreads = config().zmqIoThreads;
  TORCH_CHECK(zmq_ctx_set(t->ctx_, ZMQ_IO_THREADS, ioThreads) == 0,
              zmqError("oreg_ccl: zmq_ctx_set(ZMQ_IO_THREADS)"));
  // Three sockets per remote peer (DEALER, libzmq's monitor, ours) and the
  // ROUTER: libzmq's default cap of 1023 would stop a group of ~340 ranks.
  TORCH_CHECK(zmq_ctx_set(t->ctx_, ZMQ_MAX_SOCKETS, std::max(1024, 3 * size + 16)) == 0,
              zmqError("oreg_ccl: zmq_ctx_set(ZMQ_MAX_SOCKETS)"));
  // Every socket is stored as soon as it exists: the destructor closes what a
  // failed set-up leaves, or zmq_ctx_term would wait for it forever.
  auto socket = [&t](int type) {
    void* s = zmq_socket(t->ctx_, type);
    TORCH_CHECK(s, zmqError("oreg_ccl: zmq_socket"));
    return s;
  };
  auto pinToIoThreads = [ioThreads](void* socket, int index) {
    if (ioThreads < 2) return;
    uint64_t mask = index == 0 ? 1 : uint64_t(1) << (1 + (index - 1) % (ioThreads - 1));
    setOption(socket, ZMQ_AFFINITY, mask);
  };
  t->router_ = socket(ZMQ_ROUTER);
  pinToIoThreads(t->router_, 0);
  setOption(t->router_, ZMQ_RCVHWM, 0);  // never drop: TCP flow control bounds memory
  setOption(t->router_, ZMQ_LINGER, 0);
  setOption(t->router_, ZMQ_MAXMSGSIZE, static_cast<int64_t>(t->chunkBytes_ + 4096));
  std::string bind = "tcp://" + bindAddress() + ":*";
  TORCH_CHECK(zmq_bind(t->router_, bind.c_str()) == 0,
              zmqError(("oreg_ccl: cannot bind " + bind).c_str()));
  char endpoint[256];
  size_t len = sizeof(endpoint);
  zmq_getsockopt(t->router_, ZMQ_LAST_ENDPOINT, endpoint, &len);
  t->endpoints_[rank] = endpoint;
  // Receivers drop (and libzmq silently reconnects) frames above their own
  // chunk size: a setting that differs between ranks would look like a hang.
  rdv.set("zmq/chunk/" + std::to_string(rank), std::to_string(t->chunkBytes_));
  for (int p = 0; p < size; ++p) {
    const std::string theirs = rdv.get("zmq/chunk/" + std::to_string(p));
    TORCH_CHECK_VALUE(theirs == std::to_string(t->chunkBytes_), "oreg_ccl: OREG_CCL_ZMQ_CHUNK_BYTES is ",
                      t->chunkBytes_, " on rank ", rank, " but ", theirs, " on rank ", p,
                      "; it must be the same on every rank of a job");
  }
  rdv.set("zmq/endpoint/" + std::to_string(rank), endpoint);

  t->wakeFd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  TORCH_CHECK(t->wakeFd_ >= 0, "oreg_ccl: eventfd failed: ", std::strerror(errno));
  static std::atomic<uint64_t> monitorId{0};
  int dealerCount = 0;
  for (int p = 0; p < size; ++p) {
    if (!t->remote_[p]) continue;
    // Blocks until the peer published its address, or throws on the timeout.
    t->endpoints_[p] = rdv.get("zmq/endpoint/" + std::to_string(p));
    void* d = t->dealers_[p] = socket(ZMQ_DEALER);
    pinToIoThreads(d, 1 + dealerCount++);
    setOption(d, ZMQ_SNDHWM, 0);  // a send never blocks or drops
    setOption(d, ZMQ_LINGER, kLingerMs);
    setOption(d, ZMQ_RECONNECT_IVL, 100);
    std::string mon = "inproc://oreg-ccl-monitor-" + std::to_string(getpid()) + "-" +
                      std::to_string(monitorId++);
    TORCH_CHECK(zmq_socket_monitor(d, mon.c_str(), ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED) ==
                    0,
                zmqError("oreg_ccl: zmq_socket_monitor"));
    void* m = t->monitors_[p] = socket(ZMQ_PAIR);
    TORCH_CHECK(zmq_connect(m, mon.c_str()) == 0, zmqError("oreg_ccl: monitor connect"));
    TORCH_CHECK(zmq_connect(d, t->endpoints_[p].c_str()) == 0,
                zmqError(("oreg_ccl: cannot connect to " + t->endpoints_[p]).c_str()));
  }
  t->io_ = std::thread([raw = t.get()] {
    c10::setThreadName("oreg_ccl_zmq");
    raw->ioLoop();
  });

  // Every link must come up within the group's timeout.
  auto deadline = deadlineAfter(timeout);
  for (;;) {
    std::vector<int> missing;
    for (int p = 0; p < size; ++p)
      if (t->remote_[p] && !t->connected_[p].load()) missing.push_back(p);
    if (missing.empty()) break;
    if (Clock::now() >= deadline) {
      std::ostringstream m;
      m << "oreg_ccl: rank " << rank << " could not connect to";
      for (int p : missing) m << " rank " << p << " (" << t->endpoints_[p] << ")";
      m << " within the process group timeout; check that the hosts reach each other on the "
           "interface oreg_ccl binds (set OREG_CCL_SOCKET_IFNAME to choose it)";
      throwDist(m.str());
    }
    std::unique_lock<std::mutex> lock(t->notifyMutex_);
    t->notifyCv_.wait_for(lock, std::chrono::milliseconds(20));
  }
  // Return only once every peer is connected to us too: c10d may destroy a
  // group right after creating it (split_group builds one backend per device
  // type and keeps one), and a peer still connecting would then wait forever
  // for a socket that is gone.
  rdv.set("zmq/ready/" + std::to_string(rank), "1");
  for (int p = 0; p < size; ++p)
    if (t->remote_[p]) rdv.get("zmq/ready/" + std::to_string(p));
  return t;
}

ZmqTransport::~ZmqTransport() {
  shutdown();
  if (wakeFd_ >= 0) ::close(wakeFd_);
}

std::string ZmqTransport::unreceived(Channel ch) {
  for (int src = 0; src < size_; ++src)
    for (const auto& m : inbox_[slot(src, ch)]) {
      if (!m->recv) return unreceivedMessage(src, m->what, m->bytes);
      if (ch == Channel::kCollective) break;  // in order: only the head waits for a receive
    }
  // What the I/O thread received since: looked at, not taken in (taking it
  // in completes requests, which is the runner's job).
  std::lock_guard<std::mutex> g(ioMutex_);
  for (const Arrival& a : arrivals_)
    if (a.header.kind == static_cast<uint8_t>(ch == Channel::kCollective ? wire::Kind::kCollective
                                                                          : wire::Kind::kP2P) &&
        a.header.offset == 0)
      return unreceivedMessage(static_cast<int>(a.header.src),
                               std::string(a.header.what, strnlen(a.header.what, sizeof(a.header.what))),
                               a.header.bytes);
  return "";
}

void ZmqTransport::shutdown() {
  {
    std::lock_guard<std::mutex> g(ioMutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  wakeIo();
  if (io_.joinable()) io_.join();
  for (int p = 0; p < size_; ++p) {
    // Still-queued data refers to caller buffers only if quiesce() gave up.
    closeDealer(p);
    if (monitors_[p]) zmq_close(monitors_[p]);
    monitors_[p] = nullptr;
  }
  if (router_) zmq_close(router_);
  router_ = nullptr;
  // Messages still queued must not outlive the payload copies they own.
  arrivals_.clear();
  inbox_.clear();
  if (ctx_) zmq_ctx_term(ctx_);  // waits at most kLingerMs for the last sends
  ctx_ = nullptr;
}

// ---- sending -----------------------------------------------------------------

ZmqMessage ZmqTransport::makeHeader(wire::Kind kind, uint64_t tag, const std::string& what,
                                    size_t bytes, size_t offset, size_t chunk) const {
  ZmqMessage m(sizeof(wire::Header));
  auto* h = static_cast<wire::Header*>(m.data());
  std::memset(h, 0, sizeof(*h));
  h->magic = wire::kMagic;
  h->version = wire::kVersion;
  h->kind = static_cast<uint8_t>(kind);
  h->src = static_cast<uint32_t>(rank_);
  h->group = group_;
  h->tag = tag;
  h->bytes = bytes;
  h->offset = offset;
  h->chunk = chunk;
  putWireWhat(h->what, sizeof(h->what), what);
  return m;
}

void ZmqTransport::send(Outgoing&& out) {
  int err;
  {
    std::lock_guard<std::mutex> g(sendMutex_);
    if (sendOrDrop(out)) return;
    err = zmq_errno();
  }
  // The DEALER may be left inside a half-sent message: the group cannot go on.
  cancel("oreg_ccl: rank " + std::to_string(rank_) + " could not send to rank " +
             std::to_string(out.dst) + ": " + zmq_strerror(err),
         /*propagate=*/true);
  checkFailure();
}

void ZmqTransport::wakeIo() {
  uint64_t one = 1;
  if (wakeFd_ >= 0) (void)!write(wakeFd_, &one, sizeof(one));
}

void ZmqTransport::sendControl(int peer, wire::Kind kind, const char* what,
                               const std::string& payload) {
  Outgoing o{peer, makeHeader(kind, 0, what, payload.size(), 0, payload.size()),
             ZmqMessage(payload.size())};
  if (!payload.empty()) std::memcpy(o.payload.data(), payload.data(), payload.size());
  // Best effort: the group failed already, and a wait for an answer is bounded.
  (void)sendOrDrop(o);
}

void ZmqTransport::sendAborts(const std::string& why) {
  std::lock_guard<std::mutex> g(sendMutex_);
  for (int p = 0; p < size_; ++p) sendControl(p, wire::Kind::kAbort, "abort", why);
}

void ZmqTransport::sendAbortAck(int peer) {
  std::lock_guard<std::mutex> g(sendMutex_);
  sendControl(peer, wire::Kind::kAbortAck, "abort-ack", "");
}

void ZmqTransport::closeDealer(int peer) {
  if (!dealers_[peer]) return;
  zmq_socket_monitor(dealers_[peer], nullptr, 0);
  zmq_close(dealers_[peer]);
  dealers_[peer] = nullptr;
}

RequestPtr ZmqTransport::isend(Channel ch, int dst, uint64_t tag, const std::string& what,
                               const void* data, size_t bytes) {
  checkFailure();
  TORCH_CHECK(dst >= 0 && dst < size_ && remote_[dst], "oreg_ccl: rank ", dst,
              " is not reachable over ZeroMQ from rank ", rank_);
  auto req = std::make_shared<Request>();
  req->peer = dst;
  const auto kind = ch == Channel::kCollective ? wire::Kind::kCollective : wire::Kind::kP2P;
  const char* src = static_cast<const char*>(data);
  const size_t chunks = bytes == 0 ? 1 : (bytes + chunkBytes_ - 1) / chunkBytes_;
  const bool zeroCopy = bytes >= kZeroCopyBytes;
  auto* ts = new TrackedSend{req, static_cast<int64_t>(chunks), this, zeroCopy, nullptr};
  if (!zeroCopy && bytes) {
    // Small: copy, so the caller's buffer is free at once.
    ts->copy = static_cast<char*>(std::malloc(bytes));
    TORCH_CHECK(ts->copy, "oreg_ccl: out of host memory for a ", bytes, "-byte message");
    std::memcpy(ts->copy, data, bytes);
    src = ts->copy;
  }
  if (zeroCopy) chunksInFlight_ += static_cast<int64_t>(chunks);
  ++unsent_[dst];
  // Chunk by chunk, so libzmq's I/O thread sends the first while we queue the next.
  size_t offset = 0, made = 0;
  try {
    do {
      size_t n = std::min(chunkBytes_, bytes - offset);
      ZmqMessage payload(const_cast<char*>(src + offset), n, &releaseChunk, ts);
      ++made;
      send(Outgoing{dst, makeHeader(kind, tag, what, bytes, offset, n), std::move(payload)});
      offset += n;
    } while (offset < bytes);
  } catch (...) {
    // libzmq releases only the chunks it was given: account for the others.
    for (; made < chunks; ++made) releaseChunk(nullptr, ts);
    throw;
  }
  // A copied message never blocks the caller's buffer, but it completes only
  // once it left this process (see TrackedSend).
  return req;
}

void ZmqTransport::releaseChunk(void*, void* hint) {
  // Runs on a libzmq thread; the transport outlives it (zmq_ctx_term in the
  // destructor returns only after every message was released).
  auto* ts = static_cast<TrackedSend*>(hint);
  auto* self = static_cast<ZmqTransport*>(ts->transport);
  const bool zeroCopy = ts->zeroCopy;
  if (ts->chunks.fetch_sub(1) == 1) {
    {
      std::lock_guard<std::mutex> g(self->releasedMutex_);
      self->released_.push_back(std::move(ts->req));
    }
    std::free(ts->copy);
    delete ts;
  }
  if (zeroCopy) self->chunksInFlight_.fetch_sub(1);
  self->notify();
}

// ---- the I/O thread ------------------------------------------------------------

bool ZmqTransport::sendOrDrop(Outgoing& out) {
  void* d = dealers_[out.dst];
  if (!d) return true;  // dropped after a failure (quiesce)
  // ZMQ_SNDHWM is 0 (unbounded), so these never block; a failure other than
  // a signal means the context or the socket is going away.
  auto frame = [d](ZmqMessage& m, int flags) {
    while (zmq_msg_send(static_cast<zmq_msg_t*>(m.raw()), d, flags) < 0)
      if (zmq_errno() != EINTR) return false;
    return true;
  };
  return frame(out.header, ZMQ_SNDMORE) && frame(out.payload, 0);
}

void ZmqTransport::reject(const std::string& why) {
  uint64_t n = ++rejected_;
  // Warn on the first few and then rarely: a flood must not flood the log.
  if (n <= 5 || n % 1000 == 0)
    TORCH_WARN("oreg_ccl: rank ", rank_, " rejected a message (", n, " so far): ", why);
}

bool ZmqTransport::receiveOne() {
  std::vector<ZmqMessage> frames;
  for (;;) {
    ZmqMessage f;
    if (zmq_msg_recv(static_cast<zmq_msg_t*>(f.raw()), router_, frames.empty() ? ZMQ_DONTWAIT : 0) <
        0)
      return !frames.empty();
    int more = zmq_msg_more(static_cast<zmq_msg_t*>(f.raw()));
    if (frames.size() < 4) frames.push_back(std::move(f));  // more than 4 is malformed anyway
    if (!more) break;
  }
  // frames[0] is the routing id the ROUTER added. Whatever does not belong
  // to the group is dropped; returning true means "a message was consumed".
  auto drop = [&](const std::string& why) {
    reject(why);
    return true;
  };
  if (frames.size() != 3)
    return drop("expected a header and a payload frame, got " +
                std::to_string(frames.size() - 1) + " frame(s)");
  if (frames[1].size() != sizeof(wire::Header))
    return drop("header frame of " + std::to_string(frames[1].size()) + " bytes, expected " +
                std::to_string(sizeof(wire::Header)) + " (not an oreg_ccl peer?)");
  wire::Header h;
  std::memcpy(&h, frames[1].data(), sizeof(h));
  if (h.magic != wire::kMagic || h.version != wire::kVersion)
    return drop("bad magic/version: not an oreg_ccl message");
  if (h.group != group_)
    return drop("group id " + std::to_string(h.group) + " is not this group's (" +
                std::to_string(group_) +
                "): a message from another job, group or from before a restart");
  if (h.src >= uint32_t(size_) || !remote_[h.src])
    return drop("sender claims rank " + std::to_string(h.src) +
                ", which is no remote member of this group");
  if (h.kind > static_cast<uint8_t>(wire::Kind::kAbortAck))
    return drop("unknown message kind " + std::to_string(h.kind));
  // From here on the message names our group and a member: if it is
  // inconsistent, that member is broken and the group must fail.
  std::string broken;
  if (!std::memchr(h.what, 0, sizeof(h.what)))
    broken = "an unterminated operation name";
  else if (frames[2].size() != h.chunk || h.chunk > h.bytes || h.offset > h.bytes - h.chunk)
    broken = "a chunk of " + std::to_string(frames[2].size()) + " bytes claiming " +
             std::to_string(h.chunk) + " bytes at offset " + std::to_string(h.offset) + " of " +
             std::to_string(h.bytes);
  if (!broken.empty()) {
    cancel("oreg_ccl: rank " + std::to_string(rank_) + " received a malformed message from rank " +
               std::to_string(h.src) + ": " + broken,
           /*propagate=*/true);
    return true;
  }
  if (h.kind == static_cast<uint8_t>(wire::Kind::kAbort)) {
    std::string why(static_cast<const char*>(frames[2].data()), frames[2].size());
    cancel("rank " + std::to_string(h.src) + " failed: " + why, /*propagate=*/false);
    peerFailed_[h.src].store(true);
    sendAbortAck(h.src);  // after cancel(): our group has failed when the sender hears of it
    notify();
    return true;
  }
  if (h.kind == static_cast<uint8_t>(wire::Kind::kAbortAck)) {
    peerFailed_[h.src].store(true);
    notify();
    return true;
  }
  // Each member sends over one connection for the group's lifetime. A new one
  // means libzmq reconnected after a drop (a network reset), and the message
  // that was on the old connection may be lost: fail rather than go on.
  std::string id(static_cast<const char*>(frames[0].data()), frames[0].size());
  if (routingIds_[h.src].empty()) {
    routingIds_[h.src] = id;
  } else if (routingIds_[h.src] != id) {
    cancel("oreg_ccl: rank " + std::to_string(h.src) + "'s connection to rank " +
               std::to_string(rank_) + " dropped and was re-established: a message may be lost",
           /*propagate=*/true);
    return true;
  }
  std::lock_guard<std::mutex> g(ioMutex_);
  arrivals_.push_back(Arrival{h, std::move(frames[2])});
  return true;
}

void ZmqTransport::readMonitor(int peer) {
  for (;;) {
    ZmqMessage event, address;
    if (zmq_msg_recv(static_cast<zmq_msg_t*>(event.raw()), monitors_[peer], ZMQ_DONTWAIT) < 0)
      return;
    zmq_msg_recv(static_cast<zmq_msg_t*>(address.raw()), monitors_[peer], 0);
    if (event.size() < 2) continue;
    uint16_t id;
    std::memcpy(&id, event.data(), sizeof(id));
    if (id == ZMQ_EVENT_CONNECTED) {
      connected_[peer].store(true);
      disconnectedAt_[peer].store(0);
    } else if (id == ZMQ_EVENT_DISCONNECTED) {
      disconnectedAt_[peer].store(nowNs());
    }
  }
}

void ZmqTransport::ioLoop() {
  std::vector<zmq_pollitem_t> items;
  items.push_back({router_, 0, ZMQ_POLLIN, 0});
  items.push_back({nullptr, wakeFd_, ZMQ_POLLIN, 0});
  std::vector<int> monitorPeer;
  for (int p = 0; p < size_; ++p) {
    if (!monitors_[p]) continue;
    items.push_back({monitors_[p], 0, ZMQ_POLLIN, 0});
    monitorPeer.push_back(p);
  }
  for (;;) {
    zmq_poll(items.data(), static_cast<int>(items.size()), 100);
    if (items[1].revents) {
      uint64_t v;
      (void)!read(wakeFd_, &v, sizeof(v));
    }
    bool abort = false, stop = false, drop = false, aborted = false;
    std::string abortWhy;
    {
      std::lock_guard<std::mutex> g(ioMutex_);
      std::swap(abort, abortPending_);
      abortWhy = abortWhy_;
      aborted = abortRequested_;
      stop = stopping_;
      std::swap(drop, dropSends_);
    }
    if (abort) sendAborts(abortWhy);
    if (drop) {
      // The group failed and a peer stopped reading: release the caller
      // buffers libzmq still holds by closing the DEALERs without lingering.
      // Our abort, queued behind that data, goes with them: send it again on
      // a connection of its own, which the peer reads once it runs again.
      std::lock_guard<std::mutex> g(sendMutex_);
      for (int p = 0; p < size_; ++p) {
        if (!dealers_[p]) continue;
        setOption(dealers_[p], ZMQ_LINGER, 0);
        closeDealer(p);
        connected_[p].store(false);  // unmonitored from here on: not waited for (awaitPeersFailed)
        if (!aborted) continue;
        try {
          void* d = zmq_socket(ctx_, ZMQ_DEALER);
          if (!d) continue;
          dealers_[p] = d;
          setOption(d, ZMQ_LINGER, kLingerMs);
          (void)zmq_connect(d, endpoints_[p].c_str());
        } catch (const std::exception&) {
          // best effort: the group failed already
        }
      }
    }
    if (drop && aborted) sendAborts(abortWhy);
    if (stop) return;
    bool got = false;
    while (receiveOne()) got = true;
    bool events = false;
    for (size_t i = 0; i < monitorPeer.size(); ++i) {
      if (items[2 + i].revents) {
        readMonitor(monitorPeer[i]);
        events = true;
      }
    }
    if (got || events) notify();
  }
}

// ---- the progress side -----------------------------------------------------------

void ZmqTransport::notify() {
  {
    std::lock_guard<std::mutex> g(notifyMutex_);
    ++events_;
  }
  notifyCv_.notify_all();
  if (notifyHook_) notifyHook_();
}

void ZmqTransport::wakeup() {
  woken_.store(true, std::memory_order_release);
  notify();
}

RequestPtr ZmqTransport::irecv(Channel ch, int src, uint64_t tag, const std::string& what,
                               size_t bytes, Sink sink, void* /*direct: pieces arrive by message*/) {
  return postRecv(ch, src, tag, what, bytes, std::move(sink), nullptr);
}

RequestPtr ZmqTransport::irecvAnyOf(uint64_t tag, const std::string& what, size_t bytes,
                                    Sink sink, std::shared_ptr<std::atomic<bool>> taken) {
  return postRecv(Channel::kP2P, kAnySource, tag, what, bytes, std::move(sink), std::move(taken));
}

RequestPtr ZmqTransport::postRecv(Channel ch, int src, uint64_t tag, const std::string& what,
                                  size_t bytes, Sink sink, std::shared_ptr<std::atomic<bool>> taken) {
  checkFailure();
  TORCH_CHECK((src >= 0 && src < size_ && remote_[src]) || (src == kAnySource && ch == Channel::kP2P),
              "oreg_ccl: rank ", src, " is not reachable over ZeroMQ from rank ", rank_);
  auto req = std::make_shared<Request>();
  req->peer = src;
  auto r = std::make_shared<PostedRecv>(
      PostedRecv{req, src, tag, wireWhat(what, sizeof(wire::Header::what)), bytes,
                 std::move(sink), nullptr, std::move(taken)});
  if (ch == Channel::kCollective)
    collRecvs_[src].push_back(r);
  else
    bindP2P(r);
  match();
  return req;
}

void ZmqTransport::bindP2P(const std::shared_ptr<PostedRecv>& r) {
  if (r->stale()) return;  // its other half took a message already
  // The earliest unmatched message with this (source, tag), like MPI.
  for (int p = 0; p < size_; ++p) {
    if (!remote_[p] || (r->src != kAnySource && r->src != p)) continue;
    for (auto& m : inbox_[slot(p, Channel::kP2P)]) {
      if (m->recv || m->tag != r->tag) continue;
      if (m->bytes != r->bytes) fail(sizeMismatchMessage(rank_, *r, p, m->bytes), false);
      r->take();  // not stale (checked above): ours
      m->recv = r;
      r->req->peer = p;
      return;
    }
  }
  p2pRecvs_.push_back(r);
}

void ZmqTransport::accept(Arrival&& a) {
  const wire::Header& h = a.header;
  const int src = static_cast<int>(h.src);
  const Channel ch = h.kind == static_cast<uint8_t>(wire::Kind::kP2P) ? Channel::kP2P
                                                                       : Channel::kCollective;
  auto& box = inbox_[slot(src, ch)];
  std::shared_ptr<Inbound> m;
  bool open = !box.empty() && box.back()->arrived < box.back()->bytes;
  if (h.offset == 0 && !open) {
    m = std::make_shared<Inbound>();
    m->tag = h.tag;
    m->bytes = h.bytes;
    m->what = h.what;
    box.push_back(m);
    if (ch == Channel::kP2P) {
      // A receive may be waiting for it already.
      for (auto it = p2pRecvs_.begin(); it != p2pRecvs_.end();) {
        auto& r = *it;
        if (r->stale()) {  // its other half, in another transport, took a message
          it = p2pRecvs_.erase(it);
          continue;
        }
        if ((r->src != src && r->src != kAnySource) || r->tag != h.tag) {
          ++it;
          continue;
        }
        if (r->bytes != h.bytes) fail(sizeMismatchMessage(rank_, *r, src, h.bytes), false);
        r->take();
        m->recv = r;
        r->req->peer = src;
        p2pRecvs_.erase(it);
        break;
      }
    }
  } else {
    m = open ? box.back() : nullptr;
    if (!m || h.offset != m->arrived || h.tag != m->tag || h.bytes != m->bytes)
      fail("oreg_ccl: rank " + std::to_string(rank_) + " received an out-of-order chunk from rank " +
               std::to_string(src) + " (offset " + std::to_string(h.offset) + " of " +
               std::to_string(h.bytes) + " bytes, tag " + std::to_string(h.tag) + ")",
           true);
  }
  m->arrived += h.chunk;
  m->chunks.push_back(std::move(a.payload));
}

bool ZmqTransport::deliver(Inbound& m) {
  bool progressed = false;
  while (!m.chunks.empty()) {
    ZmqMessage& c = m.chunks.front();
    if (c.size()) m.recv->sink(c.data(), m.delivered, c.size());
    m.delivered += c.size();
    m.chunks.pop_front();
    progressed = true;
  }
  return progressed;
}

bool ZmqTransport::match() {
  bool progressed = false;
  for (int src = 0; src < size_; ++src) {
    if (!remote_[src]) continue;
    // Collectives: strictly in order; the head message must be the expected one.
    auto& box = inbox_[slot(src, Channel::kCollective)];
    auto& q = collRecvs_[src];
    while (!box.empty()) {
      auto m = box.front();
      if (!m->recv) {
        if (q.empty()) break;
        auto r = q.front();
        if (m->tag != r->tag || m->what != r->what || m->bytes != r->bytes)
          fail(mismatchMessage(rank_, *r, src, m->what, m->bytes), true);
        q.pop_front();
        m->recv = r;
      }
      progressed |= deliver(*m);
      if (m->delivered < m->bytes) break;
      box.pop_front();
      completeRequest(*m->recv->req, src);
      progressed = true;
    }
    // Send/recv: matched messages, in any order of completion.
    auto& pbox = inbox_[slot(src, Channel::kP2P)];
    for (auto it = pbox.begin(); it != pbox.end();) {
      auto m = *it;
      if (!m->recv) {
        ++it;
        continue;
      }
      progressed |= deliver(*m);
      if (m->delivered < m->bytes) {
        ++it;
        continue;
      }
      it = pbox.erase(it);
      completeRequest(*m->recv->req, src);
      progressed = true;
    }
  }
  return progressed;
}

bool ZmqTransport::poll() {
  std::vector<RequestPtr> sent;
  {
    std::lock_guard<std::mutex> g(releasedMutex_);
    sent.swap(released_);
  }
  for (auto& req : sent) {
    --unsent_[req->peer];
    completeRequest(*req, req->peer);
  }
  checkFailure();
  std::vector<Arrival> got;
  {
    std::lock_guard<std::mutex> g(ioMutex_);
    got.swap(arrivals_);
  }
  for (auto& a : got) accept(std::move(a));
  bool progressed = match() || !got.empty() || !sent.empty();
  if (Clock::now() - lastPeerCheck_ > std::chrono::milliseconds(100)) {
    lastPeerCheck_ = Clock::now();
    checkPeers();
  }
  return progressed;
}

void ZmqTransport::progress(Clock::time_point until) {
  for (;;) {
    uint64_t seen;
    {
      std::lock_guard<std::mutex> g(notifyMutex_);
      seen = events_;
    }
    if (poll() || woken_.exchange(false)) return;
    auto now = Clock::now();
    if (now >= until) return;
    std::unique_lock<std::mutex> lock(notifyMutex_);
    notifyCv_.wait_until(lock, std::min(until, now + std::chrono::milliseconds(100)),
                         [&] { return events_ != seen; });
  }
}

void ZmqTransport::quiesce() {
  // Sends to live peers drain at network speed; libzmq keeps data for a dead
  // peer queued forever (for a reconnect), so after a while drop it.
  auto waitDrained = [&](Clock::duration d) {
    auto until = Clock::now() + d;
    while (chunksInFlight_.load() > 0 && Clock::now() < until) {
      std::unique_lock<std::mutex> lock(notifyMutex_);
      notifyCv_.wait_for(lock, std::chrono::milliseconds(10));
    }
    return chunksInFlight_.load() == 0;
  };
  if (waitDrained(std::chrono::seconds(2))) return;
  {
    std::lock_guard<std::mutex> g(ioMutex_);
    dropSends_ = true;
  }
  wakeIo();
  if (!waitDrained(std::chrono::seconds(10)))
    TORCH_WARN("oreg_ccl: rank ", rank_, ": ", chunksInFlight_.load(),
               " message chunks still held by libzmq after a failure");
}

void ZmqTransport::awaitPeersFailed(Clock::duration bound) {
  {
    std::lock_guard<std::mutex> g(ioMutex_);
    if (!abortRequested_ || stopping_) return;  // not our failure to announce
  }
  if (!acksDeadline_) acksDeadline_ = Clock::now() + bound;
  // A peer that left needs no word; one that does not answer (stopped, or cut
  // off) falls back to noticing the failure when it next reads our abort.
  auto waiting = [&] {
    for (int p = 0; p < size_; ++p)
      if (remote_[p] && !peerFailed_[p].load() && connected_[p].load() &&
          disconnectedAt_[p].load() == 0)
        return true;
    return false;
  };
  while (waiting() && Clock::now() < *acksDeadline_) {
    std::unique_lock<std::mutex> lock(notifyMutex_);
    notifyCv_.wait_for(lock, std::chrono::milliseconds(10));
  }
}

void ZmqTransport::checkPeers() {
  // A dropped connection matters only while we wait for that peer.
  p2pRecvs_.remove_if([](const std::shared_ptr<PostedRecv>& r) { return r->stale(); });
  std::vector<bool> involved(size_, false);
  for (int p = 0; p < size_; ++p) {
    // libzmq keeps a send to a dropped peer queued for a reconnect: so do we.
    if (!collRecvs_[p].empty() || unsent_[p] > 0) involved[p] = true;
    for (Channel ch : {Channel::kCollective, Channel::kP2P})
      for (auto& m : inbox_[slot(p, ch)])
        if (m->recv && m->delivered < m->bytes) involved[p] = true;
  }
  for (auto& r : p2pRecvs_) {
    if (r->src == kAnySource) std::fill(involved.begin(), involved.end(), true);
    else involved[r->src] = true;
  }
  const int64_t now = nowNs();
  for (int p = 0; p < size_; ++p) {
    int64_t at = remote_[p] && involved[p] ? disconnectedAt_[p].load() : 0;
    // Grace period: bytes the peer sent just before leaving may still be in
    // flight on its own connection to us.
    if (at == 0 || now - at < 500'000'000) continue;
    fail("oreg_ccl: rank " + std::to_string(p) + " (" + endpoints_[p] +
             ") closed its connection while rank " + std::to_string(rank_) +
             " was exchanging data with it: the process exited or was killed",
         true);
  }
}

// ---- failure ------------------------------------------------------------------------

std::string ZmqTransport::failure() const {
  std::lock_guard<std::mutex> g(errorMutex_);
  return error_;
}

void ZmqTransport::checkFailure() {
  if (!failed_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> g(errorMutex_);
  throwDist(error_);
}

void ZmqTransport::fail(const std::string& why, bool propagate) {
  cancel(why, propagate);
  std::lock_guard<std::mutex> g(errorMutex_);
  throwDist(error_);
}

void ZmqTransport::cancel(const std::string& why, bool propagate) {
  {
    std::lock_guard<std::mutex> g(errorMutex_);
    if (error_.empty()) error_ = why;
  }
  failed_.store(true, std::memory_order_release);
  // The first request to propagate sends the aborts, even when the failure
  // itself was recorded earlier without telling anyone (a local mismatch).
  bool send = false;
  if (propagate) {
    std::lock_guard<std::mutex> g(ioMutex_);
    if (!abortRequested_) {
      abortRequested_ = abortPending_ = send = true;
      abortWhy_ = why;
    }
  }
  if (send) wakeIo();
  wakeup();
}

}  // namespace openreg::ccl
