// What CUDA's IPC is to torch.multiprocessing (THCPStorage_shareCuda,
// _new_shared_cuda and CudaIPCTypes for CUDA): an openreg storage pickled
// in one process is rebuilt in another over the same device memory.
//
// The receiver maps the sender's device memory (orIpcImport). The sender
// keeps the storage alive (openreg/_sharing.py holds it) until every
// receiver has dropped its copy, as CUDA's CudaIPCSentData does: each
// pickling takes a slot of a reference-count array that the sender shares
// the same way; the receiver's storage gives its reference back when it
// dies, after the work queued on its device's current stream, and the
// sender's next share (or torch.openreg.ipc_collect()) releases storages
// whose slots reached zero.
// Tests: tests/runtime/test_ipc.py.
#pragma once

#include <c10/core/Storage.h>

#include <array>
#include <cstdint>

namespace openreg {

// Everything a receiver needs, as integers for pickling.
struct IpcStorageHandle {
  int64_t device = 0;
  int64_t nbytes = 0;
  std::array<int64_t, 5> memory{};    // orIpcMemHandle: pid, fd, inode, arena bytes, offset
  std::array<int64_t, 3> refcounts{};  // the sender's slot array: pid, fd, inode
  int64_t slot = 0;
};

// Sender side: waits for the device's queued work (the receiver may read at
// once), then takes a slot holding one reference for this pickling.
IpcStorageHandle shareStorage(const c10::Storage& storage);
// Whether a slot's references all came back; if so the slot is free again
// and the sender may drop the storage it kept for it.
bool sharedSlotReleased(int64_t slot);
// Receiver side: a storage of handle.device over the sender's memory.
c10::Storage openSharedStorage(const IpcStorageHandle& handle);

}  // namespace openreg
