// Streams: an in-order queue of kernels executed by one worker thread per
// stream. Events: a (stream, sequence number) marker; complete once the
// stream has executed everything queued before it.
//
// Completion is tracked by sequence numbers: `enqueued` counts launched work,
// `completed` counts finished work. Waiters spin briefly (cheap when the work
// is short) and then block on the stream's condition variable, so many streams
// on few cores never busy-wait for long. A blocked waiter publishes the
// sequence number it needs in `wake_at`, and the worker wakes it only once
// that is reached: a host that waits for a long queue (loss.item() after a
// training step) is woken once, not after every kernel.
#include "Internal.h"
#include "IpcEvent.h"

#include <c10/util/Exception.h>
#include <c10/util/thread_name.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace openreg {

// One capture (orStreamBeginCapture to orStreamEndCapture): the kernels its
// streams launched, in the order the host issued them, which respects every
// event dependency among them (a wait can only name a record already made),
// so a replay runs them in that order on one stream. `origin` began it; other
// streams take part from their first wait for an event recorded in it (CUDA's
// fork) until the end, which needs the origin to have waited, directly or
// through other streams' events, for each of them after its last kernel (the
// join).
// For each member stream, the latest point of it a stream has waited for
// (kernels.size() when the awaited event was recorded there).
using Frontier = std::unordered_map<orStream, size_t>;
struct Capture {
  explicit Capture(orStream begun_by) : origin(begun_by) {}
  const orStream origin;
  std::mutex mutex;
  std::vector<std::function<void()>> kernels;  // GUARDED_BY mutex
  // Kernels made at each launch (orLaunchPreparedKernel), by their index in
  // `kernels`, which holds a no-op there.
  std::vector<std::pair<size_t, orPrepare>> prepared;  // GUARDED_BY mutex
  std::vector<orAccess> accesses;  // GUARDED_BY mutex; what the kernels touch, for the race checker
  // kernels.size() after each member's last launch (or its fork); not the origin.
  std::unordered_map<orStream, size_t> issued;  // GUARDED_BY mutex
  std::unordered_map<orStream, Frontier> joined;  // GUARDED_BY mutex; by waiting stream
  bool ended = false;  // GUARDED_BY mutex
  // A call the capture could not record was refused: the graph is incomplete,
  // so orStreamEndCapture discards it (CUDA's cudaErrorStreamCaptureInvalidated).
  std::atomic<bool> invalidated{false};
};

struct orStream_st {
  static constexpr uint64_t kNoWaiter = UINT64_MAX;

  int device = 0;
  int lane = -1;  // the race checker's

  std::mutex mutex;
  std::condition_variable work_cv;  // worker waits for kernels
  std::condition_variable done_cv;  // waiters wait for completion
  std::deque<std::function<void()>> queue;  // GUARDED_BY mutex
  // Kernels that ran, destroyed by the launching thread at its next launch or
  // synchronize: their captures were allocated there, so freeing them there
  // keeps malloc's per-thread caches warm instead of contending on its locks.
  std::vector<std::function<void()>> finished;  // GUARDED_BY mutex
  std::atomic<uint64_t> enqueued{0};
  std::atomic<int64_t> pending{0};  // queue length, readable without the mutex
  std::atomic<uint64_t> completed{0};
  // Lowest sequence number a blocked waiter needs (kNoWaiter: none). Written
  // under `mutex`; read by the worker after each kernel.
  std::atomic<uint64_t> wake_at{kNoWaiter};
  std::exception_ptr first_exception;  // GUARDED_BY mutex; sticky like CUDA's errors
  std::atomic<bool> failed{false};
  // The sequence number of the kernel that failed first (0: none), so a
  // record before it is not reported as failed (on_reached).
  std::atomic<uint64_t> failed_at{0};
  // While taking part in a capture: launches go there, not to `queue`.
  std::shared_ptr<Capture> capture;  // GUARDED_BY mutex
  std::atomic<bool> capturing{false};  // capture != null, readable without the mutex
  bool host_working = false;  // GUARDED_BY mutex; orStreamBeginHostWork's item runs
  // Called once the stream completed `seq`, with whether a kernel up to `seq`
  // failed, whether or not its kernels ran: an interprocess event's record is
  // published so, for waiters in other processes, which cannot see this
  // stream's counters (a failed stream skips its kernels).
  std::vector<std::pair<uint64_t, std::function<void(bool)>>> on_reached;  // GUARDED_BY mutex
  std::atomic<size_t> on_reached_count{0};
  void whenReached(uint64_t seq, std::function<void(bool)> callback);
  void runReached(uint64_t done);
  orError refuseWhileCapturing() {
    std::lock_guard<std::mutex> lock(mutex);
    if (capture) capture->invalidated = true;
    return orErrorStreamCaptureUnsupported;
  }
  std::thread worker;

  void run();
  void waitFor(uint64_t seq);
};

namespace {

using Clock = std::chrono::steady_clock;
// A waiter polls only briefly and without yielding: most waits are for a
// queue that is far from done (the end of a training step), and a yielding
// waiter costs the busy threads context switches (measured: DDP x4 on 2
// cores 2-3% faster than with 2000 polls, the later ones yielding).
constexpr int kSpinIterations = 100;
constexpr int kWorkerSpinIterations = 200;
// How long a worker waits for work before it calls the idle hook: far longer
// than a host's gaps between launches in a training loop, so what the hook
// frees is not rebuilt at every step.
constexpr auto kIdleBeforeHook = std::chrono::milliseconds(50);
void (*g_idle_hook)() = nullptr;

std::mutex g_registry_mutex;
std::vector<orStream> g_streams;  // GUARDED_BY g_registry_mutex; for orDeviceSynchronize

}  // namespace

void orStream_st::run() {
  std::function<void()> ran;
  for (;;) {
    std::function<void()> kernel;
    // A stream that just ran work is likely to get more soon: poll briefly
    // before sleeping, so back-to-back small launches skip a futex wake-up.
    for (int i = 0; i < kWorkerSpinIterations && pending.load(std::memory_order_acquire) == 0; ++i)
      std::this_thread::yield();
    {
      std::unique_lock<std::mutex> lock(mutex);
      if (ran) finished.push_back(std::move(ran));
      // Kernels queued behind the host's own item wait for it.
      auto has_work = [&] { return !queue.empty() && !host_working; };
      if (g_idle_hook && !work_cv.wait_for(lock, kIdleBeforeHook, has_work)) {
        lock.unlock();
        g_idle_hook();
        lock.lock();
      }
      work_cv.wait(lock, has_work);
      kernel = std::move(queue.front());
      queue.pop_front();
      pending.fetch_sub(1, std::memory_order_relaxed);
    }
    if (!failed.load(std::memory_order_relaxed)) {
      try {
        kernel();
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!first_exception) first_exception = std::current_exception();
        if (!failed.load()) failed_at = completed.load() + 1;  // this kernel's number
        failed = true;
      }
    }
    ran = std::move(kernel);
    // seq_cst increment then load, against the waiter's store then load of
    // the same two atomics: one of the two sides sees the other's write.
    uint64_t done = completed.fetch_add(1) + 1;
    if (on_reached_count.load() != 0) runReached(done);
    if (done >= wake_at.load()) {
      std::lock_guard<std::mutex> lock(mutex);
      wake_at.store(kNoWaiter);  // waiters still short of their target re-register
      done_cv.notify_all();
    }
  }
}

void orStream_st::waitFor(uint64_t seq) {
  for (int i = 0; i < kSpinIterations; ++i)
    if (completed.load(std::memory_order_acquire) >= seq) return;
  std::unique_lock<std::mutex> lock(mutex);
  for (;;) {
    if (seq < wake_at.load()) wake_at.store(seq);
    if (completed.load() >= seq) return;
    done_cv.wait(lock);
  }
}

void orStream_st::whenReached(uint64_t seq, std::function<void(bool)> callback) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    on_reached.emplace_back(seq, std::move(callback));
    on_reached_count.store(on_reached.size());
  }
  // seq_cst store then load, against the worker's increment then load: if
  // the worker missed this callback, this sees its count.
  const uint64_t done = completed.load();
  if (done >= seq) runReached(done);
}

void orStream_st::runReached(uint64_t done) {
  std::vector<std::pair<uint64_t, std::function<void(bool)>>> due;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto later = std::partition(on_reached.begin(), on_reached.end(),
                                [done](const auto& entry) { return entry.first > done; });
    for (auto it = later; it != on_reached.end(); ++it) due.push_back(std::move(*it));
    on_reached.erase(later, on_reached.end());
    on_reached_count.store(on_reached.size());
  }
  const uint64_t first_failure = failed_at.load();
  for (auto& [seq, callback] : due) callback(first_failure != 0 && first_failure <= seq);
}

void orSetStreamIdleHook(void (*hook)()) { g_idle_hook = hook; }

orError orStreamCreate(int device, orStream* stream) {
  OR_RETURN_IF_FORKED();
  if (device < 0 || device >= orDeviceCount()) return orErrorInvalidDevice;
  if (!stream) return orErrorInvalidValue;
  detail::markInitialized();
  auto* s = new orStream_st();  // streams live for the process, like CUDA's pools
  s->device = device;
  s->lane = detail::sanitizerNewStreamLane("a stream of openreg:" + std::to_string(device));
  s->worker = std::thread([s] {
    // Named like PyTorch's pt_autograd_N threads, so profilers and debuggers
    // show which thread runs a device's kernels.
    c10::setThreadName("oreg_stream_" + std::to_string(s->device));
    s->run();
  });
  s->worker.detach();
  {
    std::lock_guard<std::mutex> lock(g_registry_mutex);
    g_streams.push_back(s);
  }
  *stream = s;
  return orSuccess;
}

namespace {
std::vector<orStream> streamsOf(int device) {
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  std::vector<orStream> streams;
  for (auto* s : g_streams)
    if (s->device == device) streams.push_back(s);
  return streams;
}
}  // namespace

orError orDeviceSynchronize(int device) {
  OR_RETURN_IF_FORKED();
  if (device < 0 || device >= orDeviceCount()) return orErrorInvalidDevice;
  const std::vector<orStream> streams = streamsOf(device);
  for (auto* s : streams)
    if (s->capturing.load()) return s->refuseWhileCapturing();
  orError result = orSuccess;
  for (auto* s : streams) {
    orError e = orStreamSynchronize(s);
    if (e != orSuccess && result == orSuccess) result = e;
  }
  return result;
}

std::exception_ptr orDeviceLastException(int device) {
  if (orIsForkedChild()) return nullptr;  // as orStreamLastException
  for (auto* s : streamsOf(device))
    if (s->failed.load()) return orStreamLastException(s);
  return nullptr;
}


namespace detail {
int streamLane(orStream stream) { return stream->lane; }
}  // namespace detail

namespace {
// Records a launch on a capturing stream (`prepare`: made at each replay);
// nullopt when the stream is not capturing.
std::optional<orError> recordInCapture(orStream stream, std::function<void()>& kernel,
                                       orPrepare& prepare, std::vector<orAccess>& accesses) {
  if (!stream->capturing.load(std::memory_order_relaxed)) return std::nullopt;
  std::lock_guard<std::mutex> lock(stream->mutex);
  Capture* capture = stream->capture.get();
  if (!capture) return std::nullopt;
  std::lock_guard<std::mutex> capture_lock(capture->mutex);
  if (capture->ended) {  // a joined stream's launch racing the end: not recorded
    capture->invalidated = true;
    return orErrorStreamCaptureInvalidated;
  }
  if (prepare) {
    capture->prepared.emplace_back(capture->kernels.size(), std::move(prepare));
    kernel = [] {};
  }
  capture->kernels.push_back(std::move(kernel));
  capture->accesses.insert(capture->accesses.end(), accesses.begin(), accesses.end());
  if (stream != capture->origin) capture->issued[stream] = capture->kernels.size();
  return orSuccess;
}
}  // namespace

orError orLaunchPreparedKernel(orStream stream, orPrepare prepare, std::vector<orAccess> accesses) {
  OR_RETURN_IF_FORKED();
  if (!stream || !prepare) return orErrorInvalidValue;
  if (stream->failed.load(std::memory_order_relaxed)) return orErrorLaunchFailure;
  std::function<void()> kernel;
  if (auto recorded = recordInCapture(stream, kernel, prepare, accesses)) return *recorded;
  return orLaunchKernel(stream, prepare(stream), std::move(accesses));
}

orError orLaunchKernel(orStream stream, std::function<void()> kernel,
                       std::vector<orAccess> accesses) {
  OR_RETURN_IF_FORKED();
  if (!stream) return orErrorInvalidValue;
  if (stream->failed.load(std::memory_order_relaxed)) return orErrorLaunchFailure;
  orPrepare none;
  if (auto recorded = recordInCapture(stream, kernel, none, accesses)) return *recorded;
  if (orSanitizerStreamAccess(stream, accesses) == orErrorDataRace) return orErrorDataRace;
  // The worker's list of finished kernels is swapped for an empty one that
  // keeps its capacity (this thread's spare), so neither side allocates per
  // launch. Taken out of the thread_local first: destroying a kernel may
  // launch again on this thread.
  static thread_local std::vector<std::function<void()>> spare;
  std::vector<std::function<void()>> finished = std::move(spare);
  {
    std::lock_guard<std::mutex> lock(stream->mutex);
    finished.swap(stream->finished);
    stream->queue.push_back(std::move(kernel));
    stream->pending.fetch_add(1, std::memory_order_relaxed);
    stream->enqueued.fetch_add(1, std::memory_order_relaxed);
  }
  stream->work_cv.notify_one();
  finished.clear();
  if (finished.capacity() > spare.capacity()) spare = std::move(finished);
  return orSuccess;
}

orError orStreamQuery(orStream stream) {
  OR_RETURN_IF_FORKED();
  if (!stream) return orErrorInvalidValue;
  if (stream->capturing.load()) return stream->refuseWhileCapturing();
  if (stream->failed.load()) return orErrorLaunchFailure;
  // Seen before the count: the host learns no more than what it saw end.
  orSanitizerPoint seen = detail::sanitizerSnapshot(stream);
  if (stream->completed.load(std::memory_order_acquire) < stream->enqueued.load())
    return orErrorNotReady;
  orSanitizerHostJoin(seen);
  return orSuccess;
}

bool orStreamIsIdle(orStream stream) {
  if (!stream || orIsForkedChild() || stream->capturing.load()) return false;
  return stream->completed.load(std::memory_order_acquire) == stream->enqueued.load();
}

bool orStreamBeginHostWork(orStream stream) {
  if (!stream || orIsForkedChild() || stream->capturing.load() || stream->failed.load() ||
      stream->completed.load() != stream->enqueued.load())  // busy: no lock taken
    return false;
  // Seen before the counts, as orStreamQuery: the host learns what it saw end.
  orSanitizerPoint seen = detail::sanitizerSnapshot(stream);
  {
    std::lock_guard<std::mutex> lock(stream->mutex);
    if (stream->host_working || stream->capture ||
        stream->completed.load() != stream->enqueued.load())
      return false;
    stream->host_working = true;
    stream->enqueued.fetch_add(1);
  }
  orSanitizerHostJoin(seen);
  return true;
}

void orStreamEndHostWork(orStream stream) {
  bool held_back = false;
  {
    std::lock_guard<std::mutex> lock(stream->mutex);
    stream->host_working = false;
    held_back = !stream->queue.empty();
    // As the worker completes an item (the waiters' protocol in waitFor).
    if (stream->completed.fetch_add(1) + 1 >= stream->wake_at.load()) {
      stream->wake_at.store(orStream_st::kNoWaiter);
      stream->done_cv.notify_all();
    }
  }
  // Only kernels queued behind the host's item need the worker now: waking an
  // idle worker for nothing costs a context switch per blocking copy.
  if (held_back) stream->work_cv.notify_one();
}

uint64_t orStreamLaunchCount(orStream stream) {
  return stream ? stream->enqueued.load(std::memory_order_acquire) : 0;
}

namespace {
orError waitForStream(orStream stream, bool hostObserves) {
  OR_RETURN_IF_FORKED();
  if (!stream) return orErrorInvalidValue;
  if (stream->capturing.load()) return stream->refuseWhileCapturing();
  orSanitizerPoint seen = detail::sanitizerSnapshot(stream);
  uint64_t target;
  {
    std::lock_guard<std::mutex> lock(stream->mutex);
    target = stream->enqueued.load();
  }
  stream->waitFor(target);
  if (hostObserves) orSanitizerHostJoin(seen);
  std::vector<std::function<void()>> finished;
  {
    std::lock_guard<std::mutex> lock(stream->mutex);
    finished.swap(stream->finished);
  }
  return stream->failed.load() ? orErrorLaunchFailure : orSuccess;
}
}  // namespace

orError orStreamSynchronize(orStream stream) { return waitForStream(stream, /*hostObserves=*/true); }

orError orStreamDrain(orStream stream) { return waitForStream(stream, /*hostObserves=*/false); }

std::string orStreamLastError(orStream stream) {
  return orErrorMessage(orStreamLastException(stream));
}

std::string orErrorMessage(std::exception_ptr error) {
  if (!error) return {};
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

std::exception_ptr orStreamLastException(orStream stream) {
  // A forked child's streams are the parent's: a worker thread that no longer
  // exists may have held this mutex at the fork, so it is never taken here.
  if (orIsForkedChild()) return nullptr;
  std::lock_guard<std::mutex> lock(stream->mutex);
  return stream->first_exception;
}

// ---- graphs ----------------------------------------------------------------

struct orGraph_st {
  int device = 0;
  std::shared_ptr<const std::vector<std::function<void()>>> kernels;
  std::shared_ptr<const std::vector<std::pair<size_t, orPrepare>>> prepared;
  std::vector<orAccess> accesses;  // checked at each replay, as one kernel's
};

orError orStreamBeginCapture(orStream stream) {
  OR_RETURN_IF_FORKED();
  if (!stream) return orErrorInvalidValue;
  std::lock_guard<std::mutex> lock(stream->mutex);
  if (stream->capture) return orErrorStreamCaptureUnsupported;  // already capturing
  stream->capture = std::make_shared<Capture>(stream);
  stream->capturing = true;
  return orSuccess;
}

namespace {
// Takes `stream` out of its capture (under its mutex, as launches read it).
void leaveCapture(orStream stream, const Capture* capture) {
  std::lock_guard<std::mutex> lock(stream->mutex);
  if (stream->capture.get() != capture) return;
  stream->capture.reset();
  stream->capturing = false;
}
}  // namespace

orError orStreamEndCapture(orStream stream, orGraph* graph) {
  OR_RETURN_IF_FORKED();
  if (!stream || !graph) return orErrorInvalidValue;
  std::shared_ptr<Capture> capture;
  {
    std::lock_guard<std::mutex> lock(stream->mutex);
    capture = stream->capture;
  }
  if (!capture) return orErrorInvalidValue;  // not capturing
  if (capture->origin != stream) {  // only the stream that began it ends it
    capture->invalidated = true;
    return orErrorStreamCaptureUnmatched;
  }
  std::vector<orStream> members;
  bool unjoined = false;
  {
    std::lock_guard<std::mutex> lock(capture->mutex);
    capture->ended = true;
    const Frontier& origin_joined = capture->joined[stream];
    for (const auto& [member, issued] : capture->issued) {
      members.push_back(member);
      auto it = origin_joined.find(member);
      if (it == origin_joined.end() || it->second < issued) unjoined = true;
    }
  }
  for (orStream member : members) leaveCapture(member, capture.get());
  leaveCapture(stream, capture.get());
  // Taken out now: an event recorded in the capture may keep it alive.
  std::vector<std::function<void()>> kernels;
  std::vector<std::pair<size_t, orPrepare>> prepared;
  std::vector<orAccess> accesses;
  {
    std::lock_guard<std::mutex> lock(capture->mutex);
    kernels.swap(capture->kernels);
    prepared.swap(capture->prepared);
    accesses.swap(capture->accesses);
  }
  // Destroyed unrun: a refused call's kernel may refer to its caller's frame.
  if (capture->invalidated) return orErrorStreamCaptureInvalidated;
  if (unjoined) return orErrorStreamCaptureUnjoined;
  *graph = new orGraph_st{
      stream->device, std::make_shared<const std::vector<std::function<void()>>>(std::move(kernels)),
      std::make_shared<const std::vector<std::pair<size_t, orPrepare>>>(std::move(prepared)),
      std::move(accesses)};
  return orSuccess;
}

bool orStreamIsCapturing(orStream stream) { return stream && stream->capturing.load(); }

orStream orStreamCaptureOrigin(orStream stream) {
  if (!stream || !stream->capturing.load()) return nullptr;
  std::lock_guard<std::mutex> lock(stream->mutex);
  return stream->capture ? stream->capture->origin : nullptr;
}

orPrepare orGraphPrepare(orGraph graph) {
  // Kernels stay callable after running (Launch.h's closures hold views and
  // values, not one-shot state), so a replay calls the captured ones again;
  // only prepared ones are made anew, for this launch, in place of their
  // empty placeholders (`prepared` is in kernel order).
  return [kernels = graph->kernels, prepared = graph->prepared](orStream stream) {
    if (prepared->empty()) {
      return std::function<void()>([kernels] {
        for (const auto& kernel : *kernels) kernel();
      });
    }
    std::vector<std::pair<size_t, std::function<void()>>> made;
    made.reserve(prepared->size());
    for (const auto& [index, prepare] : *prepared) made.emplace_back(index, prepare(stream));
    return std::function<void()>([kernels, made = std::move(made)] {
      auto next = made.begin();
      for (size_t i = 0; i < kernels->size(); ++i) {
        if (next != made.end() && next->first == i)
          (next++)->second();
        else
          (*kernels)[i]();
      }
    });
  };
}

orError orGraphLaunch(orGraph graph, orStream stream) {
  if (!graph || !stream) return orErrorInvalidValue;
  if (graph->device != stream->device) return orErrorInvalidDevice;
  return orLaunchPreparedKernel(stream, orGraphPrepare(graph), orGraphAccesses(graph));
}

std::vector<orAccess> orGraphAccesses(orGraph graph) {
  return orSanitizerEnabled() ? graph->accesses : std::vector<orAccess>{};
}

size_t orGraphKernelCount(orGraph graph) { return graph ? graph->kernels->size() : 0; }

orError orGraphDestroy(orGraph graph) {
  delete graph;
  return orSuccess;
}

// ---- events ----------------------------------------------------------------

namespace {
// One recording of an event. Re-recording an event makes a new Record, so a
// wait that captured the old one is unaffected (CUDA semantics).
struct Record {
  orStream stream = nullptr;
  uint64_t seq = 0;  // complete when stream->completed >= seq
  // Recorded while `stream` captured: a point in that capture (its kernel
  // count then, and what `stream` had joined), not in the stream's queue;
  // only waits of streams can use it.
  std::shared_ptr<Capture> capture;
  size_t position = 0;
  Frontier joined;
  orSanitizerPoint clock;  // the race checker's view of the stream at the record
  std::atomic<int64_t> time_ns{0};
};
}  // namespace

struct orEvent_st {
  bool timing = false;
  // Interprocess events: the shared state, and the id of `record`
  // (this process's latest record of it; the latest of all processes may be
  // another's, which is then waited for through `ipc` alone).
  std::shared_ptr<detail::IpcEvent> ipc;
  std::mutex mutex;
  std::shared_ptr<Record> record;  // GUARDED_BY mutex; null until recorded
  uint64_t ipc_record = 0;         // GUARDED_BY mutex

  std::shared_ptr<Record> current() {
    std::lock_guard<std::mutex> lock(mutex);
    return record;
  }
  // The latest record when this process made it (null if none); else, for an
  // interprocess event another process recorded last, that record's id in
  // *remote (0 otherwise), to be waited for through `ipc`.
  std::shared_ptr<Record> current(uint64_t* remote) {
    std::lock_guard<std::mutex> lock(mutex);
    *remote = 0;
    if (!ipc) return record;
    const uint64_t latest = ipc->latest();
    if (ipc_record == latest) return record;
    *remote = latest;
    return nullptr;
  }
};

orError orEventCreate(orEvent* event, bool enable_timing) {
  if (!event) return orErrorInvalidValue;
  *event = new orEvent_st();
  (*event)->timing = enable_timing;
  return orSuccess;
}

orError orEventDestroy(orEvent event) {
  delete event;  // pending Records are shared_ptr-owned by kernels that use them
  return orSuccess;
}

orError orEventRecord(orEvent event, orStream stream) {
  OR_RETURN_IF_FORKED();
  if (!event || !stream) return orErrorInvalidValue;
  // A graph's replays would need a new shared record each: CUDA graphs
  // do not take interprocess events either.
  if (event->ipc && stream->capturing.load()) return stream->refuseWhileCapturing();
  if (stream->capturing.load()) {
    auto record = std::make_shared<Record>();
    record->stream = stream;
    {
      std::lock_guard<std::mutex> lock(stream->mutex);
      record->capture = stream->capture;
    }
    if (!record->capture) return orErrorStreamCaptureInvalidated;  // ended meanwhile
    {
      std::lock_guard<std::mutex> lock(record->capture->mutex);
      record->position = record->capture->kernels.size();
      record->joined = record->capture->joined[stream];
    }
    std::lock_guard<std::mutex> lock(event->mutex);
    event->record = std::move(record);
    return orSuccess;
  }
  auto record = std::make_shared<Record>();
  record->stream = stream;
  record->clock = detail::sanitizerSnapshot(stream);
  std::function<void()> mark;
  if (event->timing) {
    mark = [record] {
      record->time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            Clock::now().time_since_epoch()).count();
    };
  } else {
    mark = [] {};
  }
  {
    // Enqueue and read the sequence number atomically w.r.t. other launches.
    std::lock_guard<std::mutex> lock(stream->mutex);
    stream->queue.push_back(std::move(mark));
    stream->pending.fetch_add(1, std::memory_order_relaxed);
    record->seq = stream->enqueued.fetch_add(1) + 1;
  }
  stream->work_cv.notify_one();
  if (event->ipc) {
    const uint64_t ipc_record = event->ipc->claim();
    stream->whenReached(record->seq, [ipc = event->ipc, ipc_record](bool failed) {
      ipc->publish(ipc_record, failed);
    });
    std::lock_guard<std::mutex> lock(event->mutex);
    event->record = std::move(record);
    event->ipc_record = ipc_record;
    return orSuccess;
  }
  std::lock_guard<std::mutex> lock(event->mutex);
  event->record = std::move(record);
  return orSuccess;
}

orError orEventRecordUnlessCapturing(orEvent event, orStream stream) {
  OR_RETURN_IF_FORKED();
  if (!event || !stream || event->timing || event->ipc) return orErrorInvalidValue;
  auto record = std::make_shared<Record>();
  record->stream = stream;
  record->clock = detail::sanitizerSnapshot(stream);
  {
    // Under the mutex orStreamBeginCapture (and a fork into a capture) takes.
    std::lock_guard<std::mutex> lock(stream->mutex);
    if (stream->capture) return orErrorStreamCaptureUnsupported;
    stream->queue.push_back([] {});
    stream->pending.fetch_add(1, std::memory_order_relaxed);
    record->seq = stream->enqueued.fetch_add(1) + 1;
  }
  stream->work_cv.notify_one();
  std::lock_guard<std::mutex> lock(event->mutex);
  event->record = std::move(record);
  return orSuccess;
}

namespace {
// A wait for an event recorded in a capture: `stream` forks into the capture
// (its kernels are recorded there from now on), or, being the origin, joins
// the stream that recorded it up to that point. Recorded kernels replay in
// issue order, so the wait itself records nothing.
orError waitInCapture(orStream stream, const Record& record) {
  Capture& capture = *record.capture;
  {
    // An event of an ended capture marks no work: nothing to wait for.
    std::lock_guard<std::mutex> capture_lock(capture.mutex);
    if (capture.ended) return orSuccess;
  }
  std::lock_guard<std::mutex> lock(stream->mutex);
  if (stream->capture && stream->capture.get() != &capture) {  // another capture's
    capture.invalidated = true;
    stream->capture->invalidated = true;
    return orErrorStreamCaptureMerge;
  }
  std::lock_guard<std::mutex> capture_lock(capture.mutex);
  if (capture.ended) return orSuccess;  // ended meanwhile
  if (stream->device != capture.origin->device) {  // graphs are one device's
    capture.invalidated = true;
    return orErrorInvalidDevice;
  }
  if (!stream->capture) {  // the fork
    stream->capture = record.capture;
    stream->capturing = true;
    capture.issued[stream] = capture.kernels.size();
  }
  // The waiter has now joined what the recorder had, and the recorder itself
  // up to the record.
  Frontier& joined = capture.joined[stream];
  auto join = [&](orStream member, size_t position) {
    auto [it, fresh] = joined.try_emplace(member, position);
    if (!fresh) it->second = std::max(it->second, position);
  };
  for (const auto& [member, position] : record.joined) join(member, position);
  if (record.stream != capture.origin) join(record.stream, record.position);
  return orSuccess;
}
}  // namespace

namespace {
// Why a wait for another process's record of an interprocess event failed.
std::string ipcWaitFailure(orError status, const detail::IpcEvent& ipc, uint64_t ipc_record) {
  const std::string who = "process " + std::to_string(ipc.recorder(ipc_record));
  if (status == orErrorIpcPeerExited)
    return "openreg: " + who + ", which recorded the interprocess event waited for, exited " +
           "before the event completed";
  return "openreg: a kernel failed on the stream of " + who +
         " that recorded the interprocess event waited for";
}
}  // namespace

orError orStreamWaitEvent(orStream stream, orEvent event) {
  OR_RETURN_IF_FORKED();
  if (!event || !stream) return orErrorInvalidValue;
  uint64_t remote = 0;
  auto record = event->current(&remote);
  if (remote) {  // another process's record
    if (stream->capturing.load()) return stream->refuseWhileCapturing();
    return orLaunchKernel(stream, [ipc = event->ipc, remote] {
      const orError status = ipc->wait(remote);
      if (status != orSuccess) throw std::runtime_error(ipcWaitFailure(status, *ipc, remote));
    });
  }
  if (!record || record->stream == stream) return orSuccess;  // in-order already
  if (record->capture) return waitInCapture(stream, *record);
  if (stream->capturing.load()) return stream->refuseWhileCapturing();
  orSanitizerStreamJoin(stream, record->clock);
  // A failure of the awaited stream fails this one too, with the same error:
  // its later kernels would read what the failed kernel did not write (CUDA's
  // errors are sticky for the whole context, and keep their kind: a failed
  // collective stays a DistBackendError for whoever waited for it).
  return orLaunchKernel(stream, [record] {
    record->stream->waitFor(record->seq);
    if (record->stream->failed.load()) {
      if (auto cause = orStreamLastException(record->stream)) std::rethrow_exception(cause);
      throw std::runtime_error("waited for a stream whose kernel failed");
    }
  });
}

namespace {
// The host cannot wait for a point of a live capture (it marks no work): that
// invalidates the capture. One of an ended capture is complete.
orError hostWaitForCaptureEvent(Capture& capture) {
  std::lock_guard<std::mutex> lock(capture.mutex);
  if (capture.ended) return orSuccess;
  capture.invalidated = true;
  return orErrorStreamCaptureUnsupported;
}

// `seen`: the record the answer is about (null if never recorded).
orError queryEvent(orEvent event, std::shared_ptr<Record>* seen) {
  OR_RETURN_IF_FORKED();
  if (!event) return orErrorInvalidValue;
  uint64_t remote = 0;
  *seen = event->current(&remote);
  if (remote) return event->ipc->status(remote);
  const Record* record = seen->get();
  if (!record) return orSuccess;
  if (record->capture) return hostWaitForCaptureEvent(*record->capture);
  if (record->stream->completed.load(std::memory_order_acquire) < record->seq)
    return orErrorNotReady;
  return record->stream->failed.load() ? orErrorLaunchFailure : orSuccess;
}
}  // namespace

orError orEventQuery(orEvent event) {
  std::shared_ptr<Record> record;
  const orError status = queryEvent(event, &record);
  if (record && (status == orSuccess || status == orErrorLaunchFailure))
    orSanitizerHostJoin(record->clock);
  return status;
}

orError orEventQueryNoSync(orEvent event) {
  std::shared_ptr<Record> record;
  return queryEvent(event, &record);
}

namespace detail {
orSanitizerPoint eventPoint(orEvent event) {
  auto record = event ? event->current() : nullptr;
  return record ? record->clock : nullptr;
}
}  // namespace detail

orStream orEventStream(orEvent event) {
  if (orIsForkedChild() || !event) return nullptr;  // the event's mutex may be held by a lost thread
  uint64_t remote = 0;
  auto record = event->current(&remote);
  return record ? record->stream : nullptr;
}

orError orEventSynchronize(orEvent event) {
  OR_RETURN_IF_FORKED();
  if (!event) return orErrorInvalidValue;
  uint64_t remote = 0;
  auto record = event->current(&remote);
  if (remote) return event->ipc->wait(remote);
  if (!record) return orSuccess;
  if (record->capture) return hostWaitForCaptureEvent(*record->capture);
  record->stream->waitFor(record->seq);
  orSanitizerHostJoin(record->clock);
  // Sticky, as cudaEventSynchronize reports an earlier kernel's failure.
  return record->stream->failed.load() ? orErrorLaunchFailure : orSuccess;
}

orError orEventElapsedTime(float* ms, orEvent start, orEvent end) {
  OR_RETURN_IF_FORKED();
  if (!ms || !start || !end || !start->timing || !end->timing) return orErrorInvalidValue;
  auto a = start->current();
  auto b = end->current();
  if (!a || !b || a->capture || b->capture) return orErrorInvalidValue;
  if (a->stream->device != b->stream->device) return orErrorInvalidDevice;
  for (orEvent e : {start, end})
    if (orError status = orEventQuery(e); status != orSuccess) return status;  // no time mark
  *ms = static_cast<float>(b->time_ns.load() - a->time_ns.load()) / 1e6f;
  return orSuccess;
}

// ---- interprocess events ----------------------------------------------------

orError orEventCreateInterprocess(orEvent* event) {
  OR_RETURN_IF_FORKED();
  if (!event) return orErrorInvalidValue;
  orError error = orSuccess;
  auto ipc = detail::IpcEvent::create(&error);
  if (!ipc) return error;
  *event = new orEvent_st();
  (*event)->ipc = std::move(ipc);
  return orSuccess;
}

orError orIpcGetEventHandle(orIpcEventHandle* handle, orEvent event) {
  if (!handle || !event || !event->ipc) return orErrorInvalidValue;
  *handle = event->ipc->handle();
  return orSuccess;
}

orError orIpcOpenEventHandle(orEvent* event, const orIpcEventHandle& handle) {
  OR_RETURN_IF_FORKED();
  if (!event) return orErrorInvalidValue;
  orError error = orSuccess;
  auto ipc = detail::IpcEvent::open(handle, &error);
  if (!ipc) return error;
  *event = new orEvent_st();
  (*event)->ipc = std::move(ipc);
  return orSuccess;
}

bool orEventIsInterprocess(orEvent event) { return event && event->ipc; }

}  // namespace openreg
