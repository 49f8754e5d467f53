// ShmTransport: the Transport of ranks on one host, over POSIX shared memory.
//
// Each rank owns one segment holding the rings *into* it: for every peer and
// channel, a single-producer/single-consumer byte ring (head written by the
// reader, tail by the writer). A sender copies into the receiver's ring; the
// receiver's Sink consumes straight out of it (reductions read shared memory
// directly). Messages are a 192-byte header then the payload padded to 64
// bytes, so every piece a Sink sees starts element-aligned.
//
// Single copy: a message of at least OREG_CCL_SINGLE_COPY_BYTES
// puts only its header in the ring, with the sender's address; the receiver
// reads the payload straight out of the sender's memory (process_vm_readv,
// Linux's cross-memory attach) into its destination, or in cache-sized chunks
// into a reduction, and then acknowledges it in the ring, which completes the
// send. One memcpy instead of two. Used only when every rank could read every
// peer at connect time (same pid namespace, ptrace permitted). A send/recv
// message goes single-copy only if it does not fit the p2p ring, so its
// send completes only once the receiver took it either way (one in front of
// a receive for another tag from the same peer is read into host memory).
//
// Peer device memory: a single-copy payload (or shared-copy destination) in
// openreg device memory carries the driver's IPC handle of it, and the peer
// copies through its own mapping of that device memory (memcpy, reductions
// read it in place) instead of process_vm_readv/writev.
//
// Shared copy: a single-copy message of at least two 512 KiB chunks into a
// contiguous destination is copied by both sides. The receiver publishes the
// destination in the ring and rings the sender; both claim chunks from one
// counter (the sender writes its chunks with process_vm_writev) until none is
// left. A sender that is only waiting for the acknowledgement (a broadcast
// root, say) so lends its core; a busy one never joins and the receiver
// copies everything, as before.
//
// Waiting: each segment has a doorbell (a 32-bit futex word). Writers ring
// the receiver's doorbell after publishing data, readers ring the writer's
// after freeing space, and a rank with nothing to do spins briefly and then
// sleeps in FUTEX_WAIT on its own doorbell (an eventcount: only a doorbell
// with sleepers costs a syscall). So 8 ranks on 2 cores block, not spin.
//
// Lifetime of /dev/shm names: segments are created 0600 with a name built
// from a store-agreed random id, mapped by every rank, and unlinked as soon as
// the store shows every rank mapped them: a job killed afterwards leaves
// nothing behind. Rank 0's segment also carries the group's failure slot.
//
// Threading: see Transport. The segments stay mapped until destruction, so
// wakeup() from another thread is always safe while the object lives.
#pragma once

#include <deque>
#include <list>
#include <mutex>
#include <vector>

#include "../../runtime/driver/Driver.h"
#include "../Transport.h"

namespace openreg::ccl {

struct ShmSegmentHeader;
struct ShmRing;
struct ShmMessageHeader;

class ShmTransport final : public Transport {
 public:
  // Collective: every rank of the group calls it with the same rendezvous.
  // `groupRanks[i]`: the process group's number for rank i, in messages (a
  // host's ranks of a group that spans hosts); empty: the same numbers.
  static std::shared_ptr<ShmTransport> connect(int rank, int size, const Rendezvous& rdv,
                                               std::vector<int> groupRanks = {});
  ~ShmTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int groupRank(int index) const override {
    return groupRanks_.empty() ? index : groupRanks_.at(index);
  }
  RequestPtr isend(Channel channel, int dst, uint64_t tag, const std::string& what,
                   const void* data, size_t bytes) override;
  RequestPtr irecv(Channel channel, int src, uint64_t tag, const std::string& what, size_t bytes,
                   Sink sink, void* direct = nullptr) override;
  // A receive from any of this transport's ranks that is one half of a
  // receive from any source across transports (PostedRecv::taken).
  RequestPtr irecvAnyOf(uint64_t tag, const std::string& what, size_t bytes, Sink sink,
                        void* direct, std::shared_ptr<std::atomic<bool>> taken);
  void progress(Clock::time_point until) override;
  // A shared copy stuck on a stopped sender times out at `deadline`.
  void progress(Clock::time_point until, Clock::time_point deadline) override;
  void wakeup() override;
  void cancel(const std::string& why, bool propagate) override;
  std::string failure() const override;
  void quiesce() override;
  std::string unreceived(Channel ch) override;
  // Unmaps the peers' device memory this rank mapped (a peer that exited
  // stays resident while mapped).
  void shutdown() override;
  // Large collective messages are read straight from the sender (see above).
  bool singleCopy() const { return singleCopyBytes_ > 0; }
  // Chunks of peers' shared copies this rank wrote (any thread; for tests).
  uint64_t sharedChunksWritten() const { return sharedChunksWritten_.load(std::memory_order_relaxed); }
  // Payload bytes this rank read from / wrote into its mapping of a peer's
  // device memory (any thread; for tests).
  uint64_t peerMappedRead() const { return peerMappedRead_.load(std::memory_order_relaxed); }
  uint64_t peerMappedWritten() const { return peerMappedWritten_.load(std::memory_order_relaxed); }

 private:
  struct Mapping {
    void* base = nullptr;
    size_t bytes = 0;
    ShmSegmentHeader* header() const { return static_cast<ShmSegmentHeader*>(base); }
  };
  struct PendingSend {
    RequestPtr req;
    std::vector<char> header;  // the ShmMessageHeader
    const char* data;
    size_t bytes;
    bool singleCopy;     // only the header goes through the ring
    size_t written = 0;  // bytes of header + padded payload in the ring so far
  };
  // A single-copy send whose payload the receiver has not acknowledged yet.
  struct AwaitingAck {
    uint64_t seq;  // completes once the ring's `acked` reaches it
    RequestPtr req;
    const char* data;  // the payload, for a shared copy
    size_t bytes;
  };
  // A p2p message that arrived before its receive (kept in host memory).
  struct Unexpected {
    int src;
    uint64_t tag;
    std::vector<char> data;
    bool complete = false;
    std::shared_ptr<PostedRecv> claimedBy;
  };
  // The message currently being read from one inbound ring.
  struct Inbound {
    bool active = false;
    uint64_t tag = 0;
    size_t bytes = 0;
    size_t consumed = 0;  // of the padded payload
    std::shared_ptr<PostedRecv> recv;  // null while filling an Unexpected
    Unexpected* unexpected = nullptr;
    uint64_t senderAddress = 0;  // of a single-copy payload, in the sender's memory
    const char* peerMemory = nullptr;  // that payload mapped here (openreg device memory)
  };
  // A peer's device memory mapped into this process (base null: cannot be,
  // for good, or until retryAt after running out of descriptors or memory).
  struct PeerArena {
    int fd;
    uint64_t inode;
    uint64_t bytes;
    char* base;
    Clock::time_point retryAt{};  // the epoch: try at once
  };

  ShmTransport(int rank, int size);
  void createOwnSegment(const std::string& name);
  size_t ringBytes(Channel ch) const;
  size_t ringOffset(int src, Channel ch) const;
  ShmRing* ring(int owner, int src, Channel ch) const;
  int slot(int peer, Channel ch) const { return peer * 2 + static_cast<int>(ch); }

  RequestPtr postRecv(Channel ch, int src, uint64_t tag, const std::string& what, size_t bytes,
                      Sink sink, void* direct, std::shared_ptr<std::atomic<bool>> taken);
  bool pollAll();
  bool pushSends(int dst, Channel ch);
  bool pullRecvs(int src, Channel ch);
  bool startMessage(int src, Channel ch, Inbound& in, const ShmMessageHeader& h);
  void readFromSender(int src, Channel ch, const Inbound& in);
  // `in` was received whole: complete its receive, or its buffered copy.
  void finishMessage(int src, Inbound& in);
  // A buffered p2p message is complete: hand it to its receive, if posted.
  void arrived(int src, Unexpected* u);
  // Fails the group: process_vm_readv/writev to `peer` failed with `err`.
  [[noreturn]] void failPeerIo(int err, const std::string& action, int peer, pid_t pid);
  // The IPC handle peers map `p` with: fd -1 unless p is openreg device
  // memory and OREG_CCL_PEER_MAPPING is on.
  static orIpcMemHandle deviceHandleOf(const void* p);
  // Where `bytes` at `handle` (the peer's device memory; its pid is taken
  // from the peer's segment) are mapped here; null: use process_vm_readv/writev
  // (not device memory, mapping off, or the handle cannot be opened).
  char* peerMemory(int peer, orIpcMemHandle handle, uint64_t bytes);
  void unmapPeerArenas();
  // Bytes [off, off + n) of the sender's payload into `to`: a memcpy from its
  // mapped device memory, else process_vm_readv.
  void readPeer(int src, const Inbound& in, char* to, size_t off, size_t n);
  void readShared(int src, ShmRing* rg, const Inbound& in);
  bool collectAcks(int dst, Channel ch);
  bool writeShare(int dst, ShmRing* rg, const AwaitingAck& a);
  void sleepOnDoorbell(uint32_t bell, Clock::duration timeout);
  bool probeSingleCopy() const;
  void ring(int peer);  // ring a peer's doorbell
  void checkFailure();
  [[noreturn]] void sizeMismatch(const PostedRecv& r, int src, size_t sent);
  [[noreturn]] void fail(const std::string& why, bool propagate);
  void checkPeersAlive();

  const int rank_;
  const int size_;
  std::vector<int> groupRanks_;  // see connect()
  const long spinUs_;
  size_t collRing_ = 0, p2pRing_ = 0, segmentBytes_ = 0;
  std::string ownName_;  // non-empty until unlinked
  std::vector<Mapping> maps_;  // per rank (own included)

  // Collective messages this large go single-copy; 0: off (some rank cannot
  // read some peer's memory, or OREG_CCL_SINGLE_COPY_BYTES=0).
  size_t singleCopyBytes_ = 0;

  // Progress-thread state.
  std::vector<std::deque<PendingSend>> sends_;  // per slot(dst, ch)
  std::vector<uint64_t> singleCopySent_;        // per slot(dst, ch)
  std::vector<std::deque<AwaitingAck>> awaitingAck_;  // per slot(dst, ch)
  std::vector<char> scratch_;  // single-copy chunks on their way into a reduction
  std::vector<std::vector<PeerArena>> peerArenas_;  // per src, opened on first use
  std::vector<uint64_t> sendTail_;             // our cached tail of each outbound ring
  std::vector<Inbound> inbound_;                // per slot(src, ch)
  std::vector<uint64_t> recvHead_;             // our cached head of each inbound ring
  std::vector<std::deque<std::shared_ptr<PostedRecv>>> collRecvs_;  // per src, FIFO
  std::list<std::shared_ptr<PostedRecv>> p2pRecvs_;                 // posting order
  std::list<Unexpected> unexpected_;
  Clock::time_point lastLivenessCheck_;
  Clock::time_point deadline_ = Clock::time_point::max();  // of the operation progress() waits for

  // Cross-thread state.
  std::atomic<bool> woken_{false};
  std::atomic<bool> failed_{false};
  std::atomic<uint64_t> sharedChunksWritten_{0};
  std::atomic<uint64_t> peerMappedRead_{0};
  std::atomic<uint64_t> peerMappedWritten_{0};
  mutable std::mutex errorMutex_;
  std::string error_;  // GUARDED_BY(errorMutex_): first error wins
};

}  // namespace openreg::ccl
