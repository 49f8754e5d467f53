// OregWork: the c10d::Work of one oreg_ccl operation (or a coalesced group).
//
// Completed once, by whichever thread drives the backend's transport (its
// worker, or a caller running an operation inline; shutdown() for one that
// never started), with the output
// tensors or an exception. What waiting means depends on where the tensors
// live, as with NCCL:
//  - openreg tensors: wait()/synchronize() queue a kernel on the caller's
//    current stream that holds the stream until the operation completes, and
//    return at once; the host never blocks.
//  - CPU tensors, and every barrier: wait() blocks the caller (with the GIL
//    released by c10d's bindings) and rethrows the operation's error.
// getFuture() gives a future of the output tensor list (DDP's reducer needs a
// TensorList). For a collective on openreg tensors it is NCCL's kind: complete
// at once, its data ready when its event fires (FutureStreams.h). Otherwise
// the worker completes it, with the outputs or the error.
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "FutureStreams.h"
#include "StreamOrder.h"

namespace openreg::ccl {

// The process group whose operations this thread runs: its worker, or a
// caller running one inline (null on other threads). A host wait there for
// the group's own pending operation could never end.
extern thread_local const void* t_workerOf;

class OregWork : public c10d::Work {
 public:
  // Set once when the operation ends (shared with the kernels that wait for it).
  struct Completion {
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;             // GUARDED_BY(mutex)
    std::atomic<bool> polled{false};  // == done, for lock-free polling
    std::exception_ptr error;      // GUARDED_BY(mutex)
    // wait() or synchronize() was called: the error reaches the caller there
    // (or through the stream it held), not at a device synchronisation.
    std::atomic<bool> waited{false};
    void wait();
    void set(std::exception_ptr e);
  };

  // `device` is the openreg device index, or -1 for host (CPU) semantics.
  // `futureStreams`: set for a single collective on openreg tensors, whose
  // future is a device future recorded there.
  OregWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, int device,
           bool blockHost, std::shared_ptr<FutureStreams> futureStreams = nullptr);

  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override;
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Worker side: complete with `error` (nullptr = success). First call wins.
  void complete(std::exception_ptr error);

  // How the backend's worker refers to this work (below). `releasable`: wait()
  // may weaken it (not for p2p or coalesced parts, whose completion needs the work).
  class WorkerRef;
  std::shared_ptr<WorkerRef> attachWorker(bool releasable);

  // The last strong reference is gone while the worker's weak one keeps the
  // object: drop the tensors now, not when the operation finishes.
  void release_resources() override;
  void setSourceRank(int rank) { sourceRank_.store(rank); }
  // Caller side, at issue: the caller's openreg tensors, kept alive until
  // wait()/synchronize() queued the stream hold (from then on stream order
  // protects their memory, as NCCL's stash does) or until this work dies.
  void stash(std::vector<at::Tensor> tensors);
  // The process group that runs this operation (see t_workerOf).
  void setOwner(const void* group) { owner_ = group; }
  // The group's count of queued operations: getFuture() notes where the
  // queue stood, the place in program order of the callbacks chained on it.
  void setQueueClock(std::shared_ptr<const std::atomic<uint64_t>> clock) {
    queueClock_ = std::move(clock);
  }
  // The queue's count when getFuture() was last called (0: never).
  uint64_t futureQueuePoint() const { return futureQueuePoint_.load(); }
  // Issue side, for a collective on openreg tensors: a wait() queued right
  // behind work the group's StreamOrder covers is covered too.
  void extendsStreamOrder(std::shared_ptr<StreamOrder> order) { streamOrder_ = std::move(order); }
  // True once complete; then, as NCCL's, its outputs may be used on any
  // stream without a wait (the race checker hears of it).
  bool isCompleted() override;
  // The race checker's point for this operation, which every wait joins.
  void setSanitizerPoint(orSanitizerPoint point) { sanitizerPoints_ = {std::move(point)}; }
  orSanitizerPoint sanitizerPoint() const {
    return sanitizerPoints_.empty() ? nullptr : sanitizerPoints_.front();
  }
  const std::shared_ptr<Completion>& completion() const { return completion_; }
  // Runs `fn(error)` once this work completes (at once if it already has).
  void whenDone(std::function<void(std::exception_ptr)> fn);
  // Runs `fn` on success before anyone can see the work complete (set before
  // the worker starts it; the profiler's record of a send or receive).
  void beforeCompleting(std::function<void()> fn) { beforeCompleting_ = std::move(fn); }
  // Blocks the calling thread until completion; never throws.
  void waitDone();
  // A kernel that holds its stream until this work completes; `raises`: then
  // raises its error there (a failed collective fails the stream it was
  // waited on, as a failed NCCL kernel). It holds the completion, never the work.
  std::function<void()> holdUntilDone(bool raises) const;
  // Issued into a graph capture on `stream` (complete at once): a wait on
  // another stream waits for `event`, recorded there after the operation.
  void setCaptured(orStream stream, std::shared_ptr<orEvent_st> event) {
    capturedOn_ = stream;
    capturedEvent_ = std::move(event);
  }

  // A work completing when all `parts` complete (coalescing), first error wins.
  static c10::intrusive_ptr<OregWork> combine(int rank,
                                             const std::vector<c10::intrusive_ptr<OregWork>>& parts);

 private:
  // What a stream kernel waiting for this work holds: never the work itself,
  // whose last reference (and its tensors) must not die on a stream thread.
  struct Stash {
    std::mutex mutex;
    std::vector<at::Tensor> tensors;  // GUARDED_BY(mutex)
  };
  void unstash();  // on the caller's thread: dropping a tensor may take the GIL

  void blockStream();
  // Orders the host / a stream after this operation for the race checker.
  void sanitizerJoinHost() const;
  void sanitizerJoinStream(orStream stream) const;
  c10::intrusive_ptr<c10::ivalue::Future> makeDeviceFuture();
  void releaseFromWorker();  // after wait() queued the stream hold
  bool waitHost(std::chrono::milliseconds timeout);
  // Raises if this thread runs the group's operations and this one is not done.
  void throwIfOwnRunnerWaits() const;

  std::shared_ptr<Completion> completion_ = std::make_shared<Completion>();
  std::vector<at::Tensor> outputs_;
  std::function<void()> beforeCompleting_;
  std::vector<std::shared_ptr<Stash>> stashes_;  // its own, or a coalesced group's parts'
  std::weak_ptr<WorkerRef> workerRef_;  // set when releasable
  std::shared_ptr<StreamOrder> streamOrder_;  // set by extendsStreamOrder
  // Empty unless the race checker is on; a coalesced group's: one per part
  // (sends and receives run on lanes of their own, so none covers the others).
  std::vector<orSanitizerPoint> sanitizerPoints_;
  const void* owner_ = nullptr;
  orStream capturedOn_ = nullptr;               // setCaptured
  std::shared_ptr<orEvent_st> capturedEvent_;   // setCaptured
  std::atomic<bool> futureRequested_{false};  // getFuture() was called
  std::shared_ptr<const std::atomic<uint64_t>> queueClock_;  // setQueueClock
  std::atomic<uint64_t> futureQueuePoint_{0};
  const int device_;
  const bool blockHost_;
  std::atomic<int> sourceRank_{-1};
  const std::shared_ptr<FutureStreams> futureStreams_;
  std::once_flag deviceFutureOnce_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // device futures: set once, by getFuture()
  std::vector<std::function<void(std::exception_ptr)>> callbacks_;  // GUARDED_BY(mutex_)
};

// The worker's reference to a work: strong until the caller's wait() has
// queued its stream hold, weak from then on, so that the worker keeps no
// output alive after wait() (NCCL's watchdog keeps none either; FSDP2 drops
// its all-gather outputs right after). A work whose future was requested
// stays strong: DDP's reducer keeps the future, not the work.
class OregWork::WorkerRef {
 public:
  WorkerRef(c10::intrusive_ptr<OregWork> work, std::shared_ptr<Completion> completion)
      : completion_(std::move(completion)), weak_(work), strong_(std::move(work)) {}
  // Completes the work, or, if the caller dropped it, just what stream holds
  // wait for. Returns the reference it used: the worker must not drop it (it
  // may be the last one), so the operation keeps it until it is released.
  c10::intrusive_ptr<OregWork> complete(std::exception_ptr error);
  c10::intrusive_ptr<OregWork> lock();
  void downgrade();  // after wait(); a no-op once pinned
  void pin(c10::intrusive_ptr<OregWork> work);  // getFuture(): strong for good
  // After completion: hands over the strong reference, for the releaser.
  c10::intrusive_ptr<OregWork> release();

 private:
  std::shared_ptr<Completion> completion_;
  std::mutex mutex_;
  c10::weak_intrusive_ptr<OregWork> weak_;
  c10::intrusive_ptr<OregWork> strong_;  // GUARDED_BY(mutex_)
  bool pinned_ = false;                  // GUARDED_BY(mutex_)
  bool released_ = false;                // GUARDED_BY(mutex_): release() was called
};

}  // namespace openreg::ccl
