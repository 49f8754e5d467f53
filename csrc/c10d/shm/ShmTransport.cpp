#include "ShmTransport.h"

#include <c10/util/Exception.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <thread>

#include "../Config.h"
#include "../Copy.h"

namespace openreg::ccl {

constexpr size_t kHeaderArea = 4096;
// Room for the operation's description that receivers compare (a coalesced
// operation's list of tensors is long); a multiple of 64 keeps payloads aligned.
constexpr size_t kMessageHeader = 192;
constexpr uint32_t kMagic = 0x0CC3u;  // changes with the header's layout
constexpr size_t kFailureChars = 1024;

struct ShmSegmentHeader {
  std::atomic<uint32_t> doorbell;  // futex word: bumped on every event for this rank
  std::atomic<uint32_t> sleepers;  // ranks/threads blocked on doorbell
  int32_t pid;
  uint64_t selfBase;  // where the owner mapped this segment (single-copy probe)
  // Group failure slot, used in rank 0's segment: 0 none, 1 being written, 2 set.
  std::atomic<uint32_t> failState;
  int32_t failRank;
  char failure[kFailureChars];
};
static_assert(sizeof(ShmSegmentHeader) <= kHeaderArea);

struct ShmRing {
  alignas(64) std::atomic<uint64_t> head;  // bytes consumed (reader)
  alignas(64) std::atomic<uint64_t> tail;  // bytes published (writer)
  // Single-copy messages (reader): how many are done, and whether one is being
  // read out of the writer's memory right now.
  alignas(64) std::atomic<uint64_t> acked;
  std::atomic<uint32_t> reading;
  // Shared copy of the single-copy message being read (see the header): the
  // reader publishes its destination, then both sides claim chunks.
  alignas(64) std::atomic<uint64_t> claim;  // (message number << 32) | next chunk
  std::atomic<uint64_t> copied;             // chunks finished, by either side
  std::atomic<uint64_t> destination;        // in the reader's memory
  // A destination in openreg device memory: its IPC handle (fd -1 otherwise),
  // so the writer copies into its mapping of it instead of process_vm_writev.
  // Written before `claim` is released, read by a writer holding a claim.
  orIpcMemHandle destinationDevice;
  char data[] __attribute__((aligned(64)));
};
static_assert(sizeof(ShmRing) == 256);

struct ShmMessageHeader {
  uint64_t tag;
  uint64_t bytes;
  uint64_t senderAddress;  // of a single-copy payload in the sender's memory, else 0
  // A single-copy payload in openreg device memory: the driver's IPC handle
  // (fd -1 otherwise), so the receiver can map it instead.
  orIpcMemHandle device;
  uint32_t src;
  uint32_t magic;
  char what[kMessageHeader - 64];  // wireWhat: a long description cut short, with a digest
};
static_assert(sizeof(ShmMessageHeader) == kMessageHeader);

namespace {

size_t roundUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts) {
  // Not FUTEX_PRIVATE: the word is shared between processes.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}

inline void cpuRelax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

// A killed process stays a zombie until its parent reaps it, and kill(pid, 0)
// still succeeds on a zombie: look at its state too.
bool processAlive(pid_t pid) {
  if (kill(pid, 0) != 0) return errno != ESRCH;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "r");
  if (!f) return true;
  char buf[512] = {0};
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  const char* close = std::strrchr(buf, ')');  // the name may contain spaces
  if (n == 0 || !close || close[1] == 0) return true;
  char state = close[2];
  return state != 'Z' && state != 'X';
}

// Shared copies move chunks of this size; messages of at least two chunks
// into a contiguous destination are shared. The sender writes a chunk in
// pieces and stops between them once the reader closed the offer (failure).
constexpr size_t kShareChunk = 512 << 10;
constexpr size_t kSharePiece = 64 << 10;
constexpr uint64_t kOfferClosed = 0xffffffffu;  // claim index after a failure

// A ring's `claim` word: the message number (mod 2^32) and the next chunk.
constexpr uint64_t claimWord(uint64_t number, uint64_t index) { return (number << 32) | index; }
constexpr bool sameMessage(uint64_t word, uint64_t number) { return (word >> 32) == (number & 0xffffffffu); }
constexpr uint64_t claimIndex(uint64_t word) { return word & 0xffffffffu; }

bool offerClosed(const std::atomic<uint64_t>& claim, uint64_t number) {
  const uint64_t w = claim.load(std::memory_order_acquire);
  return sameMessage(w, number) && claimIndex(w) == kOfferClosed;
}

size_t chunksOf(size_t bytes) { return (bytes + kShareChunk - 1) / kShareChunk; }

// Claims the next chunk of message `number` (mod 2^32), or returns `chunks`
// if none is left or the ring offers another message by now.
uint64_t claimChunk(std::atomic<uint64_t>& claim, uint64_t number, uint64_t chunks) {
  uint64_t w = claim.load(std::memory_order_acquire);
  for (;;) {
    if (!sameMessage(w, number) || claimIndex(w) >= chunks) return chunks;
    if (claim.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_acquire))
      return claimIndex(w);
  }
}

// Copy between linear memory and a ring's data area, wrapping at `cap`.
void toRing(char* ring, size_t cap, uint64_t pos, const char* src, size_t n) {
  size_t at = pos % cap, first = std::min(n, cap - at);
  std::memcpy(ring + at, src, first);
  if (n > first) std::memcpy(ring, src + first, n - first);
}
void fromRing(const char* ring, size_t cap, uint64_t pos, char* dst, size_t n) {
  size_t at = pos % cap, first = std::min(n, cap - at);
  std::memcpy(dst, ring + at, first);
  if (n > first) std::memcpy(dst + first, ring, n - first);
}

std::string randomId() {
  std::random_device rd;
  std::ostringstream s;
  s << std::hex << ((uint64_t(rd()) << 32) ^ rd()) << std::dec << "_" << getpid();
  return s.str();
}

[[noreturn]] void throwDist(const std::string& msg) {
  throw c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, msg);
}

}  // namespace

ShmTransport::ShmTransport(int rank, int size)
    : rank_(rank), size_(size), spinUs_(config().spinUsFor(size)) {
  collRing_ = roundUp(std::max<size_t>(config().collRingBytes, 4096), kPieceAlign);
  p2pRing_ = roundUp(std::max<size_t>(config().p2pRingBytes, 4096), kPieceAlign);
  segmentBytes_ = kHeaderArea + size_t(size) * (2 * sizeof(ShmRing) + collRing_ + p2pRing_);
  maps_.resize(size);
  sends_.resize(2 * size);
  sendTail_.assign(2 * size, 0);
  inbound_.resize(2 * size);
  peerArenas_.resize(size);
  recvHead_.assign(2 * size, 0);
  collRecvs_.resize(size);
  singleCopySent_.assign(2 * size, 0);
  awaitingAck_.resize(2 * size);
  lastLivenessCheck_ = Clock::now();
}

std::shared_ptr<ShmTransport> ShmTransport::connect(int rank, int size, const Rendezvous& rdv,
                                                    std::vector<int> groupRanks) {
  std::shared_ptr<ShmTransport> t(new ShmTransport(rank, size));
  t->groupRanks_ = std::move(groupRanks);
  // One random id per group instance: names never collide across jobs,
  // groups or restarts, and nobody can guess them.
  std::string id;
  if (rank == 0) {
    id = randomId();
    rdv.set("shm_id", id);
  } else {
    id = rdv.get("shm_id");
  }
  auto nameOf = [&](int r) { return "/oreg_ccl_" + id + "_" + std::to_string(r); };
  t->createOwnSegment(nameOf(rank));
  rdv.set("created/" + std::to_string(rank), "1");
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    rdv.get("created/" + std::to_string(r));
    int fd = shm_open(nameOf(r).c_str(), O_RDWR, 0);
    TORCH_CHECK(fd >= 0, "oreg_ccl: rank ", rank, " cannot open shared memory of rank ", r, ": ",
                std::strerror(errno));
    struct stat st {};
    fstat(fd, &st);
    void* p = mmap(nullptr, t->segmentBytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    TORCH_CHECK(p != MAP_FAILED && size_t(st.st_size) == t->segmentBytes_, "oreg_ccl: rank ", rank,
                " cannot map shared memory of rank ", r,
                " (do all ranks use the same OREG_CCL_*RING_BYTES?)");
    t->maps_[r] = {p, t->segmentBytes_};
  }
  // Once every rank has mapped every segment, nobody needs the names: unlink
  // now so a job killed from here on leaves nothing in /dev/shm.
  rdv.set("mapped/" + std::to_string(rank), "1");
  for (int r = 0; r < size; ++r)
    if (r != rank) rdv.get("mapped/" + std::to_string(r));
  shm_unlink(t->ownName_.c_str());
  t->ownName_.clear();
  // Single copy only if every rank can read every peer (all agree).
  const bool canRead = config().singleCopyBytes > 0 && t->probeSingleCopy();
  rdv.set("single_copy/" + std::to_string(rank), canRead ? "1" : "0");
  bool all = canRead;
  for (int r = 0; r < size; ++r)
    if (r != rank) all = rdv.get("single_copy/" + std::to_string(r)) == "1" && all;
  if (all) {
    t->singleCopyBytes_ = config().singleCopyBytes;
    t->scratch_.resize(256 << 10);  // stays in L2 between read and reduction
  }
  return t;
}

bool ShmTransport::probeSingleCopy() const {
  // Read each peer's pid out of its own mapping of its segment: fails across
  // pid namespaces, under a ptrace policy that forbids it, or without the
  // syscall (seccomp).
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const ShmSegmentHeader* h = maps_[r].header();
    const auto pidOffset = reinterpret_cast<const char*>(&h->pid) - reinterpret_cast<const char*>(h);
    int32_t pid = 0;
    iovec local{&pid, sizeof(pid)};
    iovec remote{reinterpret_cast<void*>(h->selfBase + pidOffset), sizeof(pid)};
    if (process_vm_readv(h->pid, &local, 1, &remote, 1, 0) != sizeof(pid) || pid != h->pid)
      return false;
  }
  return true;
}

void ShmTransport::createOwnSegment(const std::string& name) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  TORCH_CHECK(fd >= 0, "oreg_ccl: cannot create shared memory ", name, ": ", std::strerror(errno));
  ownName_ = name;
  if (ftruncate(fd, static_cast<off_t>(segmentBytes_)) != 0) {
    int err = errno;
    close(fd);
    TORCH_CHECK(false, "oreg_ccl: cannot size shared memory ", name, " to ", segmentBytes_,
                " bytes: ", std::strerror(err));
  }
  void* p = mmap(nullptr, segmentBytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  TORCH_CHECK(p != MAP_FAILED, "oreg_ccl: cannot map shared memory: ", std::strerror(errno));
  maps_[rank_] = {p, segmentBytes_};
  // ftruncate zero-fills, so every counter starts at 0.
  maps_[rank_].header()->pid = getpid();
  maps_[rank_].header()->selfBase = reinterpret_cast<uint64_t>(p);
}

ShmTransport::~ShmTransport() {
  unmapPeerArenas();
  for (auto& m : maps_)
    if (m.base) munmap(m.base, m.bytes);
  if (!ownName_.empty()) shm_unlink(ownName_.c_str());
}

size_t ShmTransport::ringBytes(Channel ch) const {
  return ch == Channel::kCollective ? collRing_ : p2pRing_;
}

size_t ShmTransport::ringOffset(int src, Channel ch) const {
  size_t off = kHeaderArea + size_t(src) * (2 * sizeof(ShmRing) + collRing_ + p2pRing_);
  return ch == Channel::kCollective ? off : off + sizeof(ShmRing) + collRing_;
}

ShmRing* ShmTransport::ring(int owner, int src, Channel ch) const {
  return reinterpret_cast<ShmRing*>(static_cast<char*>(maps_[owner].base) + ringOffset(src, ch));
}

void ShmTransport::ring(int peer) {
  ShmSegmentHeader* h = maps_[peer].header();
  h->doorbell.fetch_add(1, std::memory_order_seq_cst);
  if (h->sleepers.load(std::memory_order_seq_cst) > 0)
    futex(&h->doorbell, FUTEX_WAKE, INT32_MAX, nullptr);
}

RequestPtr ShmTransport::isend(Channel ch, int dst, uint64_t tag, const std::string& what,
                               const void* data, size_t bytes) {
  checkFailure();
  TORCH_CHECK(dst >= 0 && dst < size_ && dst != rank_, "oreg_ccl: invalid destination rank ", dst);
  auto req = std::make_shared<Request>();
  req->peer = dst;
  // A send/recv message goes single-copy only if it cannot fit the ring
  // anyway: its send then completes when the receiver took it, as before.
  const bool single = singleCopyBytes_ && bytes >= singleCopyBytes_ &&
                      (ch == Channel::kCollective || kMessageHeader + bytes > p2pRing_);
  PendingSend s{req, std::vector<char>(kMessageHeader, 0), static_cast<const char*>(data), bytes,
                single};
  auto* h = reinterpret_cast<ShmMessageHeader*>(s.header.data());
  h->tag = tag;
  h->bytes = bytes;
  h->senderAddress = single ? reinterpret_cast<uint64_t>(data) : 0;
  h->device = single ? deviceHandleOf(data) : orIpcMemHandle{};
  h->src = static_cast<uint32_t>(rank_);
  h->magic = kMagic;
  putWireWhat(h->what, sizeof(h->what), what);
  sends_[slot(dst, ch)].push_back(std::move(s));
  pushSends(dst, ch);  // small messages usually go out right away
  return req;
}

RequestPtr ShmTransport::irecv(Channel ch, int src, uint64_t tag, const std::string& what,
                               size_t bytes, Sink sink, void* direct) {
  return postRecv(ch, src, tag, what, bytes, std::move(sink), direct, nullptr);
}

RequestPtr ShmTransport::irecvAnyOf(uint64_t tag, const std::string& what, size_t bytes,
                                    Sink sink, void* direct,
                                    std::shared_ptr<std::atomic<bool>> taken) {
  return postRecv(Channel::kP2P, kAnySource, tag, what, bytes, std::move(sink), direct,
                  std::move(taken));
}

RequestPtr ShmTransport::postRecv(Channel ch, int src, uint64_t tag, const std::string& what,
                                  size_t bytes, Sink sink, void* direct,
                                  std::shared_ptr<std::atomic<bool>> taken) {
  checkFailure();
  TORCH_CHECK((src >= 0 && src < size_ && src != rank_) || (src == kAnySource && ch == Channel::kP2P),
              "oreg_ccl: invalid source rank ", src);
  auto req = std::make_shared<Request>();
  req->peer = src;
  auto r = std::make_shared<PostedRecv>(
      PostedRecv{req, src, tag, wireWhat(what, sizeof(ShmMessageHeader::what)), bytes,
                  std::move(sink), static_cast<char*>(direct), std::move(taken)});
  if (ch == Channel::kCollective) {
    collRecvs_[src].push_back(r);
    return req;
  }
  // A p2p message may already sit in host memory.
  for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
    if (it->claimedBy || it->tag != tag || (src != kAnySource && it->src != src)) continue;
    if (!r->take()) return req;  // the other half of this receive took a message first
    it->claimedBy = r;
    if (it->complete) {
      int from = it->src;
      if (it->data.size() != bytes) sizeMismatch(*r, from, it->data.size());
      if (bytes) r->sink(it->data.data(), 0, bytes);
      unexpected_.erase(it);
      completeRequest(*r->req, from);
    }
    return req;
  }
  p2pRecvs_.push_back(r);
  return req;
}

std::string ShmTransport::failure() const {
  {
    std::lock_guard<std::mutex> g(errorMutex_);
    if (!error_.empty()) return error_;
  }
  ShmSegmentHeader* g = maps_[0].header();
  if (g && g->failState.load(std::memory_order_acquire) == 2)
    return "rank " + std::to_string(groupRank(g->failRank)) + " failed: " +
           std::string(g->failure, strnlen(g->failure, kFailureChars));
  return "";
}

bool ShmTransport::pushSends(int dst, Channel ch) {
  auto& q = sends_[slot(dst, ch)];
  if (q.empty()) return false;
  ShmRing* rg = ring(dst, rank_, ch);
  const size_t cap = ringBytes(ch);
  uint64_t& tail = sendTail_[slot(dst, ch)];
  uint64_t head = rg->head.load(std::memory_order_acquire);
  bool progressed = false;
  while (!q.empty()) {
    PendingSend& s = q.front();
    const size_t total = kMessageHeader + (s.singleCopy ? 0 : roundUp(s.bytes, kPieceAlign));
    size_t space = cap - (tail - head);
    if (space == 0) break;
    size_t n = std::min(space, total - s.written);
    // Copy the part of [header | payload | padding] that fits; padding is
    // never written, only skipped.
    size_t off = s.written, end = off + n;
    uint64_t pos = tail;
    if (off < kMessageHeader) {
      size_t k = std::min(end, kMessageHeader) - off;
      toRing(rg->data, cap, pos, s.header.data() + off, k);
      pos += k;
      off += k;
    }
    if (off < end) {
      size_t p0 = off - kMessageHeader;
      size_t p1 = std::min(end - kMessageHeader, s.bytes);
      if (p1 > p0) toRing(rg->data, cap, pos, s.data + p0, p1 - p0);
    }
    tail += n;
    s.written += n;
    progressed = true;
    rg->tail.store(tail, std::memory_order_release);
    if (s.written < total) break;
    RequestPtr req = s.req;
    const bool single = s.singleCopy;
    q.pop_front();
    if (single)  // the receiver still reads the payload from our memory
      awaitingAck_[slot(dst, ch)].push_back(
          {++singleCopySent_[slot(dst, ch)], std::move(req), s.data, s.bytes});
    else
      completeRequest(*req, dst);
  }
  if (progressed) ring(dst);
  return progressed;
}

bool ShmTransport::collectAcks(int dst, Channel ch) {
  auto& q = awaitingAck_[slot(dst, ch)];
  if (q.empty()) return false;
  ShmRing* rg = ring(dst, rank_, ch);
  const uint64_t acked = rg->acked.load(std::memory_order_acquire);
  bool progressed = false;
  while (!q.empty() && q.front().seq <= acked) {
    RequestPtr req = std::move(q.front().req);
    q.pop_front();
    completeRequest(*req, dst);
    progressed = true;
  }
  // The receiver reads the messages in order: only the oldest can be on offer.
  if (!q.empty()) progressed |= writeShare(dst, rg, q.front());
  return progressed;
}

bool ShmTransport::writeShare(int dst, ShmRing* rg, const AwaitingAck& a) {
  const uint64_t chunks = chunksOf(a.bytes);
  const pid_t pid = maps_[dst].header()->pid;
  bool progressed = false;
  for (uint64_t i; (i = claimChunk(rg->claim, a.seq, chunks)) < chunks;) {
    size_t put = 0;
    {
      // Counted even if the write fails: the reader must not wait for it.
      struct Counted {
        std::atomic<uint64_t>& copied;
        ~Counted() { copied.fetch_add(1, std::memory_order_release); }
      } counted{rg->copied};
      // Our claim holds the offer open, so `destination` is this message's.
      const size_t off = i * kShareChunk, n = std::min(kShareChunk, a.bytes - off);
      char* to = reinterpret_cast<char*>(rg->destination.load(std::memory_order_relaxed)) + off;
      char* mapped = peerMemory(dst, rg->destinationDevice, a.bytes);
      while (put < n && !offerClosed(rg->claim, a.seq)) {
        const size_t piece = std::min(kSharePiece, n - put);
        if (mapped) {
          copyMessage(mapped + off + put, a.data + off + put, piece, a.bytes);
          peerMappedWritten_.fetch_add(piece, std::memory_order_relaxed);
          put += piece;
          continue;
        }
        iovec local{const_cast<char*>(a.data) + off + put, piece};
        iovec remote{to + put, piece};
        ssize_t k = process_vm_writev(pid, &local, 1, &remote, 1, 0);
        if (k <= 0) failPeerIo(errno, "write to", dst, pid);
        put += static_cast<size_t>(k);
      }
    }
    ring(dst);
    // Only chunks with bytes in them: the offer may close before the first piece.
    if (put > 0) sharedChunksWritten_.fetch_add(1, std::memory_order_relaxed);
    progressed = true;
  }
  return progressed;
}

void ShmTransport::readFromSender(int src, Channel ch, const Inbound& in) {
  ShmRing* rg = ring(rank_, src, ch);
  // Into the receive's destination, or into host memory for a p2p message
  // that arrived before its receive.
  char* direct = in.recv ? in.recv->direct : in.unexpected->data.data();
  // While `reading` is set the sender keeps its buffer even if the group fails
  // (quiesce); set before the failure check so one of the two sees the other.
  struct Reading {
    ShmRing* rg;
    ~Reading() { rg->reading.store(0, std::memory_order_release); }
  } reading{rg};
  rg->reading.store(1, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (in.recv && direct && in.bytes >= 2 * kShareChunk) {
    readShared(src, rg, in);
  } else {
    const size_t chunk = direct ? (4 << 20) : scratch_.size();
    for (size_t off = 0; off < in.bytes;) {
      checkFailure();  // a failed group's buffers may be gone already
      const size_t n = std::min(in.bytes - off, chunk);
      if (!direct && in.peerMemory) {  // a reduction reads the peer's memory in place
        in.recv->sink(in.peerMemory + off, off, n);
        peerMappedRead_.fetch_add(n, std::memory_order_relaxed);
        off += n;
        continue;
      }
      char* to = direct ? direct + off : scratch_.data();
      readPeer(src, in, to, off, n);
      if (!direct) in.recv->sink(to, off, n);  // chunks are multiples of kPieceAlign
      off += n;
    }
  }
  rg->acked.fetch_add(1, std::memory_order_release);  // completes the sender's send
}

void ShmTransport::failPeerIo(int err, const std::string& action, int peer, pid_t pid) {
  fail("oreg_ccl: rank " + std::to_string(groupRank(rank_)) + " cannot " + action + " rank " +
           std::to_string(groupRank(peer)) + " (pid " + std::to_string(pid) + "): " +
           (err == ESRCH ? std::string("the process exited") : std::strerror(err)),
       true);
}

orIpcMemHandle ShmTransport::deviceHandleOf(const void* p) {
  orIpcMemHandle handle;
  if (!config().peerMapping || orIpcGetMemHandle(&handle, p) != orSuccess) handle = {};
  return handle;
}

char* ShmTransport::peerMemory(int peer, orIpcMemHandle handle, uint64_t bytes) {
  if (!config().peerMapping || handle.fd < 0 || handle.offset > handle.arenaBytes ||
      bytes > handle.arenaBytes - handle.offset)
    return nullptr;
  auto& arenas = peerArenas_[peer];
  auto it = std::find_if(arenas.begin(), arenas.end(), [&](const PeerArena& a) {
    return a.fd == handle.fd && a.inode == handle.inode && a.bytes == handle.arenaBytes;
  });
  if (it == arenas.end())
    it = arenas.insert(arenas.end(), PeerArena{handle.fd, handle.inode, handle.arenaBytes, nullptr});
  if (!it->base && Clock::now() >= it->retryAt) {
    // Opened once per peer arena. Until it is, messages go through
    // process_vm_readv/writev: for good if it cannot be opened (permissions),
    // else until a retry a second later (out of file descriptors, say).
    handle.pid = maps_[peer].header()->pid;
    void* base = nullptr;
    orError error = orIpcOpenMemHandle(&base, handle);
    it->base = error == orSuccess ? static_cast<char*>(base) : nullptr;
    it->retryAt = error == orErrorMemoryAllocation ? Clock::now() + std::chrono::seconds(1)
                                                   : Clock::time_point::max();
  }
  return it->base ? it->base + handle.offset : nullptr;
}

void ShmTransport::unmapPeerArenas() {
  for (auto& arenas : peerArenas_) {
    for (auto& a : arenas)
      if (a.base) orIpcCloseMemHandle(a.base, a.bytes);
    arenas.clear();
  }
}

std::string ShmTransport::unreceived(Channel ch) {
  // A send taken out of the ring into host memory, that no receive claimed.
  if (ch == Channel::kP2P)
    for (const Unexpected& u : unexpected_)
      if (!u.claimedBy)
        return unreceivedMessage(groupRank(u.src), "send with tag " + std::to_string(u.tag),
                                 u.data.size());
  for (int src = 0; src < size_; ++src) {
    if (src == rank_ || inbound_[slot(src, ch)].active) continue;
    const ShmRing* rg = ring(rank_, src, ch);
    const uint64_t head = recvHead_[slot(src, ch)];
    if (rg->tail.load(std::memory_order_acquire) - head < kMessageHeader) continue;
    ShmMessageHeader h;
    fromRing(rg->data, ringBytes(ch), head, reinterpret_cast<char*>(&h), kMessageHeader);
    return unreceivedMessage(groupRank(src), std::string(h.what, strnlen(h.what, sizeof(h.what))),
                             h.bytes);
  }
  return "";
}

void ShmTransport::shutdown() { unmapPeerArenas(); }

void ShmTransport::readPeer(int src, const Inbound& in, char* to, size_t off, size_t n) {
  if (in.peerMemory) {
    copyMessage(to, in.peerMemory + off, n, in.bytes);
    peerMappedRead_.fetch_add(n, std::memory_order_relaxed);
    return;
  }
  const pid_t pid = maps_[src].header()->pid;
  for (size_t got = 0; got < n;) {
    iovec local{to + got, n - got};
    iovec remote{reinterpret_cast<void*>(in.senderAddress + off + got), n - got};
    ssize_t k = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (k <= 0)
      failPeerIo(errno, "read " + (in.recv ? in.recv->what : std::string("a send")) + " from", src,
                 pid);
    got += static_cast<size_t>(k);
  }
}

void ShmTransport::readShared(int src, ShmRing* rg, const Inbound& in) {
  // This message's number, as the sender counts its single-copy messages.
  const uint64_t number = rg->acked.load(std::memory_order_relaxed) + 1;
  const uint64_t chunks = chunksOf(in.bytes);
  char* dest = in.recv->direct;
  rg->copied.store(0, std::memory_order_relaxed);
  rg->destination.store(reinterpret_cast<uint64_t>(dest), std::memory_order_relaxed);
  rg->destinationDevice = deviceHandleOf(dest);
  rg->claim.store(claimWord(number, 0), std::memory_order_release);
  ring(src);  // a sender waiting for our acknowledgement joins in
  uint64_t ownUnfinished = 0;
  try {
    for (uint64_t i; (i = claimChunk(rg->claim, number, chunks)) < chunks;) {
      ownUnfinished = 1;
      checkFailure();  // a failed group's buffers may be gone already
      const size_t off = i * kShareChunk;
      readPeer(src, in, dest + off, off, std::min(kShareChunk, in.bytes - off));
      ownUnfinished = 0;
      rg->copied.fetch_add(1, std::memory_order_release);
    }
    // The sender's last chunk may still be on its way.
    ShmSegmentHeader* me = maps_[rank_].header();
    const pid_t pid = maps_[src].header()->pid;
    for (int spins = 0; rg->copied.load(std::memory_order_acquire) < chunks; ++spins) {
      checkFailure();
      if (Clock::now() >= deadline_)  // a stopped sender (SIGSTOP, debugger) is alive
        fail("oreg_ccl: rank " + std::to_string(groupRank(rank_)) + ": Timed out in " +
                 in.recv->what + " waiting for rank " + std::to_string(groupRank(src)) +
                 " to finish its part of a copy",
             true);
      if (spins < 1000) {
        cpuRelax();
        continue;
      }
      const uint32_t bell = me->doorbell.load(std::memory_order_acquire);
      if (rg->copied.load(std::memory_order_acquire) >= chunks) break;
      if (!processAlive(pid))
        fail("oreg_ccl: rank " + std::to_string(groupRank(src)) + " (pid " +
                 std::to_string(pid) + ") exited while writing " + in.recv->what + " to rank " +
                 std::to_string(groupRank(rank_)),
             true);
      sleepOnDoorbell(bell, std::chrono::milliseconds(10));
    }
  } catch (...) {
    // Close the offer, then let a piece the sender is writing into `dest`
    // land (bounded, as in quiesce()) before the destination is given back.
    const uint64_t w = rg->claim.exchange(claimWord(number, kOfferClosed));
    const uint64_t claimed = std::min<uint64_t>(claimIndex(w), chunks);
    const auto until = Clock::now() + std::chrono::seconds(2);
    while (rg->copied.load(std::memory_order_acquire) + ownUnfinished < claimed &&
           Clock::now() < until && processAlive(maps_[src].header()->pid))
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    throw;
  }
}

bool ShmTransport::startMessage(int src, Channel ch, Inbound& in, const ShmMessageHeader& h) {
  TORCH_CHECK(h.magic == kMagic && h.src == uint32_t(src), "oreg_ccl: corrupt message header");
  in = Inbound{};
  in.tag = h.tag;
  in.bytes = h.bytes;
  in.senderAddress = h.senderAddress;
  if (ch == Channel::kCollective) {
    auto& q = collRecvs_[src];
    if (q.empty()) return false;  // not expected yet: leave it in the ring
    auto r = q.front();
    const std::string what(h.what, strnlen(h.what, sizeof(h.what)));
    if (h.tag != r->tag || r->what != what || h.bytes != r->bytes)
      fail(mismatchMessage(groupRank(rank_), *r, groupRank(src), what, h.bytes), true);
    q.pop_front();
    in.recv = r;
  } else {
    bool blocked = false;
    for (auto it = p2pRecvs_.begin(); it != p2pRecvs_.end();) {
      auto& r = *it;
      if (r->stale()) {  // its other half, in another transport, took a message
        it = p2pRecvs_.erase(it);
        continue;
      }
      if (r->src != src && r->src != kAnySource) {
        ++it;
        continue;
      }
      blocked = true;
      if (r->tag != h.tag) {
        ++it;
        continue;
      }
      if (r->bytes != h.bytes) sizeMismatch(*r, src, h.bytes);
      r->take();
      in.recv = r;
      p2pRecvs_.erase(it);
      break;
    }
    if (!in.recv) {
      // Buffer it only if it stands in front of a receive that waits for this
      // peer; otherwise leave it in the ring until someone asks for it.
      if (!blocked) return false;
      unexpected_.push_back(Unexpected{src, h.tag, std::vector<char>(h.bytes)});
      in.unexpected = &unexpected_.back();
    }
  }
  // Open the sender's memory only for a message taken: one left in the ring
  // may wait there long (and its receiver may not be able to map it yet).
  if (h.senderAddress) in.peerMemory = peerMemory(src, h.device, h.bytes);
  in.active = true;
  return true;
}

bool ShmTransport::pullRecvs(int src, Channel ch) {
  ShmRing* rg = ring(rank_, src, ch);
  const size_t cap = ringBytes(ch);
  uint64_t& head = recvHead_[slot(src, ch)];
  uint64_t tail = rg->tail.load(std::memory_order_acquire);
  Inbound& in = inbound_[slot(src, ch)];
  bool progressed = false;
  while (tail > head) {
    if (!in.active) {
      if (tail - head < kMessageHeader) break;
      ShmMessageHeader h;
      fromRing(rg->data, cap, head, reinterpret_cast<char*>(&h), kMessageHeader);
      if (!startMessage(src, ch, in, h)) break;
      head += kMessageHeader;
      progressed = true;
      if (in.senderAddress) {  // single copy: the payload is not in the ring
        readFromSender(src, ch, in);
        finishMessage(src, in);
        continue;
      }
    }
    const size_t padded = roundUp(in.bytes, kPieceAlign);
    size_t n = std::min<size_t>(tail - head, padded - in.consumed);
    // Deliver the available bytes, in at most two pieces (ring wrap), minus padding.
    size_t done = 0;
    while (done < n) {
      size_t at = (head + done) % cap;
      size_t piece = std::min(n - done, cap - at);
      size_t off = in.consumed + done;
      size_t useful = off < in.bytes ? std::min(piece, in.bytes - off) : 0;
      if (useful) {
        if (in.recv)
          in.recv->sink(rg->data + at, off, useful);
        else
          std::memcpy(in.unexpected->data.data() + off, rg->data + at, useful);
      }
      done += piece;
    }
    head += n;
    in.consumed += n;
    progressed = progressed || n > 0;
    if (in.consumed < padded) break;
    finishMessage(src, in);
  }
  if (progressed) {
    rg->head.store(head, std::memory_order_release);
    ring(src);  // the writer may be waiting for space
  }
  return progressed;
}

void ShmTransport::finishMessage(int src, Inbound& in) {
  if (in.recv)
    completeRequest(*in.recv->req, src);
  else
    arrived(src, in.unexpected);
  in = Inbound{};
}

void ShmTransport::arrived(int src, Unexpected* u) {
  u->complete = true;
  if (!u->claimedBy) return;  // irecv() takes it
  auto r = u->claimedBy;
  if (u->data.size() != r->bytes) sizeMismatch(*r, src, u->data.size());
  if (u->data.size()) r->sink(u->data.data(), 0, u->data.size());
  unexpected_.remove_if([u](const Unexpected& x) { return &x == u; });
  completeRequest(*r->req, src);
}

bool ShmTransport::pollAll() {
  bool progressed = false;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    for (Channel ch : {Channel::kCollective, Channel::kP2P}) {
      progressed |= pushSends(p, ch);
      progressed |= pullRecvs(p, ch);
      progressed |= collectAcks(p, ch);
    }
  }
  return progressed;
}

void ShmTransport::sizeMismatch(const PostedRecv& r, int src, size_t sent) {
  fail(sizeMismatchMessage(groupRank(rank_), r, groupRank(src), sent), false);
}

void ShmTransport::checkFailure() {
  if (failed_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> g(errorMutex_);
    throwDist(error_);
  }
  ShmSegmentHeader* g = maps_[0].header();
  if (g && g->failState.load(std::memory_order_acquire) == 2) {
    std::string msg(g->failure, strnlen(g->failure, kFailureChars));
    if (g->failRank != rank_)
      msg = "rank " + std::to_string(groupRank(g->failRank)) + " failed: " + msg;
    fail(msg, false);
  }
}

void ShmTransport::fail(const std::string& why, bool propagate) {
  cancel(why, propagate);
  std::lock_guard<std::mutex> g(errorMutex_);
  throwDist(error_);
}

void ShmTransport::cancel(const std::string& why, bool propagate) {
  {
    std::lock_guard<std::mutex> g(errorMutex_);
    if (error_.empty()) error_ = why;
  }
  failed_.store(true, std::memory_order_release);
  if (propagate && maps_[0].base) {
    ShmSegmentHeader* g = maps_[0].header();
    uint32_t expected = 0;
    if (g->failState.compare_exchange_strong(expected, 1)) {
      std::strncpy(g->failure, why.c_str(), kFailureChars - 1);
      g->failRank = rank_;
      g->failState.store(2, std::memory_order_release);
    }
    for (int r = 0; r < size_; ++r)
      if (maps_[r].base) ring(r);
  }
  wakeup();
}

void ShmTransport::quiesce() {
  // A peer may still read a single-copy send of ours that it has not
  // acknowledged: now or later, once it posts the receive. A failure that
  // stayed local (shutdown(), a local mismatch) would not stop that later
  // read, so publish it first; a reader checks the group's failure after
  // raising `reading` and between chunks, so the wait below is short
  // (bounded in case the peer is stuck).
  bool unread = false;
  for (const auto& q : awaitingAck_) unread = unread || !q.empty();
  if (!unread) return;
  cancel(failure(), /*propagate=*/true);  // after cancel(): failure() holds the reason
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const auto until = Clock::now() + std::chrono::seconds(2);
  for (int p = 0; p < size_; ++p) {
    for (Channel ch : {Channel::kCollective, Channel::kP2P}) {
      if (p == rank_ || awaitingAck_[slot(p, ch)].empty()) continue;
      ShmRing* rg = ring(p, rank_, ch);
      while (rg->reading.load(std::memory_order_seq_cst) && Clock::now() < until)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
}

void ShmTransport::wakeup() {
  woken_.store(true, std::memory_order_release);
  if (maps_[rank_].base) ring(rank_);
}


void ShmTransport::checkPeersAlive() {
  // Only peers we are exchanging bytes with matter: a peer that finished and
  // exited is fine as long as nobody waits for it.
  p2pRecvs_.remove_if([](const std::shared_ptr<PostedRecv>& r) { return r->stale(); });
  std::vector<bool> involved(size_, false);
  for (int p = 0; p < size_; ++p) {
    for (Channel ch : {Channel::kCollective, Channel::kP2P})
      if (!sends_[slot(p, ch)].empty() || inbound_[slot(p, ch)].active ||
          !awaitingAck_[slot(p, ch)].empty())
        involved[p] = true;
    if (!collRecvs_[p].empty()) involved[p] = true;
  }
  for (auto& r : p2pRecvs_) {
    if (r->src == kAnySource) std::fill(involved.begin(), involved.end(), true);
    else involved[r->src] = true;
  }
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || !involved[p]) continue;
    pid_t pid = maps_[p].header()->pid;
    if (pid > 0 && !processAlive(pid))
      fail("oreg_ccl: rank " + std::to_string(groupRank(p)) + " (pid " + std::to_string(pid) +
               ") exited while rank " + std::to_string(groupRank(rank_)) +
               " was exchanging data with it",
           true);
  }
}

void ShmTransport::progress(Clock::time_point until) { progress(until, until); }

void ShmTransport::progress(Clock::time_point until, Clock::time_point deadline) {
  deadline_ = deadline;
  ShmSegmentHeader* me = maps_[rank_].header();
  const auto spinUntil = Clock::now() + std::chrono::microseconds(spinUs_);
  for (;;) {
    checkFailure();
    uint32_t bell = me->doorbell.load(std::memory_order_acquire);
    if (pollAll() || woken_.exchange(false)) return;
    auto now = Clock::now();
    if (now >= until) return;
    if (now - lastLivenessCheck_ > std::chrono::milliseconds(200)) {
      lastLivenessCheck_ = now;
      checkPeersAlive();
    }
    if (now < spinUntil) {
      // Yield, not just pause: the peer we wait for may be queued on this
      // very core (the scheduler does not promise one core per rank), and a
      // pure spin would keep it off for the whole spin.
      std::this_thread::yield();
      continue;
    }
    // Sleep until a doorbell ring, `until`, or a liveness check is due.
    sleepOnDoorbell(bell, std::min<Clock::duration>(until - now, std::chrono::milliseconds(200)));
  }
}

void ShmTransport::sleepOnDoorbell(uint32_t bell, Clock::duration timeout) {
  ShmSegmentHeader* me = maps_[rank_].header();
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  me->sleepers.fetch_add(1, std::memory_order_seq_cst);
  if (me->doorbell.load(std::memory_order_seq_cst) == bell) futex(&me->doorbell, FUTEX_WAIT, bell, &ts);
  me->sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace openreg::ccl
