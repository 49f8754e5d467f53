// torch.multiprocessing's sharing of openreg storages (OpenRegIPCTypes.h).
#include "OpenRegIPCTypes.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/DeviceType.h>
#include <c10/util/Exception.h>
#include <c10/util/ScopeExit.h>
#include <c10/util/thread_name.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "OpenRegException.h"
#include "OpenRegFunctions.h"
#include "OpenRegStream.h"
#include "driver/PeerMemfd.h"

namespace openreg {
namespace {

constexpr int64_t kSlots = 1 << 16;  // storages pickled and not yet released, per sender
constexpr size_t kSlotBytes = kSlots * sizeof(std::atomic<int64_t>);
constexpr char kRefcountsName[] = "openreg-ipc-refcounts";
// Live sharing events per sender, each kept until its receiver let go of the
// storage: as CUDA, which past 1000 synchronises the stream instead.
constexpr size_t kMaxShareEvents = 1000;

std::atomic<int64_t>* mapSlots(int fd) {
  void* p = mmap(nullptr, kSlotBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return nullptr;
  madvise(p, kSlotBytes, MADV_DONTFORK);
  return static_cast<std::atomic<int64_t>*>(p);
}

// The sender's slot array: a memfd that receivers open through /proc, as
// they open its device memory.
struct SentSlots {
  std::mutex mutex;
  int fd = -1;
  uint64_t inode = 0;
  std::atomic<int64_t>* slots = nullptr;
  std::vector<int64_t> free;  // GUARDED_BY(mutex)
  int64_t next = 0;           // GUARDED_BY(mutex): slots never used yet start here
  // GUARDED_BY(mutex): the interprocess event each slot's receiver waits for
  // (none: the sender synchronised instead), destroyed when the slot is free.
  std::unordered_map<int64_t, orEvent> events;

  void freeSlotsLocked(std::vector<int64_t>::const_iterator begin,
                       std::vector<int64_t>::const_iterator end) {
    for (auto it = begin; it != end; ++it) {
      auto event = events.find(*it);
      if (event != events.end()) {
        orEventDestroy(event->second);
        events.erase(event);
      }
    }
    free.insert(free.end(), begin, end);
  }

  void init() {
    if (slots) return;
    fd = memfd_create(kRefcountsName, MFD_CLOEXEC);
    TORCH_CHECK(fd >= 0 && ftruncate(fd, kSlotBytes) == 0,
                "openreg: cannot create the reference counts of shared storages: ",
                std::strerror(errno));
    struct stat st{};
    fstat(fd, &st);
    inode = st.st_ino;
    slots = mapSlots(fd);
    TORCH_CHECK(slots, "openreg: cannot map the reference counts of shared storages");
  }
};

SentSlots& sentSlots() {
  static auto* s = new SentSlots();  // used until exit, by receivers too
  return *s;
}

// Receiver side: senders' slot arrays by (pid, fd, inode), mapped for good.
std::atomic<int64_t>* receivedSlots(const std::array<int64_t, 3>& id) {
  static std::mutex mutex;
  static auto* mapped = new std::map<std::array<int64_t, 3>, std::atomic<int64_t>*>();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = mapped->find(id);
  if (it != mapped->end()) return it->second;
  const int fd = openPeerMemfd(id[0], id[1], static_cast<uint64_t>(id[2]), kSlotBytes,
                               kRefcountsName);
  if (fd < 0) return nullptr;
  std::atomic<int64_t>* slots = mapSlots(fd);
  close(fd);
  if (slots) mapped->emplace(id, slots);
  return slots;
}

// A sender's shared storage: its DataPtr's context, owning the original
// block until every slot (one per pickling) has come back.
struct SentData {
  c10::DataPtr original;
  std::vector<int64_t> slots;  // GUARDED_BY(sentSlots().mutex)
};
std::vector<SentData*>& limbo() {  // GUARDED_BY(sentSlots().mutex): dead, still held by receivers
  static auto* dead = new std::vector<SentData*>();
  return *dead;
}
std::unordered_set<SentData*>& alive() {  // GUARDED_BY(sentSlots().mutex): storages still alive
  static auto* live = new std::unordered_set<SentData*>();
  return *live;
}

// Under sentSlots().mutex: frees `sent`'s slots that every receiver gave
// back; true if none is held any more.
bool releasedLocked(SentData* sent) {
  SentSlots& s = sentSlots();
  auto held = std::stable_partition(sent->slots.begin(), sent->slots.end(), [&](int64_t slot) {
    return s.slots[slot].load(std::memory_order_acquire) != 0;
  });
  s.freeSlotsLocked(held, sent->slots.end());
  sent->slots.erase(held, sent->slots.end());
  return sent->slots.empty();
}

void deleteSent(void* context) {
  auto* sent = static_cast<SentData*>(context);
  // A forked child's copy: the slots are the parent's (and not mapped here).
  if (orIsForkedChild()) return;
  {
    std::lock_guard<std::mutex> lock(sentSlots().mutex);
    alive().erase(sent);
    if (!releasedLocked(sent)) {
      limbo().push_back(sent);  // reserved at the share: never allocates here
      return;
    }
  }
  delete sent;  // outside the lock: frees the block into the caching allocator
}

// A receiver's storage: the imported mapping, the reference it returns, and
// the streams its release waits for.
struct Imported {
  void* ptr;
  std::atomic<int64_t>* reference;
  c10::DeviceIndex device;
  std::mutex mutex;
  std::vector<c10::Stream> used_on;  // GUARDED_BY(mutex): record_stream's

  void release() {
    orIpcRelease(ptr);
    reference->fetch_sub(1, std::memory_order_acq_rel);
    delete this;
  }
};

// Releases received storages once the streams that may still use them have
// passed the point of the release: polled on a thread of its own, without
// synchronising (the race checker sees no synchronisation the program lacks),
// and a failed stream, which runs nothing more, counts as passed.
class ImportReleaser {
 public:
  void add(Imported* imported, std::vector<orEvent> events) {
    pending.fetch_add(1);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending_.push_back({imported, std::move(events)});
      if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    }
    cv_.notify_one();
  }

  std::atomic<int64_t> pending{0};  // releases queued and not done

 private:
  struct Pending {
    Imported* imported;
    std::vector<orEvent> events;
  };
  void run() {
    c10::setThreadName("oreg_ipc_free");
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return !pending_.empty(); });
      std::vector<Pending> batch;
      batch.swap(pending_);
      lock.unlock();
      for (auto& p : batch) {
        for (orEvent e : p.events) {
          for (auto delay = std::chrono::microseconds(50); orEventQueryNoSync(e) == orErrorNotReady;
               delay = std::min(delay * 2, std::chrono::microseconds(5000)))
            std::this_thread::sleep_for(delay);
          orEventDestroy(e);
        }
        p.imported->release();
        pending.fetch_sub(1);
      }
      lock.lock();
    }
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Pending> pending_;  // GUARDED_BY(mutex_)
  std::thread thread_;
};

ImportReleaser& importReleaser() {
  static auto* releaser = new ImportReleaser();  // runs until exit
  return *releaser;
}

// Stream-ordered, as the caching allocator frees: after the work queued on
// the device's current stream and on the streams record_stream named.
void releaseImported(void* context) {
  auto* imported = static_cast<Imported*>(context);
  if (orIsForkedChild()) return;  // the parent's mapping; nothing to give back
  std::vector<orEvent> events;
  try {
    std::vector<c10::Stream> streams{getCurrentStream(imported->device)};
    streams.insert(streams.end(), imported->used_on.begin(), imported->used_on.end());
    for (const auto& stream : streams) {
      orEvent event = nullptr;
      if (orEventCreate(&event, false) != orSuccess) continue;
      events.push_back(event);
      const orError error = orEventRecordUnlessCapturing(event, rawStream(stream));
      if (error == orErrorStreamCaptureUnsupported) {
        // A graph captured now may replay over the memory: kept for good.
        for (orEvent e : events) orEventDestroy(e);
        return;
      }
      if (error != orSuccess) {  // a failed stream: passed
        orEventDestroy(event);
        events.pop_back();
      }
    }
    importReleaser().add(imported, std::move(events));
    return;
  } catch (...) {
  }
  for (orEvent e : events) orEventDestroy(e);
  imported->release();  // could not order it: nothing left to wait with
}

// The receiver reads after the work queued so far on the sender's current
// stream: an interprocess event recorded there for it (CUDA's
// CudaIPCSentData event), or, past kMaxShareEvents or where no event can be
// recorded, that stream synchronised now. Null in the second case.
orEvent markWrittenForReceiver(const c10::Stream& stream, bool eventAllowed) {
  // A failed stream raises here, as the synchronisation did (a record on it
  // would only fail the receiver's stream).
  orStream raw = rawStream(stream);
  if (orStreamLastException(raw)) synchronizeStream(stream);
  orEvent event = nullptr;
  if (eventAllowed && orEventCreateInterprocess(&event) == orSuccess) {
    if (orEventRecord(event, raw) == orSuccess) return event;
    orEventDestroy(event);  // a capturing stream: its synchronize says why
  }
  synchronizeStream(stream);
  return nullptr;
}

// Receiver side: `device`'s current stream waits for the sender's event, or,
// if that stream cannot (it failed: it runs nothing more), the host does.
void waitForSender(const IpcStorageHandle& handle, c10::DeviceIndex device) {
  if (handle.event[0] == 0) return;  // the sender synchronised
  const int64_t pid = handle.event[0];
  orEvent event = nullptr;
  orError error = orIpcOpenEventHandle(
      &event, {pid, handle.event[1], static_cast<uint64_t>(handle.event[2]),
               static_cast<uint64_t>(handle.event[3]), static_cast<uint64_t>(handle.event[4])});
  TORCH_CHECK(error == orSuccess, "openreg: cannot open the event of the storage shared by process ",
              pid, ": ", orGetErrorString(error));
  auto destroy = c10::make_scope_exit([&] { orEventDestroy(event); });  // a queued wait keeps it
  orStream raw = rawStream(getCurrentStream(device));
  if (!orStreamLastException(raw) && orStreamWaitEvent(raw, event) == orSuccess) return;
  error = orEventSynchronize(event);
  TORCH_CHECK(error == orSuccess, "openreg: cannot use the storage shared by process ", pid, ": ",
              error == orErrorLaunchFailure ? "a kernel failed on its stream before the share"
                                            : orGetErrorString(error));
}

void checkNotForked() {
  TORCH_CHECK(!orIsForkedChild(), "Cannot re-initialize openreg in forked subprocess. To use "
              "openreg with multiprocessing, you must use the 'spawn' start method");
}

}  // namespace

IpcStorageHandle shareStorage(c10::Storage& storage) {
  checkNotForked();
  const c10::Device device = storage.device();
  TORCH_CHECK(device.type() == c10::DeviceType::PrivateUse1, "not an openreg storage");
  TORCH_CHECK(storage.nbytes() > 0 && storage.data(), "an empty storage has no memory to share");
  // A copy-on-write storage gets memory of its own first (it may allocate):
  // what the receiver maps must be this storage's alone. On its own device:
  // a queue's feeder thread pickles, whose current device is another one.
  c10::DeviceGuard guard(device);
  storage.mutable_data();
  collectSharedBlocks();
  SentSlots& sent = sentSlots();
  bool eventAllowed;
  {
    std::lock_guard<std::mutex> lock(sent.mutex);
    if (sent.events.size() >= kMaxShareEvents)
      for (SentData* live : alive()) releasedLocked(live);  // given back since
    eventAllowed = sent.events.size() < kMaxShareEvents;
  }
  orEvent written = markWrittenForReceiver(getCurrentStream(device.index()), eventAllowed);
  IpcStorageHandle handle;
  if (written) {
    orIpcEventHandle event;
    OPENREG_CHECK(orIpcGetEventHandle(&event, written));
    handle.event = {event.pid, event.fd, static_cast<int64_t>(event.inode),
                    static_cast<int64_t>(event.page), static_cast<int64_t>(event.incarnation)};
  }
  // Until the slot holds it, the event is this function's to destroy.
  auto destroyWritten = c10::make_scope_exit([&] {
    if (written) orEventDestroy(written);
  });
  orIpcMemHandle memory;
  OPENREG_CHECK(orIpcGetMemHandle(&memory, storage.data()));
  std::lock_guard<std::mutex> lock(sent.mutex);
  sent.init();
  int64_t slot;
  if (!sent.free.empty()) {
    slot = sent.free.back();
    sent.free.pop_back();
  } else if (sent.next < kSlots) {
    slot = sent.next++;
  } else {
    for (SentData* live : alive()) releasedLocked(live);  // given back by live storages' receivers
    TORCH_CHECK(!sent.free.empty(), "openreg: ", kSlots, " shared storages are still held by "
                "receiving processes; call torch.openreg.ipc_collect() after they released some");
    slot = sent.free.back();
    sent.free.pop_back();
  }
  sent.slots[slot].store(1, std::memory_order_release);  // this pickling's receiver
  if (written) sent.events[slot] = std::exchange(written, nullptr);
  // The first share hands the block to a SentData (CUDA's _share_cuda_ swap).
  auto& data = storage.mutable_data_ptr();
  if (data.get_deleter() != &deleteSent) {
    void* ptr = data.get();
    auto* owner = new SentData{std::move(data), {}};
    alive().insert(owner);
    storage.set_data_ptr_noswap(c10::DataPtr(ptr, owner, &deleteSent, device));
  }
  auto* owner = static_cast<SentData*>(storage.data_ptr().get_context());
  releasedLocked(owner);  // slots of earlier shares given back since
  owner->slots.push_back(slot);
  limbo().reserve(limbo().size() + alive().size());  // deleteSent must not allocate
  // The physical index: the receiver may see the device under another one
  // (OPENREG_VISIBLE_DEVICES).
  handle.device = orDevicePhysicalIndex(device.index());
  handle.nbytes = static_cast<int64_t>(storage.nbytes());
  handle.memory = {memory.pid, memory.fd, static_cast<int64_t>(memory.inode),
                   static_cast<int64_t>(memory.arenaBytes), static_cast<int64_t>(memory.offset)};
  handle.refcounts = {static_cast<int64_t>(getpid()), sent.fd, static_cast<int64_t>(sent.inode)};
  handle.slot = slot;
  return handle;
}

size_t collectSharedBlocks() {
  if (orIsForkedChild()) return 0;
  std::vector<SentData*> released;
  {
    std::lock_guard<std::mutex> lock(sentSlots().mutex);
    auto& dead = limbo();
    auto kept = std::stable_partition(dead.begin(), dead.end(),
                                      [](SentData* sent) { return !releasedLocked(sent); });
    released.assign(kept, dead.end());
    dead.erase(kept, dead.end());
  }
  for (SentData* sent : released) delete sent;  // frees the blocks, outside the lock
  return released.size();
}

c10::Storage openSharedStorage(const IpcStorageHandle& handle) {
  checkNotForked();
  const int visible = orDeviceFromPhysicalIndex(static_cast<int>(handle.device));
  TORCH_CHECK(visible >= 0, "openreg: the storage shared by process ", handle.memory[0],
              " is on physical openreg device ", handle.device,
              ", which this process does not see (OPENREG_VISIBLE_DEVICES)");
  TORCH_CHECK(handle.nbytes > 0 && handle.slot >= 0 && handle.slot < kSlots,
              "openreg: a malformed shared-storage handle");
  const auto pid = handle.memory[0];
  std::atomic<int64_t>* slots = receivedSlots(handle.refcounts);
  TORCH_CHECK(slots, "openreg: cannot open the openreg storage shared by process ", pid,
              ": it has exited, or this process may not open its files (/proc/", pid, "/fd)");
  // Until the storage holds it, a failure gives the slot's reference back.
  auto giveBack = c10::make_scope_exit(
      [&] { slots[handle.slot].fetch_sub(1, std::memory_order_acq_rel); });
  waitForSender(handle, static_cast<c10::DeviceIndex>(visible));
  orIpcMemHandle memory;
  memory.pid = static_cast<int32_t>(pid);
  memory.fd = static_cast<int32_t>(handle.memory[1]);
  memory.inode = static_cast<uint64_t>(handle.memory[2]);
  memory.arenaBytes = static_cast<uint64_t>(handle.memory[3]);
  memory.offset = static_cast<uint64_t>(handle.memory[4]);
  void* ptr = nullptr;
  const orError error = orIpcImport(visible, memory,
                                    static_cast<size_t>(handle.nbytes), &ptr);
  TORCH_CHECK(error == orSuccess, "openreg: cannot map the device memory shared by process ", pid,
              ": ", orGetErrorString(error));
  const auto device = static_cast<c10::DeviceIndex>(visible);
  auto* imported = new Imported{ptr, &slots[handle.slot], device, {}, {}};
  giveBack.release();  // the storage's release gives it back
  at::DataPtr data(ptr, imported, &releaseImported, c10::Device(c10::DeviceType::PrivateUse1, device));
  return c10::Storage(c10::Storage::use_byte_size_t(), static_cast<size_t>(handle.nbytes),
                      std::move(data), /*allocator=*/nullptr, /*resizable=*/false);
}

void reuseSharedStorage(const IpcStorageHandle& handle, c10::DeviceIndex device) {
  checkNotForked();
  TORCH_CHECK(handle.slot >= 0 && handle.slot < kSlots, "openreg: a malformed shared-storage handle");
  // The reference goes back after the wait (the sender then destroys the
  // event), or if it failed.
  auto giveBack = c10::make_scope_exit([&] {
    if (std::atomic<int64_t>* slots = receivedSlots(handle.refcounts))
      slots[handle.slot].fetch_sub(1, std::memory_order_acq_rel);
  });
  waitForSender(handle, device);
}

int64_t pendingSharedReleases() { return importReleaser().pending.load(); }

void awaitSharedWrites(std::chrono::milliseconds limit) {
  if (orIsForkedChild()) return;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  SentSlots& sent = sentSlots();
  std::lock_guard<std::mutex> lock(sent.mutex);
  for (const auto& [slot, event] : sent.events)
    for (auto delay = std::chrono::microseconds(50);
         orEventQueryNoSync(event) == orErrorNotReady && std::chrono::steady_clock::now() < deadline;
         delay = std::min(delay * 2, std::chrono::microseconds(5000)))
      std::this_thread::sleep_for(delay);
}

bool recordStreamOfShared(const c10::DataPtr& ptr, const c10::Stream& stream) {
  const c10::DataPtr* data = &ptr;
  if (data->get_deleter() == &deleteSent)  // shared on again: the block it owns
    data = &static_cast<SentData*>(data->get_context())->original;
  if (data->get_deleter() != &releaseImported) return false;
  auto* imported = static_cast<Imported*>(data->get_context());
  std::lock_guard<std::mutex> lock(imported->mutex);
  imported->used_on.push_back(stream);
  return true;
}

}  // namespace openreg
