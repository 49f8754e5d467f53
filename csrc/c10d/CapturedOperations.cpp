// oreg_ccl operations inside a graph capture (torch.openreg.graph,
// torch.accelerator.Graph), as NCCL's kernels in a CUDA graph.
//
// A collective on a capturing stream is not run. It is recorded as a prepared
// kernel (orLaunchPreparedKernel, Driver.h). Each launch of the graph does
// two things for it, in capture order:
//  - on the host thread that calls replay(), issueReplay queues the operation
//    anew (its tag comes when it starts, as an eager call's). Every rank
//    replays in its program order, so the group's queues agree across ranks.
//  - on the replaying stream, a kernel marks the operation ready once the
//    stream reaches it, then holds the stream until the operation completes.
//    It raises the operation's error there, as a failed NCCL kernel fails its
//    stream.
// The host never blocks: replay() returns at once, and the group's worker
// runs the operation when the stream is ready.
//
// The work returned during the capture is complete for the host. Its wait()
// adds nothing on the capturing stream, because the replayed kernel already
// holds that stream. On another stream, wait() waits for an event recorded
// after the operation, which forks that stream into the capture (CUDA's rule).
//
// A coalesced group (batch_isend_irecv, the coalescing manager) is recorded
// at its end as one kernel that starts every part before it waits for any.
// Not capturable, as with NCCL: a barrier (it blocks the host) and a receive
// from any source (its source is known only at the replay); each raises at
// the call. Operations on CPU tensors are not stream work and run at once.
// Tests: tests/distributed/test_graph_capture.py.
#include "OregBackend.h"

#include "Errors.h"

#include "../aten/Launch.h"
#include "../runtime/OpenRegException.h"
#include "../runtime/OpenRegStream.h"

namespace openreg::ccl {
namespace {

// A queued replayed operation's start: the kernel marks it ready. If that
// kernel is dropped unrun (a later part of the replay failed to issue, or the
// launch was refused), the operation could never start and its group would
// wait for the timeout, so the group fails at once, peers included, as for an
// eager operation whose stream marker cannot be launched.
class ReplayTicket {
 public:
  ReplayTicket(std::shared_ptr<std::atomic<bool>> ready, std::shared_ptr<Transport> transport,
               std::string what)
      : ready_(std::move(ready)), transport_(std::move(transport)), what_(std::move(what)) {}
  ~ReplayTicket() {
    if (started_) return;
    try {
      transport_->cancel(what_ + " was issued for a graph replay that was not launched (an "
                         "error at the replay); the group fails so that its peers do not wait",
                         /*propagate=*/true);
    } catch (...) {  // a destructor: the group then times out instead
    }
  }
  void start() {
    started_ = true;
    ready_->store(true, std::memory_order_release);
    transport_->wakeup();
  }

 private:
  std::shared_ptr<std::atomic<bool>> ready_;
  std::shared_ptr<Transport> transport_;
  std::string what_;
  bool started_ = false;
};

}  // namespace

c10::intrusive_ptr<OregWork> OregBackend::capture(c10d::OpType type, const std::string& name,
                                                  const std::string& desc,
                                                  const std::vector<at::Tensor>& inputs,
                                                  const std::vector<at::Tensor>& outputs,
                                                  Call call, Body body, Post post, bool blockHost,
                                                  int device, const c10::Stream& stream) {
  const auto refuse = [&](const char* what) {
    OREG_CCL_THROW("oreg_ccl: rank ", getRank(), ": ", name, ": ", what,
                   " cannot be captured in a graph (torch.accelerator.Graph); run it outside "
                   "the capture");
  };
  if (blockHost) refuse("a barrier, which blocks the host,");
  if (type == c10d::OpType::RECVANYSOURCE) refuse("a receive from any source");
  if (coalescing() && coalesced_.size() != captured_.parts.size())
    refuse("a coalesced group begun with operations outside the capture");
  if (coalescing() && !captured_.parts.empty() && captured_.stream != stream)
    refuse("a coalesced group over several streams");

  CapturedOps& ops = captured_;
  ops.stream = stream;
  ops.parts.push_back({type, name, desc, timeoutOf(call.timeout), std::move(body), std::move(post),
                       device});
  if (orSanitizerEnabled()) {
    auto accesses = accessesOf(inputs, outputs);
    ops.accesses.insert(ops.accesses.end(), accesses.begin(), accesses.end());
  }
  auto work = c10::make_intrusive<OregWork>(getRank(), type, outputs, device, /*blockHost=*/false);
  work->setOwner(this);
  work->complete(nullptr);
  if (coalescing())
    coalesced_.push_back(work);  // recorded with the group, by endCoalescing
  else
    work->setCaptured(rawStream(stream), recordCaptured());  // `stream` outlives captured_
  return work;
}

std::shared_ptr<orEvent_st> OregBackend::recordCaptured() {
  CapturedOps ops = std::exchange(captured_, CapturedOps{});
  const orStream raw = rawStream(*ops.stream);
  // The graph may outlive the group: a replay then raises at its launch.
  c10::weak_intrusive_ptr<OregBackend> group(c10::intrusive_ptr<OregBackend>::reclaim_copy(this));
  orPrepare prepare = [group, parts = std::move(ops.parts)](orStream replaying) {
    auto backend = group.lock();
    TORCH_CHECK(backend, "oreg_ccl: ", parts.front().name, " ", parts.front().desc,
                " captured in this graph belongs to a process group that was destroyed; the "
                "graph cannot be replayed");
    std::vector<std::function<void()>> ready, holds;
    for (const auto& part : parts) {
      auto [marksReady, holds_] = backend->issueReplay(part, replaying);
      ready.push_back(std::move(marksReady));
      holds.push_back(std::move(holds_));
    }
    // Every part of a coalesced group starts before any is waited for (sends
    // and receives of a batch may need each other).
    return std::function<void()>([ready = std::move(ready), holds = std::move(holds)] {
      for (const auto& start : ready) start();
      for (const auto& hold : holds) hold();
    });
  };
  orError error = orLaunchPreparedKernel(raw, std::move(prepare), std::move(ops.accesses));
  if (error != orSuccess) checkKernelError(error, c10::str(*ops.stream), orStreamLastException(raw));

  orEvent event = nullptr;
  OPENREG_CHECK(orEventCreate(&event, /*enable_timing=*/false));
  std::shared_ptr<orEvent_st> after(event, [](orEvent e) { orEventDestroy(e); });
  OPENREG_CHECK(orEventRecord(event, raw));
  return after;
}

std::pair<std::function<void()>, std::function<void()>> OregBackend::issueReplay(
    const CapturedOp& part, orStream stream) {
  std::lock_guard<std::mutex> issuing(issueMutex_);
  std::string failure = transport_->failure();
  if (!failure.empty())
    OREG_CCL_THROW("oreg_ccl: rank ", getRank(), ": ", part.name, " (graph replay) on a process "
                   "group that already failed: ", failure, globalRanksNote());
  auto work = c10::make_intrusive<OregWork>(getRank(), part.type, std::vector<at::Tensor>{},
                                            part.device, /*blockHost=*/false);
  work->setOwner(this);
  Op op;
  op.group = c10::intrusive_ptr<OregBackend>::reclaim_copy(this);  // the replay's lock() holds one
  op.work = work->attachWorker(/*releasable=*/false);
  op.timeout = part.timeout;
  op.name = part.name;
  op.desc = part.desc + " (graph replay)";
  op.what = op.name + " " + op.desc;  // the tag comes when it starts (runOp)
  if (!part.post) issued_.fetch_add(1, std::memory_order_relaxed);
  const std::string what = op.what;
  op.body = part.body;
  op.post = part.post;
  op.origin = collectiveOrigin(part.device, part.name, part.desc);
  op.stream = stream;
  op.ready = std::make_shared<std::atomic<bool>>(false);
  auto ready = op.ready;
  auto transport = transport_;
  pushOp(std::move(op), part.name + " (graph replay)");
  auto ticket = std::make_shared<ReplayTicket>(std::move(ready), std::move(transport),
                                               c10::str("oreg_ccl: rank ", getRank(), ": ", what));
  return {[ticket] { ticket->start(); }, work->holdUntilDone(/*raises=*/true)};
}

}  // namespace openreg::ccl
