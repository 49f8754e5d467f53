// Streams as PyTorch sees them: c10::Stream values (device + StreamId) mapped
// onto driver streams. No hook of its own: OpenRegGuardImpl's getStream,
// getNewStream, getStreamFromGlobalPool and exchangeStream hand these out.
// Mirrors c10/cuda/CUDAStream.h: a default stream per device, pools of low-
// and high-priority streams handed out round-robin, and a per-thread current
// stream per device. Also the waits on them: stream and device
// synchronisation, and checkKernelError, which raises a stream's failed
// kernel at a later call as CUDA reports asynchronous errors.
//
// StreamId layout: 0 = default stream, 1..32 = priority 0 pool, 33..64 =
// high-priority pool (any priority < 0), then streams handed out one each by
// createDedicatedStream.
#pragma once

#include <c10/core/Stream.h>
#include <c10/util/ScopeExit.h>

#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "driver/Driver.h"

namespace openreg {

constexpr int kMaxDedicatedStreams = 256;  // per device, per process

c10::Stream getDefaultStream(c10::DeviceIndex device);
// priority < 0 selects the high-priority pool, as torch.cuda.Stream(priority=-1).
c10::Stream getStreamFromPool(c10::DeviceIndex device, int priority);
// A stream no one else is handed while it is held (cudaStreamCreate's, not
// the pool's): for work that may block it for long, such as oreg_ccl's future
// events. At most kMaxDedicatedStreams per device at once; a released one is
// handed out again (its driver stream lives on: work queued on it still runs).
c10::Stream createDedicatedStream(c10::DeviceIndex device);
void releaseDedicatedStream(const c10::Stream& stream);
c10::Stream getCurrentStream(c10::DeviceIndex device);
void setCurrentStream(const c10::Stream& stream);
// The driver stream behind a c10::Stream (created lazily).
orStream rawStream(const c10::Stream& stream);
int streamPriority(const c10::Stream& stream);
// Waits for the stream; raises with the kernel's message if one failed.
void synchronizeStream(const c10::Stream& stream);
// Runs `body` on this thread as `stream`'s next item if the stream is idle
// (orStreamBeginHostWork: kernels other threads launch meanwhile run after it,
// and synchronisation waits for it) and returns true; false, running nothing,
// if the stream is busy.
template <class Body>
bool runOnHostIfIdle(const c10::Stream& stream, Body&& body) {
  const orStream raw = rawStream(stream);
  if (!orStreamBeginHostWork(raw)) return false;
  auto end = c10::make_scope_exit([raw] { orStreamEndHostWork(raw); });
  body();
  return true;
}
// Runs `body` as `stream`'s next item (runOnHostIfIdle), waiting for the
// stream while it is busy (a failed stream's error raises from that wait).
template <class Body>
void runOnHostInStreamOrder(const c10::Stream& stream, Body&& body) {
  while (!runOnHostIfIdle(stream, body)) synchronizeStream(stream);
}
// Waits for every stream of the device, and first for the work registered
// with addDeviceSynchronizeWaiter; then raises a failed kernel's error, or
// else the first error a waiter returned.
void synchronizeDevice(c10::DeviceIndex device);
// Work that runs off the streams but that a device synchronisation waits for,
// as cudaDeviceSynchronize waits for NCCL's kernels (oreg_ccl's operations on
// openreg tensors): `waiter(device)` returns once what was issued for the
// device so far has finished, with the error of one that failed (or null).
using DeviceSynchronizeWaiter = std::function<std::exception_ptr(c10::DeviceIndex)>;
void addDeviceSynchronizeWaiter(DeviceSynchronizeWaiter waiter);
// The default and pool streams only, where kernels run (random ones among
// them) and whose memory the allocator hands out, not dedicated streams,
// which may hold for a peer's collective. `raisesKernelErrors`: a failed
// kernel's error, as synchronizeDevice (other driver errors always raise).
// The runtime's own wait (orStreamDrain): the race checker does not take it
// as a host synchronisation the program could rely on.
void synchronizeComputeStreams(c10::DeviceIndex device, bool raisesKernelErrors = true);
// The streams synchronizeComputeStreams waits for that exist so far (one
// never created has nothing queued): to order a release after their queued
// work with events, where waiting would block the caller.
std::vector<orStream> computeStreams(c10::DeviceIndex device);
// Whether the calling thread's current stream of `device` captures a graph,
// without creating that stream (nor initialising the device) to find out.
bool currentStreamIsCapturing(c10::DeviceIndex device);
// Raises for `error`; a kernel failure (orErrorLaunchFailure) with the failed
// kernel's exception `cause`, reported at this later call as CUDA reports its
// asynchronous errors. `where`: the stream, event or device it was seen on.
// A failed collective (`cause` a DistBackendError: the stream waited for an
// oreg_ccl operation that failed) raises DistBackendError, as c10d does.
void checkKernelError(orError error, const std::string& where, std::exception_ptr cause);

}  // namespace openreg
