#include "OregWork.h"

#include "Errors.h"
#include "Releaser.h"

#include "../aten/Launch.h"
#include "../runtime/OpenRegException.h"
#include "../runtime/OpenRegKinetoPlugin.h"
#include "../runtime/OpenRegStream.h"

#include <c10/core/StreamGuard.h>

#include <thread>
#include <utility>

namespace openreg::ccl {

thread_local const void* t_workerOf = nullptr;

OregWork::OregWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, int device,
                   bool blockHost, std::shared_ptr<FutureStreams> futureStreams)
    : Work(rank, type),
      outputs_(std::move(outputs)),
      device_(device),
      blockHost_(blockHost || device < 0),
      futureStreams_(device_ >= 0 && !blockHost_ ? std::move(futureStreams) : nullptr) {
  // A host future has no devices: completing it records no events, the data
  // is final when the worker completes it.
  if (!futureStreams_)
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
}

void OregWork::throwIfOwnRunnerWaits() const {
  // A callback the group's runner runs (a send's, a receive's or a coalesced
  // group's future) that waits for an operation the same thread has yet to run.
  if (!owner_ || t_workerOf != owner_) return;
  {
    std::lock_guard<std::mutex> g(mutex_);
    if (completed_) return;
  }
  OREG_CCL_THROW("oreg_ccl: rank ", rank_, ": ", c10d::opTypeToString(opType_),
                 " was waited for inside a callback that the process group's worker thread runs "
                 "(a future's callback of a send, receive or coalesced group), and that thread "
                 "runs the operation only once the callback returns: wait for it outside the "
                 "callback, or chain it with Future.then()");
}

int OregWork::sourceRank() const {
  // The sender is only known once the message arrived: for openreg tensors,
  // whose wait() does not block the host, this is where the host waits.
  throwIfOwnRunnerWaits();
  const_cast<OregWork*>(this)->waitDone();
  if (auto e = exception()) std::rethrow_exception(e);
  int r = sourceRank_.load();
  TORCH_CHECK(r >= 0, "sourceRank() is only available for a completed recv from any source");
  return r;
}

std::vector<at::Tensor> OregWork::result() { return outputs_; }

c10::intrusive_ptr<c10::ivalue::Future> OregWork::getFuture() {
  if (!futureRequested_.exchange(true) && !futureStreams_ && isCompleted())
    sanitizerJoinHost();
  if (queueClock_) futureQueuePoint_.store(queueClock_->load());
  if (auto ref = workerRef_.lock()) ref->pin(c10::intrusive_ptr<OregWork>::reclaim_copy(this));
  if (futureStreams_) std::call_once(deviceFutureOnce_, [this] { future_ = makeDeviceFuture(); });
  return future_;
}

c10::intrusive_ptr<c10::ivalue::Future> OregWork::makeDeviceFuture() {
  const c10::Device device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device_));
  auto future = c10::make_intrusive<c10::ivalue::Future>(
      c10::ListType::create(c10::TensorType::get()), std::vector<c10::Device>{device});
  bool done;
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> g(mutex_);
    done = completed_;
    error = exception_;
  }
  if (error) {
    future->setError(error);
    return future;
  }
  try {
    // The hold raises nothing: the future stream, and through its events the
    // consumers' pool streams, would stay failed for good, for every group
    // and user. As NCCL's, the future carries no error; the work and the
    // group's next call do (it fails them all).
    const c10::Stream stream = futureStreams_->of(device.index());
    sanitizerJoinStream(rawStream(stream));
    if (!done) {
      UntracedLaunches untraced;  // a stream wait, as CUDA's events (OpenRegKinetoPlugin.h)
      launchKernel(stream, holdUntilDone(/*raises=*/false));
    }
    // The future's event is recorded on the current stream of its device.
    c10::StreamGuard current(stream);
    future->markCompleted(c10::IValue(outputs_));
  } catch (...) {
    future->setError(std::current_exception());  // e.g. no stream left to record on
  }
  return future;
}

void OregWork::release_resources() {
  outputs_.clear();
  stashes_.clear();
  future_.reset();  // a caller holding the future keeps its own reference
}

std::shared_ptr<OregWork::WorkerRef> OregWork::attachWorker(bool releasable) {
  auto ref =
      std::make_shared<WorkerRef>(c10::intrusive_ptr<OregWork>::reclaim_copy(this), completion_);
  if (releasable) workerRef_ = ref;
  return ref;
}

void OregWork::releaseFromWorker() {
  if (auto ref = workerRef_.lock()) ref->downgrade();
}

c10::intrusive_ptr<OregWork> OregWork::WorkerRef::lock() {
  std::lock_guard<std::mutex> g(mutex_);
  return strong_ ? strong_ : weak_.lock();
}

c10::intrusive_ptr<OregWork> OregWork::WorkerRef::complete(std::exception_ptr error) {
  auto work = lock();
  if (work)
    work->complete(error);
  else
    completion_->set(error);
  return work;
}

c10::intrusive_ptr<OregWork> OregWork::WorkerRef::release() {
  std::lock_guard<std::mutex> g(mutex_);
  released_ = true;
  return std::move(strong_);
}

void OregWork::WorkerRef::downgrade() {
  c10::intrusive_ptr<OregWork> dropped;  // never the last reference: the caller holds one
  std::lock_guard<std::mutex> g(mutex_);
  if (!pinned_) dropped.swap(strong_);
}

void OregWork::WorkerRef::pin(c10::intrusive_ptr<OregWork> work) {
  std::lock_guard<std::mutex> g(mutex_);
  pinned_ = true;
  // Once released the work is complete: nothing to keep, and the last holder
  // of this WorkerRef may be the worker, which must not drop the last reference.
  if (!strong_ && !released_) strong_ = std::move(work);
}

void OregWork::complete(std::exception_ptr error) {
  std::vector<std::function<void(std::exception_ptr)>> callbacks;
  {
    std::lock_guard<std::mutex> g(mutex_);
    if (completed_) return;
    if (beforeCompleting_ && !error) std::exchange(beforeCompleting_, nullptr)();
    completed_ = true;
    exception_ = error;
    callbacks.swap(callbacks_);
  }
  completion_->set(error);
  cv_.notify_all();
  for (auto& cb : callbacks) cb(error);
  if (futureStreams_) return;  // a device future completes in getFuture()
  // Whoever waits for the future sees the outputs final: for the race checker,
  // the host saw the operation end (here already, the host clock being one).
  if (futureRequested_.load()) sanitizerJoinHost();
  // A host future's callbacks run here, on the worker thread.
  if (error)
    future_->setError(error);
  else
    future_->markCompleted(c10::IValue(outputs_));
}

void OregWork::stash(std::vector<at::Tensor> tensors) {
  auto s = std::make_shared<Stash>();
  s->tensors = std::move(tensors);
  stashes_.push_back(std::move(s));
}

void OregWork::unstash() {
  for (auto& s : stashes_) {
    std::vector<at::Tensor> drop;
    std::lock_guard<std::mutex> g(s->mutex);
    drop.swap(s->tensors);
  }
}

void OregWork::whenDone(std::function<void(std::exception_ptr)> fn) {
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> g(mutex_);
    if (!completed_) {
      callbacks_.push_back(std::move(fn));
      return;
    }
    error = exception_;
  }
  fn(error);
}

void OregWork::Completion::set(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> g(mutex);
    done = true;
    error = e;
  }
  polled.store(true, std::memory_order_release);
  cv.notify_all();
}

void OregWork::Completion::wait() {
  std::unique_lock<std::mutex> lock(mutex);
  cv.wait(lock, [&] { return done; });
}

void OregWork::waitDone() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return completed_; });
}

bool OregWork::waitHost(std::chrono::milliseconds timeout) {
  // Most small operations finish within microseconds: poll a little before
  // sleeping on the condition variable (a wake-up costs about as much).
  for (int i = 0; i < 200 && !completion_->polled.load(std::memory_order_acquire); ++i)
    std::this_thread::yield();
  throwIfOwnRunnerWaits();
  completion_->waited.store(true, std::memory_order_relaxed);
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout == ::kNoTimeout) {
    cv_.wait(lock, [&] { return completed_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
    OREG_CCL_THROW("oreg_ccl: rank ", rank_, ": ", c10d::opTypeToString(opType_),
                     " did not complete within the ", timeout.count(), " ms given to wait()");
  }
  if (exception_) std::rethrow_exception(exception_);
  sanitizerJoinHost();
  return true;
}

bool OregWork::isCompleted() {
  const bool done = c10d::Work::isCompleted();
  if (done) sanitizerJoinHost();
  return done;
}

void OregWork::blockStream() {
  completion_->waited.store(true, std::memory_order_relaxed);
  bool done;
  {
    std::lock_guard<std::mutex> g(mutex_);
    done = completed_;
    if (done && exception_) std::rethrow_exception(exception_);
  }
  const c10::Stream stream = getCurrentStream(static_cast<c10::DeviceIndex>(device_));
  sanitizerJoinStream(rawStream(stream));
  if (done) {
    // A captured operation: its replay holds the capturing stream; another
    // stream forks into the capture here (or fails it, as CUDA would).
    if (capturedEvent_ && rawStream(stream) != capturedOn_)
      OPENREG_CHECK(orStreamWaitEvent(rawStream(stream), capturedEvent_.get()));
    // Outside mutex_: dropping a tensor may take the GIL, and a thread holding
    // the GIL may be waiting for mutex_ (is_completed()).
    unstash();
    releaseFromWorker();
    return;  // nothing to wait for: the data is already in place
  }
  // The stream waits for the operation; a failure surfaces as the stream's
  // asynchronous error (like a failed NCCL kernel), and wait() on a work that
  // already failed raises directly.
  const uint64_t before = orStreamLaunchCount(rawStream(stream));
  {
    UntracedLaunches untraced;  // a stream wait, as CUDA's events (OpenRegKinetoPlugin.h)
    launchKernel(stream, holdUntilDone(/*raises=*/true));
  }
  if (streamOrder_) streamOrder_->coverWait(rawStream(stream), before);
  // Only now: later work on this stream is ordered after the operation.
  unstash();
  releaseFromWorker();
}

std::function<void()> OregWork::holdUntilDone(bool raises) const {
  return [completion = completion_, raises] {
    completion->wait();
    if (!raises) return;
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> g(completion->mutex);
      error = completion->error;
    }
    if (error) std::rethrow_exception(error);
  };
}

void OregWork::synchronize() {
  if (blockHost_)
    waitHost(::kNoTimeout);
  else
    blockStream();
}

void OregWork::sanitizerJoinHost() const {
  for (const auto& p : sanitizerPoints_) orSanitizerHostJoin(p);
}

void OregWork::sanitizerJoinStream(orStream stream) const {
  for (const auto& p : sanitizerPoints_) orSanitizerStreamJoin(stream, p);
}

bool OregWork::wait(std::chrono::milliseconds timeout) {
  if (blockHost_) return waitHost(timeout);
  // As NCCL's: given a timeout, the host waits for the operation too, and
  // raises if it does not complete within it.
  if (timeout != ::kNoTimeout) waitHost(timeout);
  blockStream();
  return true;
}

c10::intrusive_ptr<OregWork> OregWork::combine(
    int rank, const std::vector<c10::intrusive_ptr<OregWork>>& parts) {
  std::vector<at::Tensor> outputs;
  int device = -1;
  bool anyHost = false;
  for (auto& p : parts) {
    for (auto& t : p->outputs_) outputs.push_back(t);
    device = std::max(device, p->device_);
    anyHost = anyHost || p->device_ < 0;
  }
  // A batch that mixes CPU and openreg tensors: wait() blocks the host, or a
  // CPU receive could be read before it is filled.
  auto all = c10::make_intrusive<OregWork>(rank, c10d::OpType::COALESCED, std::move(outputs),
                                           device, /*blockHost=*/anyHost);
  // wait() on the group releases every part's tensors.
  for (auto& p : parts) {
    all->stashes_.insert(all->stashes_.end(), p->stashes_.begin(), p->stashes_.end());
    all->sanitizerPoints_.insert(all->sanitizerPoints_.end(), p->sanitizerPoints_.begin(),
                                 p->sanitizerPoints_.end());
  }
  if (parts.empty()) {
    all->complete(nullptr);
    return all;
  }
  struct Count {
    std::mutex m;
    size_t left;
    std::exception_ptr first;
  };
  auto count = std::make_shared<Count>();
  count->left = parts.size();
  // The group is referred to like one operation (WorkerRef): strong until
  // wait() queued its stream hold, for good once getFuture() pinned it (a
  // caller may keep only the future), and only its completion state once
  // Python dropped it after wait().
  auto ref = all->attachWorker(/*releasable=*/true);
  for (auto& p : parts) {
    p->whenDone([ref, count](std::exception_ptr e) {
      std::exception_ptr done;
      bool last;
      {
        std::lock_guard<std::mutex> g(count->m);
        if (e && !count->first) count->first = e;
        last = --count->left == 0;
        done = count->first;
      }
      if (!last) return;
      // The parts complete on the worker, which must not drop the last
      // reference to a work (it owns tensors; see Releaser.h).
      releaseLater(ref->complete(done));
      releaseLater(ref->release());
    });
  }
  return all;
}

}  // namespace openreg::ccl
