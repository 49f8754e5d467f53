// torch.multiprocessing's sharing of openreg storages (OpenRegIPCTypes.h).
#include "OpenRegIPCTypes.h"

#include <c10/core/DeviceType.h>
#include <c10/util/Exception.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "OpenRegException.h"
#include "OpenRegFunctions.h"
#include "OpenRegStream.h"

namespace openreg {
namespace {

constexpr int64_t kSlots = 1 << 16;  // storages pickled and not yet released, per sender
constexpr size_t kSlotBytes = kSlots * sizeof(std::atomic<int64_t>);
constexpr char kRefcountsName[] = "openreg-ipc-refcounts";

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
  const std::string path = "/proc/" + std::to_string(id[0]) + "/fd/" + std::to_string(id[1]);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st{};
  char link[64] = {};
  const std::string opened = "/proc/self/fd/" + std::to_string(fd);
  const bool valid = fstat(fd, &st) == 0 && static_cast<int64_t>(st.st_ino) == id[2] &&
                     static_cast<size_t>(st.st_size) == kSlotBytes &&
                     readlink(opened.c_str(), link, sizeof(link) - 1) > 0 &&
                     std::strncmp(link, "/memfd:openreg-ipc-refcounts", 28) == 0;
  std::atomic<int64_t>* slots = valid ? mapSlots(fd) : nullptr;
  close(fd);
  if (slots) mapped->emplace(id, slots);
  return slots;
}

// A receiver's storage: the imported mapping and the reference it returns.
struct Imported {
  void* ptr;
  std::atomic<int64_t>* reference;
  c10::DeviceIndex device;

  void release() {
    orIpcRelease(ptr);
    reference->fetch_sub(1, std::memory_order_acq_rel);
    delete this;
  }
};

// Stream-ordered, as the caching allocator frees: after the work queued on
// the device's current stream, which may still read the memory.
void releaseImported(void* context) {
  auto* imported = static_cast<Imported*>(context);
  if (orIsForkedChild()) return;  // the parent's mapping; nothing to give back
  try {
    const orStream stream = rawStream(getCurrentStream(imported->device));
    // A graph captured now may replay over the memory: kept for good.
    if (orStreamIsCapturing(stream)) return;
    if (orLaunchKernel(stream, [imported] { imported->release(); }) == orSuccess) return;
  } catch (...) {
  }
  imported->release();  // a failed stream runs nothing more
}

}  // namespace

IpcStorageHandle shareStorage(const c10::Storage& storage) {
  const c10::Device device = storage.device();
  TORCH_CHECK(device.type() == c10::DeviceType::PrivateUse1, "not an openreg storage");
  TORCH_CHECK(storage.nbytes() > 0 && storage.data(), "an empty storage has no memory to share");
  // The receiver may read at once: everything queued that may write it has run.
  synchronizeDevice(device.index());
  orIpcMemHandle memory;
  OPENREG_CHECK(orIpcGetMemHandle(&memory, storage.data()));
  SentSlots& sent = sentSlots();
  std::lock_guard<std::mutex> lock(sent.mutex);
  sent.init();
  int64_t slot;
  if (!sent.free.empty()) {
    slot = sent.free.back();
    sent.free.pop_back();
  } else {
    TORCH_CHECK(sent.next < kSlots, "openreg: ", kSlots, " shared storages are still held by "
                "receiving processes; call torch.openreg.ipc_collect() after they released some");
    slot = sent.next++;
  }
  sent.slots[slot].store(1, std::memory_order_release);  // this pickling's receiver
  IpcStorageHandle handle;
  handle.device = device.index();
  handle.nbytes = static_cast<int64_t>(storage.nbytes());
  handle.memory = {memory.pid, memory.fd, static_cast<int64_t>(memory.inode),
                   static_cast<int64_t>(memory.arenaBytes), static_cast<int64_t>(memory.offset)};
  handle.refcounts = {static_cast<int64_t>(getpid()), sent.fd, static_cast<int64_t>(sent.inode)};
  handle.slot = slot;
  return handle;
}

bool sharedSlotReleased(int64_t slot) {
  SentSlots& sent = sentSlots();
  std::lock_guard<std::mutex> lock(sent.mutex);
  TORCH_CHECK(sent.slots && slot >= 0 && slot < sent.next, "not a shared slot: ", slot);
  if (sent.slots[slot].load(std::memory_order_acquire) != 0) return false;
  sent.free.push_back(slot);
  return true;
}

c10::Storage openSharedStorage(const IpcStorageHandle& handle) {
  check_device_index(handle.device);
  TORCH_CHECK(handle.nbytes > 0 && handle.slot >= 0 && handle.slot < kSlots,
              "openreg: a malformed shared-storage handle");
  const auto pid = handle.memory[0];
  std::atomic<int64_t>* slots = receivedSlots(handle.refcounts);
  TORCH_CHECK(slots, "openreg: cannot open the openreg storage shared by process ", pid,
              ": it has exited, or this process may not open its files (/proc/", pid, "/fd)");
  orIpcMemHandle memory;
  memory.pid = static_cast<int32_t>(pid);
  memory.fd = static_cast<int32_t>(handle.memory[1]);
  memory.inode = static_cast<uint64_t>(handle.memory[2]);
  memory.arenaBytes = static_cast<uint64_t>(handle.memory[3]);
  memory.offset = static_cast<uint64_t>(handle.memory[4]);
  void* ptr = nullptr;
  const orError error = orIpcImport(static_cast<int>(handle.device), memory,
                                    static_cast<size_t>(handle.nbytes), &ptr);
  TORCH_CHECK(error == orSuccess, "openreg: cannot map the device memory shared by process ", pid,
              ": ", orGetErrorString(error));
  const auto device = static_cast<c10::DeviceIndex>(handle.device);
  auto* imported = new Imported{ptr, &slots[handle.slot], device};
  at::DataPtr data(ptr, imported, &releaseImported, c10::Device(c10::DeviceType::PrivateUse1, device));
  return c10::Storage(c10::Storage::use_byte_size_t(), static_cast<size_t>(handle.nbytes),
                      std::move(data), /*allocator=*/nullptr, /*resizable=*/false);
}

}  // namespace openreg
