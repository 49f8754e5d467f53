// What CUDA's IPC is to torch.multiprocessing (THCPStorage_shareCuda,
// _new_shared_cuda and CudaIPCTypes for CUDA): an openreg storage pickled
// in one process is rebuilt in another over the same device memory.
//
// The receiver maps the sender's device memory (orIpcImport), and its
// current stream waits for an interprocess event the sender recorded on its
// own current stream at pickling (CUDA's way: the sender's host never waits;
// past 1000 live events it synchronises that stream instead). As CUDA's
// CudaIPCSentData does, sharing swaps the storage's DataPtr for one that
// owns the original block, and freeing the storage (or resizing it away, as
// FSDP frees parameters) keeps the block in a limbo until every receiver has
// dropped its copy: each pickling takes a slot of a reference-count array the
// sender shares the same way, which the receiver decrements when its storage
// dies, after the work of its device's current stream and of the streams
// record_stream named. torch.openreg.ipc_collect(), each share and an OOM
// free the blocks whose slots all reached zero.
// Tests: tests/runtime/test_ipc.py.
#pragma once

#include <c10/core/Storage.h>
#include <c10/core/Stream.h>

#include <array>
#include <chrono>
#include <cstdint>

namespace openreg {

// Everything a receiver needs, as integers for pickling.
struct IpcStorageHandle {
  int64_t device = 0;  // physical (orDevicePhysicalIndex): receivers may number it otherwise
  int64_t nbytes = 0;
  std::array<int64_t, 5> memory{};    // orIpcMemHandle: pid, fd, inode, arena bytes, offset
  std::array<int64_t, 3> refcounts{};  // the sender's slot array: pid, fd, inode
  int64_t slot = 0;
  std::array<int64_t, 5> event{};  // orIpcEventHandle: pid, fd, inode, page, incarnation (pid 0: none)
};

// Sender side: marks the point of its current stream the receiver's current
// stream must wait for, then takes a slot holding one reference for this
// pickling (the slot also keeps that event).
IpcStorageHandle shareStorage(c10::Storage& storage);
// Frees the blocks of dead shared storages that no receiver holds any more;
// returns how many (torch.openreg.ipc_collect; the allocator's OOM retry).
size_t collectSharedBlocks();
// Receiver side: a storage of handle.device over the sender's memory.
c10::Storage openSharedStorage(const IpcStorageHandle& handle);
// A receiver that already holds the handle's memory from an earlier handle
// keeps that storage: its `device`'s current stream waits for the sender's
// new point all the same, and the slot's reference goes back at once.
void reuseSharedStorage(const IpcStorageHandle& handle, c10::DeviceIndex device);
// Waits (at most `limit`) until the sender's streams reached every point
// its live shares' receivers wait for: a sender exiting before that would
// fail their streams (openreg/_sharing.py calls it at exit).
void awaitSharedWrites(std::chrono::milliseconds limit);
// Received storages dropped whose release still waits for their streams.
int64_t pendingSharedReleases();
// Tensor.record_stream on a received storage: its release also waits for
// `stream`. False if `ptr` is not a received storage's.
bool recordStreamOfShared(const c10::DataPtr& ptr, const c10::Stream& stream);

}  // namespace openreg
