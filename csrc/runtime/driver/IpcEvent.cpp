// Interprocess events' shared state (IpcEvent.h).
#include "IpcEvent.h"

#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "PeerMemfd.h"

namespace openreg::detail {

// Each record takes a slot until its stream reaches it; a 65th record made
// while 64 are outstanding waits for one of them.
constexpr int kSlots = 64;
constexpr size_t kPageBytes = 4096;
constexpr size_t kArenaPages = 1024;  // sparse: a page takes memory once an event used it
constexpr size_t kArenaBytes = kArenaPages * kPageBytes;
constexpr char kMemfdName[] = "openreg-events";

// A record is named by its generation and its slot: (generation << 8) | slot.
constexpr uint64_t recordId(uint64_t generation, int slot) { return generation << 8 | uint64_t(slot); }
constexpr uint64_t generationOf(uint64_t id) { return id >> 8; }
constexpr int slotOf(uint64_t id) { return static_cast<int>(id & 0xff); }

enum SlotState : uint32_t {
  kFree = 0,    // never used, or its record was reached
  kBusy = 1,    // its record is not reached yet
  kFailed = 2,  // its record was reached after a kernel failed on its stream
  // Being taken for a new record: the record it still names was reached (the
  // new one's waiters cannot know its id before the slot is kBusy).
  kClaiming = 3,
};

struct IpcEventPage {
  // Across processes: the live IpcEvents on this page (the creator's one
  // included). At 0 the creator may give the page to a new event, with the
  // next incarnation; an opener joins only a held page of its incarnation.
  std::atomic<uint32_t> holders;
  std::atomic<uint64_t> incarnation;
  std::atomic<uint64_t> latest;           // id of the latest record (0: none)
  std::atomic<uint64_t> last_generation;  // generations handed out
  std::atomic<uint32_t> wake;             // futex word: bumped at each publication
  struct Slot {
    std::atomic<uint32_t> state;
    std::atomic<uint64_t> generation;  // of the record holding (or last holding) it
    std::atomic<int64_t> pid;          // its recorder,
    std::atomic<uint64_t> start;       // and the recorder's start time, against pid reuse
  } slots[kSlots];
};
static_assert(sizeof(IpcEventPage) <= kPageBytes);
static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "the page is shared between processes: its atomics must be lock-free");

namespace {

// A process's start time (field 22 of /proc/PID/stat); 0 if it is gone or a
// zombie (killed, not yet reaped by its parent), -1 if its stat cannot be
// read (hidepid): with the pid, it names one process even after the pid is reused.
int64_t processStartTime(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return errno == ENOENT || errno == ESRCH ? 0 : -1;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t comm_end = text.rfind(')');  // the command name may hold spaces and ')'
  if (comm_end == std::string::npos) return 0;
  std::istringstream fields(text.substr(comm_end + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 3 && (field == "Z" || field == "X")) return 0;
    if (i == 22) return static_cast<int64_t>(std::strtoull(field.c_str(), nullptr, 10));
  }
  return 0;
}

bool alive(int64_t pid, uint64_t start) {
  const int64_t now = processStartTime(pid);
  if (now < 0) return kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;  // cannot tell better
  return static_cast<uint64_t>(now) == start;
}

uint64_t selfStartTime() {
  static const uint64_t start = static_cast<uint64_t>(std::max<int64_t>(processStartTime(getpid()), 0));
  return start;
}

// Shared (not FUTEX_PRIVATE) futex operations: waiters are in other processes.
void futexWait(std::atomic<uint32_t>* word, uint32_t seen, std::chrono::milliseconds timeout) {
  struct timespec ts{static_cast<time_t>(timeout.count() / 1000),
                     static_cast<long>(timeout.count() % 1000) * 1000000};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}
void futexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

void* mapShared(int fd, size_t bytes, off_t offset) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, offset);
  if (p == MAP_FAILED) return nullptr;
  madvise(p, bytes, MADV_DONTFORK);  // a fork's child cannot use the driver
  return p;
}

// The pages of this process's events, in memfds it keeps open (the handles
// name them) and mapped for good.
class Arenas {
 public:
  struct Page {
    IpcEventPage* page;
    orIpcEventHandle handle;  // less the incarnation
  };

  // A page no event holds, or nullopt with errno set.
  std::optional<Page> take() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = retired_.begin(); it != retired_.end(); ++it)
      if (it->page->holders.load(std::memory_order_acquire) == 0) {
        Page free = *it;
        retired_.erase(it);
        return free;
      }
    if (arenas_.empty() || arenas_.back().used == kArenaPages) {
      Arena arena;
      arena.fd = memfd_create(kMemfdName, MFD_CLOEXEC);
      struct stat st{};
      if (arena.fd < 0 || ftruncate(arena.fd, kArenaBytes) != 0 || fstat(arena.fd, &st) != 0 ||
          !(arena.base = static_cast<char*>(mapShared(arena.fd, kArenaBytes, 0)))) {
        const int error = errno;
        if (arena.fd >= 0) close(arena.fd);
        errno = error;
        return std::nullopt;
      }
      arena.inode = static_cast<uint64_t>(st.st_ino);
      arenas_.push_back(arena);
    }
    Arena& arena = arenas_.back();
    const size_t index = arena.used++;
    return Page{reinterpret_cast<IpcEventPage*>(arena.base + index * kPageBytes),
                {getpid(), arena.fd, arena.inode, index, 0}};
  }

  // The creator's event let go of `page`; it is taken again once no process holds it.
  void retire(const Page& page) {
    std::lock_guard<std::mutex> lock(mutex_);
    retired_.push_back(page);
  }

 private:
  struct Arena {
    int fd = -1;
    uint64_t inode = 0;
    char* base = nullptr;
    size_t used = 0;  // pages handed out so far
  };
  std::mutex mutex_;
  std::vector<Arena> arenas_;  // GUARDED_BY(mutex_)
  std::vector<Page> retired_;  // GUARDED_BY(mutex_)
};

Arenas& arenas() {
  static auto* all = new Arenas();  // mapped until exit: receivers may outlive our events
  return *all;
}

orError mapError(int error) {
  return error == EMFILE || error == ENFILE || error == ENOMEM ? orErrorMemoryAllocation
                                                               : orErrorInvalidValue;
}

}  // namespace

std::shared_ptr<IpcEvent> IpcEvent::create(orError* error) {
  const std::optional<Arenas::Page> free = arenas().take();
  if (!free) {
    *error = mapError(errno);
    return nullptr;
  }
  IpcEventPage* page = free->page;
  // No process holds the page, so none reads it: back to no record, every
  // slot unclaimed; then the next incarnation, published by holders.
  const uint64_t incarnation = page->incarnation.load() + 1;
  page->latest.store(0);
  page->last_generation.store(0);
  for (auto& slot : page->slots) {
    slot.state.store(kFree);
    slot.generation.store(0);
    slot.pid.store(0);
    slot.start.store(0);
  }
  page->incarnation.store(incarnation);
  page->holders.store(1, std::memory_order_release);
  std::shared_ptr<IpcEvent> event(new IpcEvent());
  event->owner_pid_ = getpid();
  event->page_ = page;
  event->handle_ = free->handle;
  event->handle_.incarnation = incarnation;
  return event;
}

std::shared_ptr<IpcEvent> IpcEvent::open(const orIpcEventHandle& handle, orError* error) {
  if (handle.pid <= 0 || handle.fd < 0 || handle.page >= kArenaPages) {
    *error = orErrorInvalidValue;
    return nullptr;
  }
  const int fd = openPeerMemfd(handle.pid, handle.fd, handle.inode, kArenaBytes, kMemfdName);
  if (fd < 0) {
    *error = mapError(errno);
    return nullptr;
  }
  auto* page = static_cast<IpcEventPage*>(
      mapShared(fd, kPageBytes, static_cast<off_t>(handle.page * kPageBytes)));
  const int mapped_errno = errno;
  close(fd);  // the mapping keeps the page
  if (!page) {
    *error = mapError(mapped_errno);
    return nullptr;
  }
  // Join the event's holders, unless it has none (destroyed everywhere) or
  // the page already holds a later event; checked again once joined, when
  // the page can no longer change hands.
  uint32_t holders = page->holders.load(std::memory_order_acquire);
  bool joined = false;
  while (holders > 0 && page->incarnation.load() == handle.incarnation &&
         !(joined = page->holders.compare_exchange_weak(holders, holders + 1))) {
  }
  if (joined && page->incarnation.load() != handle.incarnation) {
    page->holders.fetch_sub(1);
    joined = false;
  }
  if (!joined) {
    munmap(page, kPageBytes);
    *error = orErrorInvalidValue;
    return nullptr;
  }
  std::shared_ptr<IpcEvent> event(new IpcEvent());
  event->owner_pid_ = getpid();
  event->page_ = page;
  event->own_mapping_ = true;
  event->handle_ = handle;
  return event;
}

IpcEvent::~IpcEvent() {
  // A fork's child has no mapping (MADV_DONTFORK), nor a hold of its own.
  if (getpid() != owner_pid_ || !page_) return;
  page_->holders.fetch_sub(1, std::memory_order_acq_rel);
  if (own_mapping_)
    munmap(page_, kPageBytes);
  else
    arenas().retire({page_, handle_});
}

uint64_t IpcEvent::claim() {
  auto take = [this](uint32_t from) {
    for (int i = 0; i < kSlots; ++i) {
      const int index = static_cast<int>((next_hint_ + i) % kSlots);
      auto& slot = page_->slots[index];
      uint32_t expected = from;
      if (from == kBusy) {  // a record whose recorder exited: it will never be reached
        if (slot.state.load() != kBusy || alive(slot.pid.load(), slot.start.load())) continue;
        if (slot.state.compare_exchange_strong(expected, kFailed)) {
          page_->wake.fetch_add(1);
          futexWakeAll(&page_->wake);
        }
        continue;
      }
      if (slot.state.compare_exchange_strong(expected, kClaiming)) return index;
    }
    return -1;
  };
  int index = -1;
  for (int round = 0; index < 0; ++round) {
    // A free slot; else one whose record failed (its waiters may then see it
    // as done); else, once lost records are given up, wait for a record to end.
    if ((index = take(kFree)) >= 0 || (index = take(kFailed)) >= 0) break;
    take(kBusy);
    if (round > 0) futexWait(&page_->wake, page_->wake.load(), std::chrono::milliseconds(1));
  }
  next_hint_ = index + 1;
  auto& slot = page_->slots[index];
  slot.pid.store(getpid(), std::memory_order_relaxed);
  slot.start.store(selfStartTime(), std::memory_order_relaxed);
  const uint64_t generation = page_->last_generation.fetch_add(1) + 1;
  slot.generation.store(generation, std::memory_order_release);
  slot.state.store(kBusy);
  // The latest record is the highest generation: two processes recording at
  // once store theirs in either order.
  const uint64_t id = recordId(generation, index);
  uint64_t latest = page_->latest.load();
  while (generationOf(latest) < generation && !page_->latest.compare_exchange_weak(latest, id)) {
  }
  return id;
}

void IpcEvent::publish(uint64_t id, bool failed) {
  auto& slot = page_->slots[slotOf(id)];
  if (slot.generation.load() == generationOf(id)) slot.state.store(failed ? kFailed : kFree);
  page_->wake.fetch_add(1);
  futexWakeAll(&page_->wake);
}

uint64_t IpcEvent::latest() const { return page_->latest.load(); }

int64_t IpcEvent::recorder(uint64_t id) const {
  const auto& slot = page_->slots[slotOf(id)];
  return slot.generation.load(std::memory_order_acquire) == generationOf(id) ? slot.pid.load() : 0;
}

orError IpcEvent::status(uint64_t id) const {
  if (id == 0) return orSuccess;
  const auto& slot = page_->slots[slotOf(id)];
  // A slot is taken again only once its record was reached.
  if (slot.generation.load(std::memory_order_acquire) != generationOf(id)) return orSuccess;
  switch (slot.state.load(std::memory_order_acquire)) {
    case kFailed:
      return orErrorLaunchFailure;
    case kBusy:
      if (slot.generation.load() != generationOf(id)) return orSuccess;  // taken again meanwhile
      if (alive(slot.pid.load(), slot.start.load())) return orErrorNotReady;
      // Reached just before the exit?
      return slot.state.load() == kBusy && slot.generation.load() == generationOf(id)
                 ? orErrorIpcPeerExited
                 : status(id);
    default:
      return orSuccess;
  }
}

orError IpcEvent::wait(uint64_t id) const {
  // Short waits spin; longer ones sleep on the futex, waking to check that the
  // recorder is still alive (it cannot wake anyone once it is gone).
  for (int i = 0; i < 100; ++i) {
    const auto& slot = page_->slots[slotOf(id)];
    if (id == 0 || slot.state.load(std::memory_order_acquire) != kBusy ||
        slot.generation.load() != generationOf(id))
      return status(id);
  }
  for (;;) {
    const uint32_t seen = page_->wake.load();
    const orError now = status(id);
    if (now != orErrorNotReady) return now;
    futexWait(&page_->wake, seen, std::chrono::milliseconds(50));
  }
}

}  // namespace openreg::detail
