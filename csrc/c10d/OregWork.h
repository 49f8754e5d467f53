// OregWork: the c10d::Work of one oreg_ccl operation (or a coalesced group).
//
// Completed once, by the backend's worker thread (finish), with the output
// tensors or an exception. What waiting means depends on where the tensors
// live, as with NCCL:
//  - openreg tensors: wait()/synchronize() queue a kernel on the caller's
//    current stream that holds the stream until the operation completes, and
//    return at once; the host never blocks.
//  - CPU tensors, and every barrier: wait() blocks the caller (with the GIL
//    released by c10d's bindings) and rethrows the operation's error.
// getFuture() completes with the output tensor list (DDP's reducer needs a
// TensorList) or with the error.
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <functional>
#include <vector>

namespace openreg::ccl {

class OregWork : public c10d::Work {
 public:
  // `device` is the openreg device index, or -1 for host (CPU) semantics.
  OregWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, int device,
           bool blockHost);

  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override;
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Worker side: complete with `error` (nullptr = success). First call wins.
  void complete(std::exception_ptr error);
  void setSourceRank(int rank) { sourceRank_.store(rank); }
  // Runs `fn(error)` once this work completes (at once if it already has).
  void whenDone(std::function<void(std::exception_ptr)> fn);
  // Blocks the calling thread until completion; never throws.
  void waitDone();

  // A work completing when all `parts` complete (coalescing), first error wins.
  static c10::intrusive_ptr<OregWork> combine(int rank,
                                             const std::vector<c10::intrusive_ptr<OregWork>>& parts);

 private:
  // What a stream kernel waiting for this work holds: never the work itself,
  // whose last reference (and its tensors) must not die on a stream thread.
  struct Completion {
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;             // GUARDED_BY(mutex)
    std::atomic<bool> polled{false};  // == done, for lock-free polling
    std::exception_ptr error;      // GUARDED_BY(mutex)
    void wait();
    void set(std::exception_ptr e);
  };

  void blockStream();
  bool waitHost(std::chrono::milliseconds timeout);

  std::shared_ptr<Completion> completion_ = std::make_shared<Completion>();
  std::vector<at::Tensor> outputs_;
  const int device_;
  const bool blockHost_;
  std::atomic<int> sourceRank_{-1};
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::vector<std::function<void(std::exception_ptr)>> callbacks_;  // GUARDED_BY(mutex_)
};

}  // namespace openreg::ccl
