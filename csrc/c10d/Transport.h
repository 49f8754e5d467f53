// Transport: moves bytes between the ranks of one process group.
//
// The contract every transport (shared memory, ZeroMQ, routed) implements,
// and the only thing the algorithms in Algorithms.h see. Modelled on gloo's
// Pair/Buffer split: posting is non-blocking, completion is driven by
// progress(), and a failed transport rethrows its first error forever.
//
// Two channels per ordered pair of ranks:
//  - kCollective: messages are consumed strictly in order. Every rank runs
//    collectives in the same order, so the head message from a peer must be
//    the one the local rank expects; if its tag/description differ, the ranks
//    called different collectives and the transport raises a mismatch error.
//  - kP2P: user send/recv, matched by (source, tag) in posting order like MPI;
//    a message nobody asked for yet is buffered only when it blocks a posted
//    receive. Posting a send never blocks; one too large for the transport's
//    buffers completes once the receiver took it.
//
// Threading: isend/irecv/progress are called by one thread at a time: the
// backend's worker, or a caller running an operation inline (the backend's
// mutex orders the two). wakeup(), cancel() and failure() may be called from
// any thread.
// Ownership: the caller keeps send buffers alive until the request completes.
// Errors: c10::DistBackendError, naming the local rank, the peer and the op.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>

namespace openreg::ccl {

using Clock = std::chrono::steady_clock;

// now + timeout, saturated: a timeout of centuries (timedelta.max) must not
// wrap around into the past and time out at once.
inline Clock::time_point deadlineAfter(std::chrono::milliseconds timeout) {
  const auto now = Clock::now();
  const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now);
  return timeout >= room ? Clock::time_point::max() : now + timeout;
}

constexpr int kAnySource = -1;

// Offsets handed to a Sink are multiples of this, so pieces never split an
// element of any dtype (all element sizes divide 64).
constexpr size_t kPieceAlign = 64;

enum class Channel : uint8_t { kCollective = 0, kP2P = 1 };

// Receives consecutive pieces of an incoming message: `data` is valid only
// during the call (it may point straight into shared memory, which lets
// reductions read a peer's bytes without an intermediate copy).
using Sink = std::function<void(const void* data, size_t offset, size_t bytes)>;

// A posted send or receive. Completed (done == true) by progress().
struct Request {
  std::atomic<bool> done{false};
  int peer = -1;             // destination of a send, source of a receive
                             // (the matched rank once a kAnySource receive completes)
  std::exception_ptr error;  // set before done if the request failed
  // Runs once, on the progress thread, right after completion succeeds.
  std::function<void()> onComplete;
};
using RequestPtr = std::shared_ptr<Request>;

// Mark `req` done by `peer` and run its completion (progress thread), which
// the request then drops (with whatever it captured).
void completeRequest(Request& req, int peer);
// Run `fn` once `req` completes: at once if it already has (inside
// isend/irecv), else from completeRequest. Progress thread.
void onDone(const RequestPtr& req, std::function<void()> fn);

// A receive a transport holds until its message arrives.
struct PostedRecv {
  RequestPtr req;
  int src;  // or kAnySource
  uint64_t tag;
  std::string what;
  size_t bytes;
  Sink sink;
  char* direct = nullptr;  // see Transport::irecv
  // Set on each half of a receive from any source in a group that spans
  // transports (RoutedTransport posts one half in each): the first half to
  // match a message takes it, the other is dropped where it would match.
  std::shared_ptr<std::atomic<bool>> taken;
  bool stale() const { return taken && taken->load(); }
  bool take() { return !taken || !taken->exchange(true); }
};

// `what` as it travels in a message header field of `field` bytes (NUL
// included): as is when it fits, else cut short with a digest of the whole,
// so descriptions that differ only past the cut (a coalesced operation's
// trailing reduce op or dtype) still compare unequal.
std::string wireWhat(const std::string& what, size_t field);
// Writes wireWhat(what, field) into a header's field, NUL-terminated; copies
// nothing more than the field when `what` fits (every message's header).
void putWireWhat(char* dst, size_t field, const std::string& what);

// The errors every transport raises in the same words (thrown by the caller).
std::string mismatchMessage(int rank, const PostedRecv& expected, int src, const std::string& what,
                            size_t bytes);
std::string sizeMismatchMessage(int rank, const PostedRecv& recv, int src, size_t sent);
// Transport::unreceived()'s words for a message nobody received.
std::string unreceivedMessage(int src, const std::string& what, size_t bytes);

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The process group's number for this transport's rank `index`, for error
  // messages (a host's shared memory and a view number their ranks 0..k-1).
  virtual int groupRank(int index) const { return index; }

  // Queue `bytes` of `data` for `dst`; returns at once. `what` describes the
  // operation (e.g. "allreduce#3 1024 x Float SUM") and travels with the
  // message so a receiver can name both sides of a mismatch.
  virtual RequestPtr isend(Channel channel, int dst, uint64_t tag, const std::string& what,
                           const void* data, size_t bytes) = 0;

  // Expect exactly `bytes` from `src` (or kAnySource on kP2P) with `tag`;
  // the payload is delivered to `sink` piece by piece. `direct`, when given,
  // is where `sink` would copy the whole message (contiguous): a transport
  // may write it there itself instead (e.g. straight from the sender).
  virtual RequestPtr irecv(Channel channel, int src, uint64_t tag, const std::string& what,
                           size_t bytes, Sink sink, void* direct = nullptr) = 0;

  // Advance every posted request. Returns once something progressed, wakeup()
  // was called or `until` passed; in between it blocks in the kernel (after a
  // short spin) instead of burning a core. Throws the transport's error.
  virtual void progress(Clock::time_point until) = 0;
  // The same, when `until` is only a polling bound: `deadline` is the earliest
  // deadline of the operations waiting, where a transport that blocks on a
  // peer inside one call (a shared copy) gives up.
  virtual void progress(Clock::time_point until, Clock::time_point deadline) { progress(until); }

  // Make a blocked progress() return (any thread).
  virtual void wakeup() = 0;

  // Fail the transport with `why`: pending and later calls throw. With
  // `propagate` the failure is published to every rank of the group, whose
  // transports fail too instead of waiting for their timeout.
  virtual void cancel(const std::string& why, bool propagate) = 0;

  // The first error of this transport (including one published by another
  // rank, once noticed), or "" while healthy. Any thread.
  virtual std::string failure() const = 0;

  // After cancel(): return once the transport no longer reads any caller
  // buffer (a transport that sends from them asynchronously waits, bounded,
  // for those sends to be released), so failed operations can hand their
  // tensors back. Called by the progress thread.
  virtual void quiesce() {}

  // After cancel(propagate) for a failed operation, before its error reaches
  // the user: return once every peer still connected has failed its side too
  // (or `bound` passed), so a call a peer makes after it learns of our error
  // cannot complete on data we sent before failing. Shared memory fails its
  // peers synchronously; a network transport waits for acknowledgements.
  // Called by the progress thread.
  virtual void awaitPeersFailed(Clock::duration bound) {}

  // Once the owner has no operation left: a message on channel `ch` a peer
  // sent that nothing here received, as "rank 0's broadcast#3 ... (N bytes)", or
  // "" if none. Ranks that called different collectives (each naming itself
  // a broadcast's root) can return without an error, and a group destroyed
  // right after would never report it. Best effort: a message still in
  // flight is not seen. Called by the thread that shuts the group down.
  // (On the p2p channel: a send no receive matched, whose sender went on.)
  virtual std::string unreceived(Channel ch) { return ""; }

  // The owner is done with the transport (the group shut down): release the
  // connections, first handing what was already sent to the peers, bounded.
  // A process may exit right after shutdown() returns, and a peer still
  // waiting for our last message (a barrier's) must get it. Only failure()
  // and cancel() remain valid afterwards. Idempotent.
  virtual void shutdown() {}
};

// Rendezvous through the process group's store, as callbacks so transports
// need no torch header: set(key, value), and get(key), which blocks until the
// key is set or the group's timeout passes (then it throws).
struct Rendezvous {
  std::function<void(const std::string&, const std::string&)> set;
  std::function<std::string(const std::string&)> get;

  // The same store, with every key under `prefix`.
  Rendezvous prefixed(const std::string& prefix) const {
    return {[s = set, prefix](const std::string& k, const std::string& v) { s(prefix + k, v); },
            [g = get, prefix](const std::string& k) { return g(prefix + k); }};
  }
};

// Wait for `req`, driving progress, until `deadline`; throws on error or
// timeout (`what` names the operation in the timeout message).
void waitFor(Transport& transport, const RequestPtr& req, Clock::time_point deadline,
             const std::string& what);

}  // namespace openreg::ccl
