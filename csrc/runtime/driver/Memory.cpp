// Device memory: one memfd per device, mapped twice.
//
//   device mapping (PROT_NONE)  <- addresses orMalloc returns; host access faults
//   kernel mapping (READ|WRITE) <- the same pages, used by kernels on streams
//
// Both mappings are made once, so launching a kernel costs no mprotect/mmap
// syscall. Allocation inside the arena is first-fit over a sorted free list;
// freed ranges are coalesced and their whole pages are punched out of the memfd
// so the host gets the memory back. The arena spans four times the capacity
// (address space only: pages exist while allocated) and the capacity limits
// the bytes in use, so free memory split into holes still serves a large
// allocation, as a GPU maps physical pages into a large virtual space. The memfd stays open so that other
// processes can map it (orIpcOpenMemHandle).
#include "Internal.h"
#include "PeerMemfd.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <atomic>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace openreg {
namespace {

constexpr size_t kAlignment = 512;  // cudaMalloc returns 256/512-aligned pointers
constexpr size_t kPage = 4096;

struct DeviceArena {
  std::once_flag mapped;
  orError map_error = orSuccess;
  char* device_base = nullptr;  // PROT_NONE view
  char* kernel_base = nullptr;  // RW view
  size_t capacity = 0;  // bytes in use at most (OPENREG_DEVICE_MEMORY)
  size_t span = 0;      // bytes of address space each view covers
  int fd = -1;  // the memfd, for peers (orIpcGetMemHandle)
  uint64_t inode = 0;

  std::mutex mutex;
  std::map<size_t, size_t> free_ranges;  // offset -> size   (GUARDED_BY mutex)
  std::map<size_t, size_t> live;         // offset -> size   (GUARDED_BY mutex)
  std::atomic<size_t> used{0};
};

std::array<DeviceArena, orMaxDevices> g_arenas;

// Maps `span` bytes of a new memfd twice; false (nothing left behind) if it
// cannot.
bool mapViews(int device, DeviceArena& arena, size_t span) {
  std::string name = "openreg-device-" + std::to_string(device);
  int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0) return false;
  if (ftruncate(fd, static_cast<off_t>(span)) != 0) {
    close(fd);
    return false;
  }
  void* dev = mmap(nullptr, span, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  void* ker = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (dev == MAP_FAILED || ker == MAP_FAILED) {
    if (dev != MAP_FAILED) munmap(dev, span);
    if (ker != MAP_FAILED) munmap(ker, span);
    close(fd);
    return false;
  }
  // Keep core dumps small: a 16 GiB simulated device must not be written out.
  madvise(dev, span, MADV_DONTDUMP);
  madvise(ker, span, MADV_DONTDUMP);
  arena.device_base = static_cast<char*>(dev);
  arena.kernel_base = static_cast<char*>(ker);
  arena.span = span;
  arena.fd = fd;
  struct stat st{};
  if (fstat(fd, &st) == 0) arena.inode = st.st_ino;
  arena.free_ranges[0] = span;
  return true;
}

orError mapArena(int device, DeviceArena& arena) {
  const size_t capacity = orDeviceTotalMemory();  // whole pages
  arena.capacity = capacity;
  // Room against fragmentation where the address space allows it, else the
  // capacity itself. Failing both is a configuration problem (a capacity
  // beyond the address space or file limits), not an out-of-memory.
  const bool roomy = capacity <= std::numeric_limits<size_t>::max() / 4 &&
                     mapViews(device, arena, 4 * capacity);
  return roomy || mapViews(device, arena, capacity) ? orSuccess : orErrorDeviceUnavailable;
}

DeviceArena* arenaFor(int device, orError* error) {
  if (device < 0 || device >= orDeviceCount()) {
    *error = orErrorInvalidDevice;
    return nullptr;
  }
  detail::markInitialized();
  DeviceArena& arena = g_arenas[device];
  std::call_once(arena.mapped, [&] { arena.map_error = mapArena(device, arena); });
  *error = arena.map_error;
  return arena.map_error == orSuccess ? &arena : nullptr;
}

// Finds the arena one of whose mappings (device, or also kernel) contains ptr
// (lock-free: bases never change after mapping); *base_out: that mapping's base.
DeviceArena* arenaOf(const void* ptr, int* device_out, bool kernel_too = false,
                     const char** base_out = nullptr) {
  auto p = static_cast<const char*>(ptr);
  int n = orDeviceCount();
  for (int d = 0; d < n; ++d) {
    DeviceArena& a = g_arenas[d];
    if (!a.device_base) continue;
    for (const char* base : {a.device_base, kernel_too ? a.kernel_base : nullptr}) {
      if (!base || p < base || p >= base + a.span) continue;
      if (device_out) *device_out = d;
      if (base_out) *base_out = base;
      return &a;
    }
  }
  return nullptr;
}

// Another process's device memory mapped here (orIpcImport), as the arenas
// are: a PROT_NONE view whose addresses are device pointers, and a RW view.
struct Import {
  char* device_base;   // page-aligned PROT_NONE view
  char* kernel_base;   // page-aligned RW view
  size_t span;         // bytes of each view
  int device;
  orIpcMemHandle owner;  // the handle of device_base in the owner's arena
};
std::mutex g_imports_mutex;
std::map<const char*, Import> g_imports;  // by device_base (GUARDED_BY g_imports_mutex)
std::atomic<size_t> g_import_count{0};    // g_imports.size(): the lookup's fast path

// The import one of whose views contains ptr, copied (nullopt if none).
// `in_signal_handler`: gives up rather than wait for the lock.
std::optional<Import> importOf(const void* ptr, bool kernel_too = false,
                               bool in_signal_handler = false) {
  if (g_import_count.load(std::memory_order_acquire) == 0) return std::nullopt;
  auto p = static_cast<const char*>(ptr);
  std::unique_lock<std::mutex> lock(g_imports_mutex, std::defer_lock);
  if (in_signal_handler ? !lock.try_lock() : (lock.lock(), false)) return std::nullopt;
  auto it = g_imports.upper_bound(p);
  if (it != g_imports.begin() && p < std::prev(it)->second.device_base + std::prev(it)->second.span)
    return std::prev(it)->second;
  if (kernel_too)  // rare (orIpcGetMemHandle): a scan
    for (const auto& [base, import] : g_imports)
      if (p >= import.kernel_base && p < import.kernel_base + import.span) return import;
  return std::nullopt;
}

void releasePages(DeviceArena& arena, size_t offset, size_t size) {
  size_t begin = (offset + kPage - 1) / kPage * kPage;
  size_t end = (offset + size) / kPage * kPage;
  if (end > begin) madvise(arena.kernel_base + begin, end - begin, MADV_REMOVE);
}

}  // namespace

namespace detail {
int deviceOfInaccessibleAddress(const void* addr) {
  int device = -1;
  if (!arenaOf(addr, &device))
    if (auto import = importOf(addr, false, /*in_signal_handler=*/true)) device = import->device;
  return device;
}
}  // namespace detail

orError orMalloc(int device, void** ptr, size_t bytes) {
  OR_RETURN_IF_FORKED();
  if (!ptr) return orErrorInvalidValue;
  orError error;
  DeviceArena* arena = arenaFor(device, &error);
  if (!arena) return error;
  if (bytes == 0) {
    *ptr = nullptr;
    return orSuccess;
  }
  size_t size = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  std::lock_guard<std::mutex> lock(arena->mutex);
  if (size > arena->capacity - arena->used) return orErrorMemoryAllocation;
  for (auto it = arena->free_ranges.begin(); it != arena->free_ranges.end(); ++it) {
    if (it->second < size) continue;
    size_t offset = it->first;
    size_t remaining = it->second - size;
    arena->free_ranges.erase(it);
    if (remaining) arena->free_ranges[offset + size] = remaining;
    arena->live[offset] = size;
    arena->used += size;
    *ptr = arena->device_base + offset;
    return orSuccess;
  }
  return orErrorMemoryAllocation;
}

orError orFree(void* ptr) {
  OR_RETURN_IF_FORKED();
  if (!ptr) return orSuccess;
  DeviceArena* arena = arenaOf(ptr, nullptr);
  if (!arena) return orErrorInvalidValue;
  size_t offset = static_cast<char*>(ptr) - arena->device_base;
  std::lock_guard<std::mutex> lock(arena->mutex);
  auto live = arena->live.find(offset);
  if (live == arena->live.end()) return orErrorInvalidValue;
  size_t size = live->second;
  arena->live.erase(live);
  arena->used -= size;
  // Coalesce with neighbours so large allocations stay possible.
  auto next = arena->free_ranges.lower_bound(offset);
  if (next != arena->free_ranges.end() && offset + size == next->first) {
    size += next->second;
    next = arena->free_ranges.erase(next);
  }
  if (next != arena->free_ranges.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      arena->free_ranges.erase(prev);
    }
  }
  arena->free_ranges[offset] = size;
  releasePages(*arena, offset, size);
  detail::sanitizerForget(arena->device_base + offset, size);
  return orSuccess;
}

size_t orMemoryUsed(int device) {
  if (device < 0 || device >= orDeviceCount()) return 0;
  return g_arenas[device].used.load();
}

void* orKernelPtr(const void* device_ptr) {
  if (!device_ptr) return nullptr;
  DeviceArena* arena = arenaOf(device_ptr, nullptr);
  if (arena) return arena->kernel_base + (static_cast<const char*>(device_ptr) - arena->device_base);
  if (auto import = importOf(device_ptr))
    return import->kernel_base + (static_cast<const char*>(device_ptr) - import->device_base);
  return const_cast<void*>(device_ptr);  // host (e.g. pinned) memory
}

int orPointerDevice(const void* ptr) {
  int device = -1;
  if (!arenaOf(ptr, &device))
    if (auto import = importOf(ptr)) device = import->device;
  return device;
}

orError orIpcGetMemHandle(orIpcMemHandle* handle, const void* ptr) {
  OR_RETURN_IF_FORKED();
  if (!handle || !ptr) return orErrorInvalidValue;
  const char* base = nullptr;
  const DeviceArena* a = arenaOf(ptr, nullptr, /*kernel_too=*/true, &base);
  if (!a) {
    auto import = importOf(ptr, /*kernel_too=*/true);
    if (!import) return orErrorInvalidValue;
    auto p = static_cast<const char*>(ptr);
    const bool kernelView = p >= import->kernel_base && p < import->kernel_base + import->span;
    *handle = import->owner;
    handle->offset += static_cast<uint64_t>(
        p - (kernelView ? import->kernel_base : import->device_base));
    return orSuccess;
  }
  handle->pid = static_cast<int32_t>(getpid());
  handle->fd = a->fd;
  handle->inode = a->inode;
  handle->arenaBytes = a->span;
  handle->offset = static_cast<uint64_t>(static_cast<const char*>(ptr) - base);
  return orSuccess;
}

namespace {
// Opens the handle's device memory (the owner's memfd, through /proc); *fd
// is then an openreg memfd with the handle's inode and size (after a pid or
// fd number was reused, it is not, and this fails).
orError openOwnerArena(const orIpcMemHandle& handle, int* fd) {
  if (handle.fd < 0 || handle.offset >= handle.arenaBytes) return orErrorInvalidValue;
  *fd = openPeerMemfd(handle.pid, handle.fd, handle.inode, handle.arenaBytes, "openreg-device-");
  if (*fd >= 0) return orSuccess;
  return errno == EMFILE || errno == ENFILE || errno == ENOMEM ? orErrorMemoryAllocation
                                                               : orErrorInvalidValue;
}

// Maps [offset, offset + bytes) of fd with `prot`, not dumped nor inherited
// by fork children (which must not pin a peer's memory).
void* mapShared(int fd, size_t offset, size_t bytes, int prot) {
  void* p = mmap(nullptr, bytes, prot, MAP_SHARED | MAP_NORESERVE, fd, static_cast<off_t>(offset));
  if (p == MAP_FAILED) return nullptr;
  madvise(p, bytes, MADV_DONTDUMP);
  madvise(p, bytes, MADV_DONTFORK);
  return p;
}
}  // namespace

orError orIpcOpenMemHandle(void** base, const orIpcMemHandle& handle) {
  if (!base) return orErrorInvalidValue;
  int fd = -1;
  if (orError error = openOwnerArena(handle, &fd); error != orSuccess) return error;
  void* p = mapShared(fd, 0, handle.arenaBytes, PROT_READ | PROT_WRITE);
  const int mapError = errno;
  close(fd);
  if (!p) return mapError == ENOMEM ? orErrorMemoryAllocation : orErrorInvalidValue;
  *base = p;
  return orSuccess;
}

orError orIpcImport(int device, const orIpcMemHandle& handle, size_t bytes, void** ptr) {
  OR_RETURN_IF_FORKED();
  if (!ptr || device < 0 || device >= orDeviceCount() || bytes == 0 ||
      handle.offset + bytes > handle.arenaBytes)
    return orErrorInvalidValue;
  detail::markInitialized();
  int fd = -1;
  if (orError error = openOwnerArena(handle, &fd); error != orSuccess) return error;
  const size_t begin = handle.offset / kPage * kPage;
  const size_t span = (handle.offset + bytes - begin + kPage - 1) / kPage * kPage;
  void* dev = mapShared(fd, begin, span, PROT_NONE);
  void* ker = dev ? mapShared(fd, begin, span, PROT_READ | PROT_WRITE) : nullptr;
  const int mapError = errno;
  close(fd);
  if (!ker) {
    if (dev) munmap(dev, span);
    return mapError == ENOMEM ? orErrorMemoryAllocation : orErrorInvalidValue;
  }
  orIpcMemHandle owner = handle;
  owner.offset = begin;
  Import import{static_cast<char*>(dev), static_cast<char*>(ker), span, device, owner};
  {
    std::lock_guard<std::mutex> lock(g_imports_mutex);
    g_imports.emplace(import.device_base, import);
    g_import_count.store(g_imports.size(), std::memory_order_release);
  }
  *ptr = import.device_base + (handle.offset - begin);
  return orSuccess;
}

orError orIpcRelease(void* ptr) {
  auto p = static_cast<const char*>(ptr);
  Import import;
  {
    std::lock_guard<std::mutex> lock(g_imports_mutex);
    auto it = g_imports.upper_bound(p);
    if (it == g_imports.begin()) return orErrorInvalidValue;
    --it;
    if (p >= it->second.device_base + it->second.span) return orErrorInvalidValue;
    import = it->second;
    g_imports.erase(it);
    g_import_count.store(g_imports.size(), std::memory_order_release);
  }
  detail::sanitizerForget(import.device_base, import.span);
  munmap(import.device_base, import.span);
  munmap(import.kernel_base, import.span);
  return orSuccess;
}

orError orIpcCloseMemHandle(void* base, size_t arenaBytes) {
  if (!base || munmap(base, arenaBytes) != 0) return orErrorInvalidValue;
  return orSuccess;
}

}  // namespace openreg
