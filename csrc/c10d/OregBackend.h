// OregBackend: oreg_ccl, the c10d::Backend of openreg (and of CPU tensors).
//
// Layering: this class is the c10d face. It validates arguments on the
// caller's thread (bad input raises there, never on a peer), orders each
// operation after the work already queued on the caller's openreg stream,
// and hands it to a worker thread that runs operations in issue order with
// the algorithms of Algorithms.h over a Transport (shared memory, ZeroMQ, or
// both routed by host). Host-tensor operations on an idle group skip the
// hand-off: a synchronous collective runs, and a send or receive is posted,
// on the caller's thread.
//
// Ordering with openreg streams (NCCL's model): enqueueing launches a tiny
// kernel on the caller's current stream that marks the operation ready and
// wakes the worker, so the worker starts exactly when preceding kernels have
// finished, and the host never blocks. The worker reads and writes device
// memory through the kernel mapping. Work::wait() then orders the caller's
// stream after completion (see OregWork.h). The marker is skipped when
// nothing was queued on the stream since the group's previous operation
// (other than a wait() for it, if a collective): the worker's issue order
// covers that (StreamOrder.h). On a capturing stream an operation is recorded
// for the graph instead, and issued again at each replay
// (CapturedOperations.cpp).
//
// Errors: the first failure (timeout, mismatch, dead peer) is published to
// the whole group through the transport; that operation and every later one
// raise DistBackendError on every rank. shutdown()/abort() are idempotent
// and bounded in time.
//
// Threading: public methods are called by c10d with the GIL released; the
// worker never drops tensors (Releaser.h), but it completes futures, and a
// Python then() callback on one (DDP's compression hooks) runs there, taking
// the GIL (on the caller's thread for an operation that completed inline).
// Collective methods must be called from one thread at a time (as with every
// c10d backend).
#pragma once

#include <c10/util/FunctionRef.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <condition_variable>
#include <deque>
#include <map>
#include <optional>
#include <thread>

#include "../runtime/OpenRegKinetoPlugin.h"
#include "../runtime/driver/Driver.h"
#include "Algorithms.h"
#include "OregWork.h"
#include "SelfChannel.h"
#include "Staging.h"
#include "StreamOrder.h"
#include "Topology.h"

namespace openreg::ccl {

class OregBackend final : public c10d::Backend {
 public:
  // Options of a group; deep-copied by split_group (see Bindings.cpp).
  struct Options : c10d::Backend::Options {
    explicit Options(std::chrono::milliseconds timeout = ::kBackendDefaultTimeout)
        : c10d::Backend::Options("oreg_ccl", timeout) {}
  };

  // Connects to the other ranks (collective over `store`).
  OregBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
              c10::intrusive_ptr<Options> options);
  ~OregBackend() override;

  const std::string getBackendName() const override { return "oreg_ccl"; }
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override { return options_; }
  c10::intrusive_ptr<Options> options() const { return options_; }
  // Read-only introspection (tests): which ranks share a host, and the prefix
  // of this group's keys in its store.
  const Topology& topology() const { return topology_; }
  const std::string& storePrefix() const { return storePrefix_; }
  void setTimeout(std::chrono::milliseconds timeout) override { options_->timeout = timeout; }

  // Capabilities (isolated here: c10d is moving them to a capabilities() bitset).
  bool supportsSplitting() const override { return true; }
  bool supportsCoalescing() const override { return true; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  // Deprecated in c10d, still reached by dist.all_gather_coalesced.
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits,
                                               std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  // gloo's debugging barrier (ProcessGroup.monitored_barrier).
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override;

  // Operations issued between start and end complete as one Work; they are
  // started as they are issued (sends never wait for their receives anyway).
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts)
      override;

  // Every rank starts at 0 and counts the same collectives.
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return issued_.load(); }

  // Lets issued operations finish (bounded), then stops the worker. Called
  // from a future callback that this group's runner runs, it only refuses
  // new operations: the worker cannot join itself, so the next shutdown()
  // from another thread (the destructor at the latest) completes it.
  void shutdown() override;
  void abort() override;

  // For tests and debugging: where this rank sits and what its network side
  // did (Python: backend._network_info()).
  struct NetworkInfo {
    std::string topology;      // e.g. "host 0: 0 1 | host 1: 2 3"
    int hostCount = 1;
    std::string endpoint;      // this rank's ZeroMQ address ("" on one host)
    uint64_t groupId = 0;      // the identity its messages carry (Wire.h)
    uint64_t rejected = 0;     // messages dropped as not belonging to the group
    bool singleCopy = false;   // same-host messages read straight from the sender (ShmTransport.h)
    uint64_t sharedChunksWritten = 0;  // of peers' shared copies, by this rank (ShmTransport.h)
    uint64_t peerMappedRead = 0;       // bytes read from mapped peer device memory (ShmTransport.h)
    uint64_t peerMappedWritten = 0;    // bytes written into it
    uint64_t splits = 0;       // backends split() built from this one
    // Operations on openreg tensors that queued a marker kernel to learn that
    // their stream was ready, and those that needed none (StreamOrder.h).
    uint64_t streamMarkers = 0;
    uint64_t streamMarkersSkipped = 0;
  };
  NetworkInfo networkInfo() const;
  // shutdown() or abort() was called.
  bool isShutDown();

 private:
  // What enqueue takes from a call's c10d options.
  struct Call {
    std::chrono::milliseconds timeout = c10d::kUnsetTimeout;
    // False for Python's async_op=False: the caller waits at once, so an idle
    // group may run a host-tensor collective on the caller's thread (runInline).
    bool asyncOp = true;
    // A send's or receive's peer (kAnySource: any): the race checker's lane.
    int peer = -1;
  };
  template <class Options>
  static Call callOf(const Options& opts) {
    return {opts.timeout, opts.asyncOp};
  }

  // A collective body runs to completion on the worker.
  using Body = std::function<void(Collective&)>;
  // A p2p body posts its request and returns it; its completion finishes the work.
  using Post = std::function<RequestPtr(Collective&, const c10::intrusive_ptr<OregWork>&)>;
  // A finished Op is destroyed on the releaser thread (Releaser.h), never on
  // the worker: dropping a tensor may take the GIL.
  struct Op {
    std::shared_ptr<OregWork::WorkerRef> work;
    c10::intrusive_ptr<OregWork> kept;  // the reference that completed it (WorkerRef::complete)
    // Null: ready now (host tensors, or a stream covered by StreamOrder).
    std::shared_ptr<std::atomic<bool>> ready;
    orStream stream = nullptr;  // the caller's stream, for openreg tensors
    std::chrono::milliseconds timeout;
    uint64_t tag = 0;  // 0 for a send / receive; a collective's is given when it starts
    std::string what;  // e.g. "allreduce#4 1024 x Float SUM" (the tag once it has one)
    std::string name, desc;  // what `what` is made of
    uint64_t queued = 0;  // its place in the queue (pushOp), in issue order
    Body body;
    Post post;
    TraceOrigin origin;  // for torch.profiler (OpenRegKinetoPlugin.h)
    // Keeps the group alive until the op is released (on the releaser thread):
    // a callback that drops the group's last reference must not run the
    // destructor on this group's own worker, which cannot join itself.
    c10::intrusive_ptr<OregBackend> group;
  };
  struct InFlight {
    RequestPtr req;
    c10::intrusive_ptr<OregWork> work;
    Clock::time_point deadline;
    std::string what;
    c10::intrusive_ptr<OregBackend> group;  // as Op::group
  };

  c10::intrusive_ptr<OregWork> enqueue(c10d::OpType type, const std::string& name,
                                       const std::string& desc,
                                       const std::vector<at::Tensor>& inputs,
                                       const std::vector<at::Tensor>& outputs, Call call,
                                       Body body,
                                       Post post = nullptr, bool blockHost = false,
                                       int readyDevice = -1);
  // An operation on a capturing stream (CapturedOperations.cpp): recorded as
  // a prepared kernel that issues it at each replay of the graph (issueReplay)
  // and holds the replaying stream until it completes, as a captured NCCL
  // kernel does. The returned work is complete for the host.
  c10::intrusive_ptr<OregWork> capture(c10d::OpType type, const std::string& name,
                                       const std::string& desc,
                                       const std::vector<at::Tensor>& inputs,
                                       const std::vector<at::Tensor>& outputs, Call call,
                                       Body body, Post post, bool blockHost, int device,
                                       const c10::Stream& stream);
  // What a replay issues again for one captured operation.
  struct CapturedOp {
    c10d::OpType type;
    std::string name;
    std::string desc;
    std::chrono::milliseconds timeout;
    Body body;
    Post post;
    int device;
  };
  // Captured, not yet recorded: one operation, or a coalesced group's parts.
  struct CapturedOps {
    std::optional<c10::Stream> stream;
    std::vector<CapturedOp> parts;
    std::vector<orAccess> accesses;  // for the race checker
  };
  // Records captured_ as one prepared kernel; returns an event after it.
  std::shared_ptr<orEvent_st> recordCaptured();
  // At a replay: queues the operation; returns a function marking it ready
  // and a kernel holding the stream until it completes.
  std::pair<std::function<void()>, std::function<void()>> issueReplay(const CapturedOp& part,
                                                                      orStream stream);
  // Queues `op` for the worker and wakes it. Raises if shutdown() began: an
  // operation queued after the worker stopped would never finish.
  void pushOp(Op&& op, const std::string& name);
  std::chrono::milliseconds timeoutOf(std::chrono::milliseconds requested) const;
  void workerLoop();
  void runOp(Op& op);
  // Run `op` on the caller's thread if the worker is idle (saves two thread
  // hand-offs per small collective or send); a collective also needs nothing
  // in flight. False if not.
  bool runInline(Op& op);
  // Called from a future callback running on the thread that owns the
  // transport (it completed a collective): runs the queued operations, in
  // order, whose place (Op::queued) is before `before`, stopping after
  // `through` if given, so a callback that waits for an operation it issued
  // (PowerSGD's hook) does not wait for itself.
  void runQueued(uint64_t before, const std::shared_ptr<OregWork::WorkerRef>& through);
  void sweepInFlight();
  // `issue()`, except that inside a coalescing block its error is raised by
  // the returned (already failed) work's wait() instead of here.
  c10::intrusive_ptr<c10d::Work> raiseAtWaitWhileCoalescing(
      c10d::OpType type, c10::function_ref<c10::intrusive_ptr<c10d::Work>()> issue);
  c10::intrusive_ptr<c10d::Work> sendImpl(std::vector<at::Tensor>& tensors, int dstRank, int tag);
  c10::intrusive_ptr<c10d::Work> allreduceCoalescedImpl(std::vector<at::Tensor>& tensors,
                                                        const c10d::AllreduceCoalescedOptions& opts);
  // Fails every operation in flight with `error`. `announced`: this rank
  // failed a collective and told its peers (cancel with propagate); the
  // error is handed out only once they failed too (awaitPeersFailed).
  void failAll(std::exception_ptr error, bool announced = false);
  // After inflight_ changed: updates hasInflight_ and sendsInFlight_ (waking
  // shutdown() once no send is left).
  void inflightChanged();
  // At shutdown of a healthy, idle group: warns of a peer's collective
  // message nobody received (ranks that disagreed without an error).
  void warnUnreceived();
  // For a subgroup's errors: " [process group 2 (desc): its ranks 0-1 are global ranks 2, 3]".
  std::string globalRanksNote() const;
  std::exception_ptr withGlobalRanks(std::exception_ptr e) const;
  c10::intrusive_ptr<c10d::Work> recvImpl(std::vector<at::Tensor>& tensors, int srcRank, int tag,
                                          std::chrono::milliseconds timeout);
  c10::intrusive_ptr<c10d::Work> reduceScatterImpl(std::vector<at::Tensor> outputs,
                                                   std::vector<at::Tensor> inputs,
                                                   const c10d::ReduceScatterOptions& opts,
                                                   const char* name);
  c10::intrusive_ptr<c10d::Work> allgatherLists(
      const std::vector<std::vector<at::Tensor>>& outputLists,
      const std::vector<at::Tensor>& inputs, Call call, const char* name, c10d::OpType type);
  // Lists whose tensors differ in size (NCCL takes them): one broadcast /
  // reduce per rank, as NCCL does.
  c10::intrusive_ptr<c10d::Work> allgatherUneven(const std::vector<at::Tensor>& outputs,
                                                 const at::Tensor& input, Call call);
  c10::intrusive_ptr<c10d::Work> reduceScatterUneven(const at::Tensor& output,
                                                     const std::vector<at::Tensor>& inputs,
                                                     const c10d::ReduceScatterOptions& opts);
  c10::intrusive_ptr<c10d::Work> allgatherImpl(std::vector<at::Tensor> outputs,
                                               std::vector<at::Tensor> inputs, Call call,
                                               const char* name);

  c10::intrusive_ptr<Options> options_;
  Topology topology_;  // which ranks share a host
  std::string storePrefix_;  // unique to this incarnation of the group (see attemptPrefix)
  c10::intrusive_ptr<c10d::Store> store_;  // the group's, for keys under storePrefix_
  // NCCL's "Duplicate GPU detected" (checkDistinctDevice): the local peers
  // whose device this rank has not compared with its own yet.
  std::mutex deviceCheckMutex_;
  int postedDevice_ = -1;                  // GUARDED_BY(deviceCheckMutex_)
  uint64_t deviceChecks_ = 0;              // GUARDED_BY(deviceCheckMutex_): calls so far
  std::vector<int> devicePeersUnseen_;     // GUARDED_BY(deviceCheckMutex_)
  std::atomic<bool> deviceCheckDone_{false};
  void checkDistinctDevice(int device);
  std::shared_ptr<Transport> transport_;
  std::atomic<uint64_t> issued_{0};  // collectives issued (c10d's sequence number)
  // Collectives started, in the order the group runs them: their tags. Given
  // at the start rather than at issue, so that a collective a callback issues
  // (run at once, ahead of the queue) gets the same tag on every rank.
  uint64_t started_ = 0;  // runner only
  // Operations pushed to queue_ so far (written under mutex_; works read it
  // at getFuture(), OregWork::setQueueClock).
  std::shared_ptr<std::atomic<uint64_t>> queuedOps_ = std::make_shared<std::atomic<uint64_t>>(0);
  CapturedOps captured_;  // caller thread
  // What on the callers' streams needs no marker kernel (see StreamOrder.h).
  std::shared_ptr<StreamOrder> streamOrder_ = std::make_shared<StreamOrder>();
  std::shared_ptr<FutureStreams> futureStreams_ = std::make_shared<FutureStreams>();
  // The race checker's lanes: the group's collectives run in issue order
  // (NCCL's stream); sends and receives only in order per peer and direction,
  // concurrently with the rest (created when first used; key: peer * 2 + is_send).
  int sanitizerLane_ = -1;
  std::map<int, int> sanitizerP2pLanes_;  // GUARDED_BY issueMutex_
  int sanitizerLaneOf(c10d::OpType type, int peer);
  std::mutex issueMutex_;  // held from a device operation's stream marker to its push (enqueue)
  std::atomic<uint64_t> streamMarkers_{0}, streamMarkersSkipped_{0};
  uint64_t splitsBuilt_ = 0;
  // The last split and the store c10d passed for it (see split()).
  c10::weak_intrusive_ptr<c10d::Store> lastSplitStore_{c10::intrusive_ptr<c10d::Store>()};
  c10::weak_intrusive_ptr<c10d::Backend> lastSplit_{c10::intrusive_ptr<c10d::Backend>()};
  // The thread inside a startCoalescing/endCoalescing block, if any: c10d's
  // coalescing is the caller's, and a future's callback issuing on the
  // worker meanwhile is not part of the block.
  std::atomic<std::thread::id> coalescingThread_{};
  bool coalescing() const {
    return coalescingThread_.load(std::memory_order_relaxed) == std::this_thread::get_id();
  }
  int coalescedDevice_ = -1;  // the openreg device of the coalesced group's parts
  std::vector<c10::intrusive_ptr<OregWork>> coalesced_;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Op> queue_;   // GUARDED_BY(mutex_)
  bool stopping_ = false;  // GUARDED_BY(mutex_)
  bool running_ = false;   // GUARDED_BY(mutex_): an op is executing (worker or inline)
  bool driving_ = false;   // GUARDED_BY(mutex_): the worker drives in-flight sends/receives
  bool shutDown_ = false;  // GUARDED_BY(mutex_): no new operations
  std::mutex shutdownMutex_;  // one shutdown() at a time (it joins worker_)
  std::thread worker_;
  std::atomic<int> queued_{0};  // queue_.size(), readable without the lock
  Clock::duration spin_{};      // how long an idle worker polls before sleeping

  // Owned by whoever set running_ or driving_ (an inline op runs on the caller).
  std::vector<InFlight> inflight_;
  std::atomic<bool> hasInflight_{false};  // !inflight_.empty(), for runInline
  std::atomic<bool> sendsInFlight_{false};  // a send in inflight_, for shutdown()
  SelfChannel selfChannel_{getRank()};  // sends to this rank itself; runner only
  std::exception_ptr broken_;  // GUARDED_BY(mutex_) for writes: the group's first failure
};

}  // namespace openreg::ccl
