// The simulated openreg driver: a small, torch-free C++ API named after CUDA's
// runtime (orMalloc ~ cudaMalloc, orStreamSynchronize ~ cudaStreamSynchronize).
//
// What it simulates:
//  - devices: OPENREG_DEVICE_COUNT of them, each with OPENREG_DEVICE_MEMORY bytes,
//    of which a process sees those OPENREG_VISIBLE_DEVICES lists (as
//    CUDA_VISIBLE_DEVICES: device 0 is the first listed).
//  - device memory: one memfd per device mapped twice. The *device* mapping
//    (PROT_NONE) is what orMalloc hands out, so host code that dereferences a
//    device pointer faults like it would on a GPU; the *kernel* mapping (RW)
//    is what kernels running on streams use (orKernelPtr translates).
//  - streams: each stream is an in-order queue executed by its own worker
//    thread, concurrently with the host and other streams.
//  - events: markers recorded on a stream; streams and the host can wait on them.
//
// Thread safety: every function may be called from any thread.
// Errors: functions return an orError; nothing here throws (kernels' own
// exceptions are captured and reported as orErrorLaunchFailure later, sticky
// per stream, like CUDA's asynchronous errors).
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace openreg {

enum orError {
  orSuccess = 0,
  orErrorInvalidDevice,      // device index out of range
  orErrorMemoryAllocation,   // device capacity exhausted
  orErrorInvalidValue,       // bad pointer / handle / argument
  orErrorNotReady,           // query: work still pending
  orErrorLaunchFailure,      // a kernel raised; see orStreamLastException / orErrorMessage
  orErrorForkedChild,        // driver used in a fork of an initialised process
  orErrorDeviceUnavailable,  // the device's memory could not be mapped at all
  orErrorDataRace,           // the race checker refused a launch: orSanitizerLastReport says why
  orErrorStreamCaptureUnsupported,  // an operation a capturing stream cannot record (a wait, a sync)
  orErrorStreamCaptureInvalidated,  // end of a capture during which such an operation was refused
  orErrorStreamCaptureUnmatched,    // a capture ended on a stream that did not begin it
  orErrorStreamCaptureUnjoined,     // a capture ended before waiting for a stream that forked into it
  orErrorStreamCaptureMerge,        // a wait would join two captures
  orErrorIpcPeerExited,  // the process that recorded an interprocess event exited before it completed
};

const char* orGetErrorString(orError error);

// ---- devices ---------------------------------------------------------------
// The most OPENREG_DEVICE_COUNT may say; per-device tables are sized by it.
constexpr int orMaxDevices = 64;
// The devices this process sees: OPENREG_VISIBLE_DEVICES of the
// OPENREG_DEVICE_COUNT (default 8; 0 if invalid) physical ones.
int orDeviceCount();
int orPhysicalDeviceCount();  // OPENREG_DEVICE_COUNT as read at start-up (0 if invalid)
// A device's index among all OPENREG_DEVICE_COUNT (what identifies it to other
// processes, whatever each sees), and back (-1: out of range, or not visible).
int orDevicePhysicalIndex(int device);
int orDeviceFromPhysicalIndex(int physical);
size_t orDeviceTotalMemory();        // OPENREG_DEVICE_MEMORY in whole 4 KiB pages, default 16 GiB
// What is wrong with OPENREG_DEVICE_COUNT / OPENREG_DEVICE_MEMORY ("" if
// nothing): the PyTorch layer refuses to use a device while this is set.
const std::string& orConfigError();
bool orIsInitialized();              // any device touched yet in this process
// Initialises the driver without touching memory (cudaSetDevice's context
// creation): from then on a fork's child may not use it.
orError orInit();
bool orIsForkedChild();              // true in a fork of an initialised parent
orError orDeviceSynchronize(int device);
// The first kernel exception among the device's streams (null if none).
std::exception_ptr orDeviceLastException(int device);

// ---- memory ----------------------------------------------------------------
// Device memory is sub-allocated from a per-device arena; freed ranges give
// their pages back to the OS (like cudaFree returning memory to the driver).
orError orMalloc(int device, void** ptr, size_t bytes);
orError orFree(void* ptr);
size_t orMemoryUsed(int device);     // bytes currently held by orMalloc
// The kernel-visible address of a device pointer (nullptr stays nullptr).
void* orKernelPtr(const void* device_ptr);
// The device a pointer belongs to, or -1 for host memory.
int orPointerDevice(const void* ptr);

// ---- peer access: another process's device memory (~ cudaIpc*MemHandle) -----
// Ranks on one host read each other's device memory the way CUDA processes do
// through IPC handles over NVLink: the owner makes a handle, the reader opens
// it once and then copies with plain loads. The handle names the owner's
// memfd; opening maps all of it (through /proc/PID/fd, which needs the same
// permission as ptrace), so one opening serves every later pointer into it.
// The memfd's inode identifies it: a reused pid or fd number names another
// file, and opening fails.
struct orIpcMemHandle {
  int32_t pid = 0;          // the owning process
  int32_t fd = -1;          // its memfd of the device's memory
  uint64_t inode = 0;       // that memfd's
  uint64_t arenaBytes = 0;  // and its size
  uint64_t offset = 0;      // of the pointer within it
};
// orErrorInvalidValue unless ptr (a device or kernel pointer) is device memory.
orError orIpcGetMemHandle(orIpcMemHandle* handle, const void* ptr);
// Maps the whole device memory `handle` lies in, read-write (not inherited by
// fork children); handle.offset bytes past *base is the handle's pointer. The
// mapping keeps the memory alive even if the owner exits; callers cache it per
// (pid, fd, inode) and close it with orIpcCloseMemHandle(base, handle.arenaBytes).
// orErrorMemoryAllocation: out of file descriptors or address space, which may
// pass (try again later); orErrorInvalidValue: not openable (no permission, or
// not that device memory any more).
orError orIpcOpenMemHandle(void** base, const orIpcMemHandle& handle);
orError orIpcCloseMemHandle(void* base, size_t arenaBytes);
// cudaIpcOpenMemHandle proper: maps `bytes` of the handle's memory into this
// process as memory of `device`. *ptr is a device pointer like orMalloc's
// (host access faults; kernels reach it through orKernelPtr), valid until
// orIpcRelease(*ptr); the mapping keeps the pages even if the owner frees or
// exits. orIpcGetMemHandle of an imported pointer gives the owner's handle.
orError orIpcImport(int device, const orIpcMemHandle& handle, size_t bytes, void** ptr);
orError orIpcRelease(void* ptr);

// ---- streams ---------------------------------------------------------------
struct orStream_st;
using orStream = orStream_st*;

// What a kernel touches: the bytes [begin, begin + bytes) of device memory
// (device pointers), read or written. The race checker (below) compares them
// across streams. With a period, only some of those bytes: those whose
// address is, modulo `period`, in [phase, phase + width) (wrapping); a view
// like x[:, 0] of a tall matrix, too many runs to list one by one.
struct orAccess {
  const void* begin;
  size_t bytes;
  bool write;
  const char* what = nullptr;  // the operation's name for reports (a static string), or null
  size_t period = 0;           // 0: every byte of the range
  size_t phase = 0;
  size_t width = 0;
  // Every period of the range has its window touched (one strided dimension,
  // or dimensions that tile): a write then overwrites what was there.
  bool every_period = false;
};

// Streams are created once and live as long as the process (like CUDA's pools).
orError orStreamCreate(int device, orStream* stream);
// Called on a stream's worker thread when it has had no work for 50 ms,
// before it sleeps: the layer above frees per-thread resources its kernels
// hold (the ATen layer: the thread's OpenMP team). Set once, before the first
// stream is created.
void orSetStreamIdleHook(void (*hook)());
// Queue `kernel` on `stream`; returns before it runs.
orError orLaunchKernel(orStream stream, std::function<void()> kernel,
                       std::vector<orAccess> accesses = {});
// A kernel the host makes when it is queued, for the stream it is queued on.
// Outside a capture `prepare` runs at once and its kernel is launched. In a
// capture it is recorded, and every launch of the graph calls it again, on the
// launching thread and in capture order, before queueing the replay: what a
// captured NCCL kernel needs, since a collective must join its process
// group's queue in the host's order of replays, as its peers' do.
using orPrepare = std::function<std::function<void()>(orStream)>;
orError orLaunchPreparedKernel(orStream stream, orPrepare prepare,
                               std::vector<orAccess> accesses = {});
orError orStreamQuery(orStream stream);        // orSuccess or orErrorNotReady
// Whether everything queued on `stream` has run (false while it captures),
// for the runtime's bookkeeping: unlike orStreamQuery, the race checker does
// not count it as the host seeing the work end (see orStreamDrain).
bool orStreamIsIdle(orStream stream);
// How many items (kernels, event records and waits) were ever queued on
// `stream`: a position in it, to tell whether anything was queued since.
uint64_t orStreamLaunchCount(orStream stream);
orError orStreamSynchronize(orStream stream);  // blocks the calling thread
// The same wait for the runtime's own bookkeeping (the allocator releasing
// memory, a graph's pool, the profiler): the race checker does not count it
// as the host seeing the work end, since a CUDA program cannot rely on the
// runtime's internal waits (and a garbage-collected graph would otherwise
// hide a race at random).
orError orStreamDrain(orStream stream);
// Work the host thread runs itself as `stream`'s next item (a blocking copy,
// an operator run synchronously): Begin claims the stream if it is idle (false,
// claiming nothing, if it is busy, failed or capturing). Until End, the stream
// has that item pending: queries say not ready, synchronisation and events
// wait for it, and kernels other threads launch on the stream run after it.
bool orStreamBeginHostWork(orStream stream);
void orStreamEndHostWork(orStream stream);
// The first kernel exception on this stream (null if none; sticky), and its
// message (c10 errors without their C++ backtrace, as PyTorch shows them).
std::exception_ptr orStreamLastException(orStream stream);
std::string orStreamLastError(orStream stream);
std::string orErrorMessage(std::exception_ptr error);  // "" for null

// ---- graphs (cudaStreamBeginCapture / cudaGraphLaunch) ---------------------
// Between begin and end capture, kernels launched on `stream` are recorded,
// not run; a graph launch queues them, in the order they were launched, as
// one kernel, on any stream of the device. An event recorded on a capturing
// stream marks a point of the capture: another stream of the device that
// waits for it takes part in the capture from then on (CUDA's fork), and the
// capture can end only once `stream` has waited for an event recorded on each
// such stream after its last kernel (the join; else orErrorStreamCaptureUnjoined).
// Synchronising or querying a capturing stream or a capture's event, waiting
// on a capturing stream for an event recorded outside the capture, or
// synchronising its device returns orErrorStreamCaptureUnsupported and
// invalidates the capture: it goes on recording, and its end returns
// orErrorStreamCaptureInvalidated with no graph. The race checker checks a
// replay as one kernel touching what the captured kernels touched.
struct orGraph_st;
using orGraph = orGraph_st*;
orError orStreamBeginCapture(orStream stream);
orError orStreamEndCapture(orStream stream, orGraph* graph);
bool orStreamIsCapturing(orStream stream);
// The stream that began the capture `stream` takes part in (itself, or the one it
// forked from); null when it is not capturing.
orStream orStreamCaptureOrigin(orStream stream);
orError orGraphLaunch(orGraph graph, orStream stream);
// What orGraphLaunch queues on `stream` (one kernel running the graph's, made
// by calling the graph's prepared kernels: it may throw what they throw), for
// a caller that launches it itself, as a prepared kernel when it launches
// into a capture; and the memory its kernels touch for the race checker (none
// while the checker is off).
orPrepare orGraphPrepare(orGraph graph);
std::vector<orAccess> orGraphAccesses(orGraph graph);
size_t orGraphKernelCount(orGraph graph);
orError orGraphDestroy(orGraph graph);  // a queued launch keeps what it runs

// ---- events ----------------------------------------------------------------
struct orEvent_st;
using orEvent = orEvent_st*;

orError orEventCreate(orEvent* event, bool enable_timing);
orError orEventDestroy(orEvent event);
orError orEventRecord(orEvent event, orStream stream);
// For the runtime's own ordering (the allocator): records a timing-less,
// non-interprocess `event` on `stream` unless the stream captures, checked
// atomically with the record (orErrorStreamCaptureUnsupported then, recording
// nothing): such a record must never become a point of a program's capture.
orError orEventRecordUnlessCapturing(orEvent event, orStream stream);
orError orStreamWaitEvent(orStream stream, orEvent event);
// orSuccess once the recorded work ran, orErrorNotReady before; once it ran,
// orErrorLaunchFailure if a kernel of its stream failed (sticky, as CUDA's).
orError orEventQuery(orEvent event);
// The stream the event was last recorded on (nullptr if never recorded).
orStream orEventStream(orEvent event);
orError orEventSynchronize(orEvent event);
// orEventQuery for an allocator's polling: the race checker does not take it
// for the program synchronising with the event's stream.
orError orEventQueryNoSync(orEvent event);
// Milliseconds between two recorded, completed, timing-enabled events
// (orErrorInvalidDevice: recorded on two devices).
orError orEventElapsedTime(float* ms, orEvent start, orEvent end);

// Interprocess events (~ cudaEventInterprocess, cudaIpcGetEventHandle,
// cudaIpcOpenEventHandle): the event's state lives in a page of a memfd its
// creator shares by all its events (one descriptor per 1024 of them), which
// another process opens through /proc (as peer device memory). Every process holding
// it may record it, wait for it on a stream, query and synchronise with it;
// each sees the latest record made in any of them. A record is published
// when its stream reaches it, also after a kernel failed there (waiters then
// fail with orErrorLaunchFailure); a recorder that exits before that fails
// them with orErrorIpcPeerExited. No timing, no use in a capture.
struct orIpcEventHandle {
  int64_t pid = 0;     // the creating process
  int64_t fd = -1;     // its memfd holding the event
  uint64_t inode = 0;  // that memfd's
  uint64_t page = 0;   // the event's page in it
  uint64_t incarnation = 0;  // which of the events that page held: a stale handle fails
};
orError orEventCreateInterprocess(orEvent* event);
// orErrorInvalidValue for an event not created interprocess.
orError orIpcGetEventHandle(orIpcEventHandle* handle, orEvent event);
// orErrorInvalidValue: no such event (its creator destroyed it or exited, or
// the handle is not one).
orError orIpcOpenEventHandle(orEvent* event, const orIpcEventHandle& handle);
bool orEventIsInterprocess(orEvent event);

// ---- race checker (~ torch.cuda._sanitizer) ---------------------------------
// Off unless OPENREG_SANITIZER=1 or orSanitizerEnable(true). When on, every
// launch's accesses are checked, on the launching thread, against the earlier
// accesses of other streams to the same bytes: each stream keeps a vector
// clock of what it is ordered after (its own launches, the events it waited
// for, what the host had synchronised with when it launched), and an access
// must come after the other streams' conflicting accesses (read vs write,
// write vs anything) in that order, whatever the memory's tensor lifetime: a
// block freed while another stream still read it and reused on its own
// stream (a missing record_stream) is caught at the reusing kernel. A launch
// that races returns orErrorDataRace and is not queued.
void orSanitizerEnable(bool on);  // turning it on or off forgets all history
bool orSanitizerEnabled();
// Why this thread's last launch returned orErrorDataRace.
std::string orSanitizerLastReport();
// How the checker names `stream` in its reports (e.g. torch's "stream 1 on device openreg:0").
void orSanitizerSetLabel(orStream stream, const std::string& label);
// The host touches `accesses` in `stream`'s order (it waited for the stream
// and the stream's later work comes after): checked as a kernel on it would be.
orError orSanitizerStreamAccess(orStream stream, const std::vector<orAccess>& accesses);
// An allocator hands [begin, begin + bytes) out again because `event`, recorded
// on a stream that used it (record_stream), completed: the accesses before
// that event are retired, so the next user is not reported against them.
void orSanitizerRetire(const void* begin, size_t bytes, orEvent event);

// Work that runs off the streams but is ordered with them, such as oreg_ccl's
// collectives (NCCL runs them on a stream of its own): a lane is such an
// in-order sequence. orSanitizerLaneAccess checks and records `accesses` as
// the lane's next operation, ordered after the work queued so far on `after`,
// and returns the point a waiter joins (null while the checker is off);
// orSanitizerStreamJoin orders `stream`'s later work after that point,
// orSanitizerHostJoin the host's (a host wait for the lane's operation).
struct orSanitizerClock;
using orSanitizerPoint = std::shared_ptr<const orSanitizerClock>;
int orSanitizerLaneCreate(const std::string& label);
orError orSanitizerLaneAccess(int lane, orStream after, const std::vector<orAccess>& accesses,
                              orSanitizerPoint* point);
void orSanitizerStreamJoin(orStream stream, const orSanitizerPoint& point);
void orSanitizerHostJoin(const orSanitizerPoint& point);

// ---- pinned host memory ----------------------------------------------------
orError orHostAlloc(void** ptr, size_t bytes);
orError orHostFree(void* ptr);
bool orIsPinned(const void* ptr);

}  // namespace openreg
