// ZmqTransport: the Transport between ranks on different hosts, over ZeroMQ
// (libzmq's C API, TCP; no Python anywhere in the data path).
//
// Sockets: every rank binds one ROUTER socket on the address of BindAddress.h
// (an ephemeral port, published in the c10d store) and, at group creation,
// connects one DEALER socket to each peer's ROUTER. Per ordered pair that is
// one TCP connection, so messages between two ranks arrive in order; the two
// channels are told apart by the header's kind. Group creation waits until
// every DEALER is connected: a peer that never publishes its address, or
// cannot be reached, fails construction with a timeout error naming it.
//
// Threads: libzmq sockets are single-threaded. Our I/O thread owns the
// ROUTER (receiving) and the monitors; the DEALERs are used under a mutex by
// whoever sends (the progress side, straight from isend: no hand-off to our
// I/O thread on the way out) and by the I/O thread for aborts.
// Below that, libzmq's own I/O threads do the TCP work: the ROUTER's
// connections on one, the DEALERs' on the others (OREG_CCL_ZMQ_IO_THREADS), so
// a rank receives and sends at once (2 hosts x 1 rank, 16 MiB sendrecv and
// all_to_all: ~10-25% faster than with one).
// isend() queues the payload on the DEALER in chunks: small messages are
// copied, larger ones are sent zero-copy from the caller's buffer; either
// completes when libzmq releases the last chunk (once it is written to the
// socket; never waiting for the receive). The I/O thread validates every
// incoming message (Wire.h), queues it, and notifies the progress side, whose
// thread matches messages to posted receives and feeds the Sinks straight
// from libzmq's buffers (no extra copy).
//
// Failures: cancel(propagate) sends an abort message to every peer, which
// each acknowledges once its own group has failed (awaitPeersFailed waits for
// that); a peer
// whose connection drops while we exchange data with it fails the group
// naming it (a killed process closes its sockets at once); a send libzmq
// refuses fails the group at once; anything else ends in the collective's
// timeout.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "../Transport.h"
#include "Wire.h"

namespace openreg::ccl {

// Owns one zmq_msg_t (64 opaque bytes; moved only with zmq_msg_move).
class ZmqMessage {
 public:
  ZmqMessage();
  explicit ZmqMessage(size_t bytes);
  // Refers to `data` without copying; libzmq calls release(data, hint) when done.
  ZmqMessage(void* data, size_t bytes, void (*release)(void*, void*), void* hint);
  ZmqMessage(ZmqMessage&& other) noexcept;
  ZmqMessage& operator=(ZmqMessage&& other) noexcept;
  ZmqMessage(const ZmqMessage&) = delete;
  ~ZmqMessage();
  void* data();
  size_t size() const;
  void* raw() { return storage_; }

 private:
  alignas(8) unsigned char storage_[64];
};

class ZmqTransport final : public Transport {
 public:
  // Collective over the whole group: every rank calls it. `remote[p]` marks
  // the peers this transport serves (the ranks on other hosts). `notify` is
  // called from the I/O thread whenever progress() may have work, so a caller
  // blocked elsewhere (RoutedTransport) can wake up.
  static std::shared_ptr<ZmqTransport> connect(int rank, int size, std::vector<bool> remote,
                                               const Rendezvous& rdv,
                                               std::chrono::milliseconds timeout,
                                               std::function<void()> notify = nullptr);
  ~ZmqTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  RequestPtr isend(Channel channel, int dst, uint64_t tag, const std::string& what,
                   const void* data, size_t bytes) override;
  RequestPtr irecv(Channel channel, int src, uint64_t tag, const std::string& what, size_t bytes,
                   Sink sink, void* direct = nullptr) override;
  // A receive from any of this transport's ranks that is one half of a
  // receive from any source across transports (PostedRecv::taken).
  RequestPtr irecvAnyOf(uint64_t tag, const std::string& what, size_t bytes, Sink sink,
                        std::shared_ptr<std::atomic<bool>> taken);
  using Transport::progress;
  void progress(Clock::time_point until) override;
  void wakeup() override;
  void cancel(const std::string& why, bool propagate) override;
  std::string failure() const override;
  void quiesce() override;
  void awaitPeersFailed(Clock::duration bound) override;
  std::string unreceived(Channel ch) override;
  void shutdown() override;

  // One non-blocking round of progress; true if anything moved. Throws the
  // transport's error.
  bool poll();
  // Messages dropped because they did not belong to this group.
  uint64_t rejected() const { return rejected_.load(); }
  uint64_t groupId() const { return group_; }
  const std::string& endpoint(int rank) const { return endpoints_.at(rank); }

 private:
  // A logical message from one peer, assembled from its chunks.
  struct Inbound {
    uint64_t tag;
    size_t bytes;
    std::string what;
    size_t arrived = 0;    // payload bytes received
    size_t delivered = 0;  // payload bytes handed to the sink
    std::deque<ZmqMessage> chunks;
    std::shared_ptr<PostedRecv> recv;  // null until matched
  };
  struct Arrival {
    wire::Header header;
    ZmqMessage payload;
  };
  struct Outgoing {
    int dst;
    ZmqMessage header;
    ZmqMessage payload;
  };

  ZmqTransport(int rank, int size, std::vector<bool> remote, std::function<void()> notify);
  int slot(int peer, Channel ch) const { return peer * 2 + static_cast<int>(ch); }
  ZmqMessage makeHeader(wire::Kind kind, uint64_t tag, const std::string& what, size_t bytes,
                        size_t offset, size_t chunk) const;
  // Sends `out` on its DEALER from the calling thread (under sendMutex_).
  void send(Outgoing&& out);

  // Our I/O thread (sendOrDrop: any thread holding sendMutex_).
  void ioLoop();
  bool receiveOne();
  void reject(const std::string& why);
  void readMonitor(int peer);
  // Holding sendMutex_; false if libzmq refused a frame.
  bool sendOrDrop(Outgoing& out);

  // The progress side: whichever thread drives the transport.
  RequestPtr postRecv(Channel ch, int src, uint64_t tag, const std::string& what, size_t bytes,
                      Sink sink, std::shared_ptr<std::atomic<bool>> taken);
  void accept(Arrival&& a);
  bool match();
  bool deliver(Inbound& m);
  void bindP2P(const std::shared_ptr<PostedRecv>& r);
  void checkPeers();
  void checkFailure();
  [[noreturn]] void fail(const std::string& why, bool propagate);

  void notify();
  void wakeIo();  // make the I/O thread look at its queues (any thread)
  // A message outside the data stream (caller holds sendMutex_); a peer
  // without a connection is skipped.
  void sendControl(int peer, wire::Kind kind, const char* what, const std::string& payload);
  // An abort message to every remote peer (I/O thread).
  void sendAborts(const std::string& why);
  void sendAbortAck(int peer);  // I/O thread
  void closeDealer(int peer);  // I/O thread, or after it stopped
  static void releaseChunk(void* data, void* hint);

  const int rank_;
  const int size_;
  const std::vector<bool> remote_;
  const std::function<void()> notifyHook_;
  const size_t chunkBytes_;
  uint64_t group_ = 0;
  std::vector<std::string> endpoints_;  // per rank

  void* ctx_ = nullptr;
  void* router_ = nullptr;
  // Per rank (null for local ranks). Sends come from the progress side and
  // aborts from the I/O thread, so every use of a DEALER holds sendMutex_.
  std::mutex sendMutex_;
  std::vector<void*> dealers_;   // GUARDED_BY(sendMutex_) once the I/O thread runs
  std::vector<void*> monitors_;  // PAIR sockets receiving each DEALER's events
  int wakeFd_ = -1;              // eventfd: wakes the I/O thread
  std::thread io_;

  // Shared between the I/O thread and the others.
  std::mutex ioMutex_;
  std::vector<Arrival> arrivals_;  // GUARDED_BY(ioMutex_)
  bool abortPending_ = false;      // GUARDED_BY(ioMutex_)
  bool abortRequested_ = false;    // GUARDED_BY(ioMutex_): aborts are sent once
  std::string abortWhy_;           // GUARDED_BY(ioMutex_)
  bool stopping_ = false;          // GUARDED_BY(ioMutex_)
  std::vector<std::atomic<int64_t>> disconnectedAt_;  // ns (steady clock), 0: connected
  std::vector<std::atomic<bool>> connected_;
  // Per rank: its group failed too (it aborted, or acknowledged our abort).
  std::vector<std::atomic<bool>> peerFailed_;
  std::optional<Clock::time_point> acksDeadline_;  // progress thread: one bound per failure
  std::atomic<uint64_t> rejected_{0};
  bool dropSends_ = false;  // GUARDED_BY(ioMutex_): close the DEALERs, dropping queued data
  // Zero-copy sends: chunks libzmq still holds, and finished requests for the
  // progress thread to complete.
  std::atomic<int64_t> chunksInFlight_{0};
  std::mutex releasedMutex_;
  std::vector<RequestPtr> released_;  // GUARDED_BY(releasedMutex_)

  std::mutex notifyMutex_;
  std::condition_variable notifyCv_;
  uint64_t events_ = 0;  // GUARDED_BY(notifyMutex_)
  std::atomic<bool> woken_{false};

  // Progress-thread state.
  std::vector<std::deque<std::shared_ptr<Inbound>>> inbox_;  // per slot(src, ch), arrival order
  std::vector<std::deque<std::shared_ptr<PostedRecv>>> collRecvs_;  // per src
  std::vector<int> unsent_;  // per dst: sends libzmq has not released yet
  std::vector<std::string> routingIds_;  // I/O thread: each remote rank's connection (ROUTER id)
  std::list<std::shared_ptr<PostedRecv>> p2pRecvs_;                 // posting order
  Clock::time_point lastPeerCheck_;

  std::atomic<bool> failed_{false};
  mutable std::mutex errorMutex_;
  std::string error_;  // GUARDED_BY(errorMutex_): first error wins
};

}  // namespace openreg::ccl
