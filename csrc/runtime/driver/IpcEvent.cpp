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
#include <sstream>
#include <string>

#include "PeerMemfd.h"

namespace openreg::detail {

// Each record takes a slot until its stream reaches it; a 65th record made
// while 64 are outstanding waits for one of them.
constexpr int kSlots = 64;
constexpr size_t kPageBytes = 4096;
constexpr char kMemfdName[] = "openreg-event";

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

IpcEventPage* mapPage(int fd) {
  void* p = mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return nullptr;
  madvise(p, kPageBytes, MADV_DONTFORK);  // a fork's child cannot use the driver
  return static_cast<IpcEventPage*>(p);
}

orError mapError(int error) {
  return error == EMFILE || error == ENFILE || error == ENOMEM ? orErrorMemoryAllocation
                                                               : orErrorInvalidValue;
}

}  // namespace

std::shared_ptr<IpcEvent> IpcEvent::create(orError* error) {
  std::shared_ptr<IpcEvent> event(new IpcEvent());
  event->owner_pid_ = getpid();
  event->fd_ = memfd_create(kMemfdName, MFD_CLOEXEC);
  struct stat st{};
  if (event->fd_ < 0 || ftruncate(event->fd_, kPageBytes) != 0 || fstat(event->fd_, &st) != 0 ||
      !(event->page_ = mapPage(event->fd_))) {
    *error = mapError(errno);
    return nullptr;
  }
  // A fresh memfd reads as zeros: no record, every slot unclaimed.
  event->handle_ = {getpid(), event->fd_, static_cast<uint64_t>(st.st_ino)};
  return event;
}

std::shared_ptr<IpcEvent> IpcEvent::open(const orIpcEventHandle& handle, orError* error) {
  if (handle.pid <= 0 || handle.fd < 0) {
    *error = orErrorInvalidValue;
    return nullptr;
  }
  const int fd = openPeerMemfd(handle.pid, handle.fd, handle.inode, kPageBytes, kMemfdName);
  if (fd < 0) {
    *error = mapError(errno);
    return nullptr;
  }
  std::shared_ptr<IpcEvent> event(new IpcEvent());
  event->owner_pid_ = getpid();
  event->page_ = mapPage(fd);
  const int mapped_errno = errno;
  close(fd);  // the mapping keeps the page
  if (!event->page_) {
    *error = mapError(mapped_errno);
    return nullptr;
  }
  event->handle_ = handle;
  return event;
}

IpcEvent::~IpcEvent() {
  // A fork's child has neither the mapping (MADV_DONTFORK) nor, maybe, the
  // descriptor any more: what is at those numbers now is the child's own.
  if (getpid() != owner_pid_) return;
  if (page_) munmap(page_, kPageBytes);
  if (fd_ >= 0) close(fd_);
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
