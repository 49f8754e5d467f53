// Interprocess events' shared state (IpcEvent.h).
#include "IpcEvent.h"

#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

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

// Records still in flight when a generation's slot is taken again would be
// mistaken for complete: 64 records of one event outstanding at once is far
// beyond what waiting for "the latest record" needs.
constexpr int kSlots = 64;
constexpr size_t kPageBytes = 4096;
constexpr char kMemfdName[] = "openreg-event";

struct IpcEventPage {
  std::atomic<uint64_t> latest;  // generation of the latest record
  std::atomic<uint32_t> wake;    // futex word: bumped at each publication
  struct Slot {
    std::atomic<uint64_t> claimed;  // generation whose recorder wrote pid/start below
    std::atomic<uint64_t> reached;  // highest generation of this slot its stream reached
    std::atomic<uint32_t> failed;   // that stream had failed (for `reached`)
    std::atomic<int64_t> pid;
    std::atomic<uint64_t> start;    // the recorder's start time, against pid reuse
  } slots[kSlots];
};
static_assert(sizeof(IpcEventPage) <= kPageBytes);
static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "the page is shared between processes: its atomics must be lock-free");

namespace {

// A process's start time (field 22 of /proc/PID/stat), or 0 if it is gone
// or a zombie (killed, not yet reaped by its parent): with the pid, it names
// one process even after the pid is reused.
uint64_t processStartTime(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t comm_end = text.rfind(')');  // the command name may hold spaces and ')'
  if (comm_end == std::string::npos) return 0;
  std::istringstream fields(text.substr(comm_end + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 3 && (field == "Z" || field == "X")) return 0;
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return 0;
}

uint64_t selfStartTime() {
  static const uint64_t start = processStartTime(getpid());
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
  if (page_) munmap(page_, kPageBytes);
  if (fd_ >= 0) close(fd_);
}

uint64_t IpcEvent::claim() {
  const uint64_t generation = page_->latest.fetch_add(1) + 1;
  auto& slot = page_->slots[generation % kSlots];
  slot.pid.store(getpid(), std::memory_order_relaxed);
  slot.start.store(selfStartTime(), std::memory_order_relaxed);
  slot.claimed.store(generation, std::memory_order_release);
  return generation;
}

void IpcEvent::publish(uint64_t generation, bool failed) {
  auto& slot = page_->slots[generation % kSlots];
  slot.failed.store(failed ? 1 : 0, std::memory_order_relaxed);
  // Records of one slot's generations reach it in order unless 64 records
  // were outstanding at once (kSlots): keep the highest.
  uint64_t reached = slot.reached.load();
  while (reached < generation && !slot.reached.compare_exchange_weak(reached, generation)) {
  }
  page_->wake.fetch_add(1);
  futexWakeAll(&page_->wake);
}

uint64_t IpcEvent::latest() const { return page_->latest.load(); }

int64_t IpcEvent::recorder(uint64_t generation) const {
  const auto& slot = page_->slots[generation % kSlots];
  return slot.claimed.load(std::memory_order_acquire) == generation ? slot.pid.load() : 0;
}

orError IpcEvent::status(uint64_t generation) const {
  if (generation == 0) return orSuccess;
  const auto& slot = page_->slots[generation % kSlots];
  const uint64_t reached = slot.reached.load(std::memory_order_acquire);
  if (reached >= generation)
    return reached == generation && slot.failed.load() ? orErrorLaunchFailure : orSuccess;
  if (slot.claimed.load(std::memory_order_acquire) == generation) {
    const int64_t pid = slot.pid.load();
    if (processStartTime(pid) != slot.start.load()) {
      // Reached just before the exit?
      if (slot.reached.load(std::memory_order_acquire) >= generation) return status(generation);
      return orErrorIpcPeerExited;
    }
  }
  return orErrorNotReady;
}

orError IpcEvent::wait(uint64_t generation) const {
  // Short waits spin; longer ones sleep on the futex, waking to check that the
  // recorder is still alive (it cannot wake anyone once it is gone).
  for (int i = 0; i < 100; ++i) {
    const auto& slot = page_->slots[generation % kSlots];
    if (generation == 0 || slot.reached.load(std::memory_order_acquire) >= generation)
      return status(generation);
  }
  for (;;) {
    const uint32_t seen = page_->wake.load();
    const orError now = status(generation);
    if (now != orErrorNotReady) return now;
    futexWait(&page_->wake, seen, std::chrono::milliseconds(50));
  }
}

}  // namespace openreg::detail
