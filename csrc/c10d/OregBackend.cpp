// OregBackend (the c10d::Backend subclass, OregBackend.h): construction, the
// operation queue and its worker, coalescing, point-to-point, split and
// shutdown. The collectives' bodies (argument checks and staging) live in
// OregCollectives.cpp.
#include "OregBackend.h"

#include <ATen/ops/zeros.h>
#include <c10/util/ScopeExit.h>
#include <c10/util/StringUtil.h>
#include <c10/util/thread_name.h>

#include "Errors.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <random>
#include <sstream>

#include "../aten/Launch.h"
#include "../runtime/OpenRegStream.h"
#include "Config.h"
#include "BusyClock.h"
#include "DeviceSynchronize.h"
#include "Staging.h"
#include "Releaser.h"
#include "RoutedTransport.h"
#include "shm/ShmTransport.h"
#include "zmq/ZmqTransport.h"

namespace openreg::ccl {

namespace {

// The group whose collective this thread is completing (running its future's
// callbacks), or null.
thread_local const OregBackend* t_completingFor = nullptr;
// Where the queue stood when that collective's future was requested (0:
// unknown): callbacks chained on it come after what was queued before that.
thread_local uint64_t t_completingPoint = 0;

// The key prefix of this incarnation of the group, unique to it.
//
// torchrun's c10d rendezvous shares one TCPStore with the workers for the
// whole job, so when a restarted job creates the group again the previous
// attempt's keys (shared-memory ids, ZeroMQ endpoints) are still there, and
// TORCHELASTIC_RESTART_COUNT cannot keep attempts apart: an agent that
// restarts its workers because another node failed does not count a restart,
// so ranks of one attempt can see different counts (pytorch/pytorch#135712,
// #108158). Instead the ranks agree on a fresh random id, each proving it
// belongs to the current attempt with a nonce: rank r publishes hello/r =
// nonce_r; rank 0 publishes a roster (its own nonce, then the nonces it read);
// rank r accepts a roster only once it lists nonce_r (which only this
// attempt's rank 0 can have read), acknowledges with rank 0's nonce, and
// every rank uses rank 0's nonce as the prefix. Rank 0 re-reads the hello of
// every rank that has not acknowledged yet (it may have read a stale one) and
// republishes the roster until all have.
std::string attemptPrefix(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                          std::chrono::milliseconds timeout) {
  std::random_device rd;
  const std::string mine = std::to_string((uint64_t(rd()) << 32) ^ rd());
  if (size == 1) return "oreg_ccl/" + mine + "/";
  const std::string base = "oreg_ccl/attempt/";
  auto put = [&](const std::string& k, const std::string& v) {
    store->set(base + k, std::vector<uint8_t>(v.begin(), v.end()));
  };
  // The value of `k`, or "" while it does not exist.
  auto peek = [&](const std::string& k) {
    if (!store->check({base + k})) return std::string();
    auto v = store->get(base + k);
    return std::string(v.begin(), v.end());
  };
  const auto deadline = deadlineAfter(timeout);
  auto pause = [&, delay = std::chrono::microseconds(100)](const char* what) mutable {
    if (std::chrono::steady_clock::now() > deadline)
      OREG_CCL_THROW("oreg_ccl: rank ", rank, " timed out after ", timeout.count(),
                     " ms waiting for ", what, " while creating a group of ", size);
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::microseconds(5000));
  };
  put("hello/" + std::to_string(rank), mine);
  if (rank != 0) {
    for (;;) {
      std::vector<std::string> roster;
      std::stringstream in(peek("roster"));
      for (std::string item; std::getline(in, item, ',');) roster.push_back(item);
      if (static_cast<int>(roster.size()) == size && roster[rank] == mine) {
        put("ack/" + std::to_string(rank), roster[0]);
        return "oreg_ccl/" + roster[0] + "/";
      }
      pause("the other ranks (roster of rank 0)");
    }
  }
  std::vector<std::string> seen(size);
  std::vector<bool> acked(size, false);
  seen[0] = mine;
  acked[0] = true;
  for (int missing = size - 1;;) {
    bool changed = false;
    for (int q = 1; q < size; ++q) {
      if (acked[q]) continue;
      std::string hello = peek("hello/" + std::to_string(q));
      changed |= hello != seen[q];
      seen[q] = std::move(hello);
    }
    if (changed) {
      std::string roster;
      for (int q = 0; q < size; ++q) roster += (q ? "," : "") + seen[q];
      put("roster", roster);
    }
    for (int q = 1; q < size; ++q) {
      if (!acked[q] && peek("ack/" + std::to_string(q)) == mine) {
        acked[q] = true;
        --missing;
      }
    }
    if (missing == 0) return "oreg_ccl/" + mine + "/";
    pause("the other ranks (acknowledgements)");
  }
}

std::exception_ptr asDistError(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const c10::DistBackendError&) {
    return e;
  } catch (const std::exception&) {
    return distError(messageOf(e));
  }
}

}  // namespace

OregBackend::OregBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                         c10::intrusive_ptr<Options> options)
    : Backend(rank, size), options_(std::move(options)) {
  TORCH_CHECK_VALUE(size >= 1 && rank >= 0 && rank < size, "oreg_ccl: invalid rank ", rank,
                    " for a group of ", size);
  // Read the settings before any rendezvous: every rank then raises its own
  // ValueError for a malformed one, instead of some reporting a peer's failure.
  config();
  const auto timeout = options_->timeout;
  // gloo's check: a negative timeout reached the rendezvous as "timed out after -5000 ms".
  TORCH_CHECK_VALUE(timeout.count() >= 0, "oreg_ccl: invalid timeout ", timeout.count(),
                    " ms: it must not be negative");
  storePrefix_ = attemptPrefix(store, rank, size, timeout);
  store_ = store;
  const std::string& prefix = storePrefix_;
  // A rank that fails to set up its part (a bad OREG_CCL_SOCKET_IFNAME, no
  // shared memory) says so under `failed`, and the ranks waiting for its keys
  // raise that at once instead of the store's timeout long after.
  const std::string failedKey = prefix + "failed";
  Rendezvous rdv{
      [store, prefix](const std::string& k, const std::string& v) {
        store->set(prefix + k, std::vector<uint8_t>(v.begin(), v.end()));
      },
      [store, prefix, failedKey, timeout, rank](const std::string& k) {
        const auto deadline = deadlineAfter(timeout);
        auto delay = std::chrono::microseconds(50);
        while (!store->check({prefix + k})) {
          if (store->check({failedKey})) {
            auto why = store->get(failedKey);
            OREG_CCL_THROW("oreg_ccl: rank ", rank, ": a peer could not create the group: ",
                           std::string(why.begin(), why.end()));
          }
          if (std::chrono::steady_clock::now() > deadline)
            OREG_CCL_THROW("oreg_ccl: rank ", rank, " timed out after ", timeout.count(),
                           " ms waiting for '", k, "' from a peer while creating the group");
          std::this_thread::sleep_for(delay);
          delay = std::min(delay * 2, std::chrono::microseconds(20000));
        }
        auto v = store->get(prefix + k);
        return std::string(v.begin(), v.end());
      }};
  try {
    topology_ = size > 1 ? Topology::discover(rank, size, rdv) : Topology::singleHost(rank, size);
    if (topology_.multiHost())
      transport_ = std::make_shared<RoutedTransport>(topology_, rdv, timeout);
    else
      transport_ = ShmTransport::connect(rank, size, rdv);
  } catch (const std::exception&) {
    if (size > 1 && !store->check({failedKey})) {
      const std::string why = c10::str("rank ", rank, ": ", messageOf(std::current_exception()));
      store->set(failedKey, std::vector<uint8_t>(why.begin(), why.end()));
    }
    throw;
  }
  spin_ = std::chrono::microseconds(config().spinUsFor(size));
  sanitizerLane_ = orSanitizerLaneCreate(c10::str("oreg_ccl rank ", rank, " of a group of ", size));
  worker_ = std::thread([this] {
    c10::setThreadName("oreg_ccl_" + std::to_string(rank_));
    t_workerOf = this;
    workerLoop();
  });
}

OregBackend::~OregBackend() {
  // The last reference may go on a thread that holds the GIL (the releaser's,
  // with an operation): the worker may need it for a callback to finish.
  withoutGil([this] { shutdown(); });
}

std::chrono::milliseconds OregBackend::timeoutOf(std::chrono::milliseconds requested) const {
  return requested == c10d::kUnsetTimeout ? options_->timeout : requested;
}

int OregBackend::sanitizerLaneOf(c10d::OpType type, int peer) {
  const bool send = type == c10d::OpType::SEND;
  if (!send && type != c10d::OpType::RECV && type != c10d::OpType::RECVANYSOURCE)
    return sanitizerLane_;
  auto [it, added] = sanitizerP2pLanes_.try_emplace(peer * 2 + send, -1);
  if (added)
    it->second = orSanitizerLaneCreate(c10::str("oreg_ccl rank ", getRank(), "'s ",
                                                send ? "sends to rank " : "receives from rank ",
                                                peer < 0 ? std::string("any") : std::to_string(peer)));
  return it->second;
}

c10::intrusive_ptr<OregWork> OregBackend::enqueue(c10d::OpType type, const std::string& name,
                                                  const std::string& desc,
                                                  const std::vector<at::Tensor>& inputs,
                                                  const std::vector<at::Tensor>& outputs,
                                                  Call call, Body body, Post post, bool blockHost,
                                                  int readyDevice) {
  {
    std::lock_guard<std::mutex> g(mutex_);
    if (shutDown_)
      OREG_CCL_THROW("oreg_ccl: rank ", getRank(), ": ", name,
                       " called after the process group was shut down or aborted");
  }
  // A broken group fails every later call at once, on the caller's thread.
  std::string failure = transport_->failure();
  if (!failure.empty())
    OREG_CCL_THROW("oreg_ccl: rank ", getRank(), ": ", name,
                   " on a process group that already failed: ", failure, globalRanksNote());
  int device = readyDevice;
  const auto bound = getBoundDeviceId();  // init_process_group(device_id=...)
  for (const auto* list : {&inputs, &outputs})
    for (const auto& t : *list)
      if (isOpenReg(t)) {
        device = t.device().index();
        // NCCL's check: a device mix-up raises here, as it would on a GPU.
        if (bound && bound->type() == t.device().type() && *bound != t.device())
          OREG_CCL_THROW("oreg_ccl: rank ", getRank(), ": ", name, ": Attempt to perform "
                         "collective on tensor not on device passed to init_process_group (",
                         t.device(), ", bound to ", *bound, ")");
      }

  // The caller's current stream, which an operation on openreg tensors follows.
  std::optional<c10::Stream> stream;
  if (device >= 0) {
    checkDistinctDevice(device);
    stream = getCurrentStream(static_cast<c10::DeviceIndex>(device));
    if (orStreamIsCapturing(rawStream(*stream)))
      return capture(type, name, desc, inputs, outputs, call, std::move(body), std::move(post),
                     blockHost, device, *stream);
  }

  // The capture records a coalesced group's captured parts as one kernel:
  // a part that is not captured could not be part of it.
  if (coalescing() && !captured_.parts.empty())
    OREG_CCL_THROW("oreg_ccl: rank ", getRank(), ": ", name, ": a coalesced group mixes "
                   "operations captured in a graph with one that is not (CPU tensors, or a "
                   "stream that does not capture); issue it outside the capture");
  // A coalesced group's work makes one device's stream wait (as NCCL, which
  // refuses groups over several devices): parts on another would be unordered.
  if (coalescing() && device >= 0) {
    if (coalescedDevice_ < 0) coalescedDevice_ = device;
    TORCH_CHECK_VALUE(coalescedDevice_ == device, "oreg_ccl: rank ", getRank(), ": ", name,
                      " in a coalesced group (batch_isend_irecv, coalescing manager): all "
                      "tensors must be on one device, got openreg:", coalescedDevice_,
                      " and openreg:", device);
  }

  // From the stream marker to the push, for openreg tensors: one issue at a
  // time, so that the group's StreamOrder describes its queue (a future's
  // callback on the worker may issue too). Host tensors do not take it: an
  // operation run inline may have callbacks that issue on this thread.
  std::unique_lock<std::mutex> issuing(issueMutex_, std::defer_lock);
  if (device >= 0) issuing.lock();
  Op op;
  op.group = c10::intrusive_ptr<OregBackend>::reclaim_copy(this);  // the caller holds one
  // A single collective's future is a device future (FutureStreams.h); a
  // send's or receive's may complete out of issue order, so it is the worker's.
  auto work = c10::make_intrusive<OregWork>(getRank(), type, outputs, device, blockHost,
                                            !post && !coalescing() ? futureStreams_ : nullptr);
  op.work = work->attachWorker(/*releasable=*/!post && !coalescing());
  work->setOwner(this);
  work->setQueueClock(queuedOps_);
  op.timeout = timeoutOf(call.timeout);
  op.name = name;
  op.desc = desc;
  op.what = name + " " + desc;  // a collective's tag comes when it starts (runOp)
  if (!post) issued_.fetch_add(1, std::memory_order_relaxed);
  op.body = std::move(body);
  op.post = std::move(post);
  op.origin = collectiveOrigin(device, name, desc);  // inside the issuing c10d op
  if (device >= 0) {
    // The body holds aliases (forWorker); the caller's tensors stay alive
    // until wait() queued its stream hold or the operation finished.
    std::vector<at::Tensor> held = inputs;
    held.insert(held.end(), outputs.begin(), outputs.end());
    work->stash(std::move(held));
    op.stream = rawStream(*stream);
    if (orSanitizerEnabled()) {
      // The operation reads its inputs and writes its outputs off the
      // stream, after what is queued on it now, until a wait joins it.
      orSanitizerPoint point;
      if (orSanitizerLaneAccess(sanitizerLaneOf(type, call.peer), op.stream,
                                accessesOf(inputs, outputs), &point) == orErrorDataRace) {
        transport_->cancel(c10::str("oreg_ccl: rank ", getRank(), ": ", op.what, ": ",
                                    orSanitizerLastReport()),
                           /*propagate=*/true);
        OREG_CCL_THROW("oreg_ccl: rank ", getRank(), ": ", op.what, ": ", orSanitizerLastReport());
      }
      work->setSanitizerPoint(std::move(point));
    }
    // A failed stream takes the marker path, which raises its error here.
    if (streamOrder_->covers(op.stream) && orStreamQuery(op.stream) != orErrorLaunchFailure) {
      streamMarkersSkipped_.fetch_add(1, std::memory_order_relaxed);
    } else {
      // Ready once the caller's stream reaches this point; the host goes on.
      op.ready = std::make_shared<std::atomic<bool>>(false);
      auto ready = op.ready;
      auto transport = transport_;
      const uint64_t before = orStreamLaunchCount(op.stream);
      try {
        UntracedLaunches untraced;  // the start of a wait, as CUDA's events (OpenRegKinetoPlugin.h)
        launchKernel(*stream,
                     [ready, transport] {
                       ready->store(true, std::memory_order_release);
                       transport->wakeup();
                     });
      } catch (const std::exception&) {
        // A kernel before it already failed the stream: fail the group now, as
        // the worker does when it finds that later, or the peers would wait
        // for this operation until the timeout.
        transport_->cancel(c10::str("oreg_ccl: rank ", getRank(), ": ", op.what,
                                    " cannot start: a kernel queued before it on its openreg "
                                    "stream failed: ", orStreamLastError(op.stream)),
                           /*propagate=*/true);
        throw;
      }
      streamOrder_->coverMarker(op.stream, before);
      streamMarkers_.fetch_add(1, std::memory_order_relaxed);
    }
    if (!op.post && !coalescing()) work->extendsStreamOrder(streamOrder_);
  }
  // Host tensors on an idle group: a synchronous collective runs on the
  // caller's thread, and a send or receive is posted from it (a send that
  // fits the ring completes right here; the worker only drives what stays
  // in flight).
  if (device < 0 && !coalescing() && (op.post || !call.asyncOp) && runInline(op)) return work;
  // Issued by a callback of this group's collective on the thread running it.
  // The callback runs either here or at then() on the caller's thread if the
  // collective was done by then, so on host tensors it runs right here, after
  // what was queued before the caller requested that collective's future
  // (then()'s place in program order) and ahead of what came later: the
  // same order on every rank, whatever the timing. (A comm hook chaining on
  // its bucket (PowerSGD) had its collectives queued behind later buckets on
  // some ranks only.) On device tensors the queue's order is the streams'
  // (StreamOrder.h): run it through this one.
  const bool nested = t_completingFor == this && !coalescing();
  if (nested && device < 0) {
    {
      std::lock_guard<std::mutex> g(mutex_);
      if (shutDown_)
        OREG_CCL_THROW("oreg_ccl: rank ", getRank(), ": ", name,
                       " called after the process group was shut down or aborted");
    }
    runQueued(/*before=*/t_completingPoint, /*through=*/nullptr);
    runOp(op);
    releaseLater(std::move(op));
    return work;
  }
  const std::shared_ptr<OregWork::WorkerRef> mine = nested ? op.work : nullptr;
  pushOp(std::move(op), name);  // checks shutdown() again: it may have begun since
  // Queued, so it will complete (run, fail or be failed by shutdown).
  if (device >= 0) waitAtDeviceSynchronize(device, work->completion(), work->sanitizerPoint());
  if (coalescing()) coalesced_.push_back(work);
  if (nested) {
    if (issuing.owns_lock()) issuing.unlock();  // the operations run may issue again
    runQueued(/*before=*/UINT64_MAX, /*through=*/mine);
  }
  return work;
}

void OregBackend::pushOp(Op&& op, const std::string& name) {
  {
    std::lock_guard<std::mutex> g(mutex_);
    if (shutDown_)
      OREG_CCL_THROW("oreg_ccl: rank ", getRank(), ": ", name,
                     " called after the process group was shut down or aborted");
    op.queued = queuedOps_->fetch_add(1, std::memory_order_relaxed);
    queue_.push_back(std::move(op));
    queued_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  transport_->wakeup();
}

void OregBackend::runQueued(uint64_t before, const std::shared_ptr<OregWork::WorkerRef>& through) {
  // This thread holds running_ (it is inside runOp), so the worker stays
  // parked and the transport is ours; the queue's order is the issue order.
  for (;;) {
    Op next;
    {
      std::lock_guard<std::mutex> g(mutex_);
      if (queue_.empty() || queue_.front().queued >= before) return;
      next = std::move(queue_.front());
      queue_.pop_front();
      queued_.fetch_sub(1, std::memory_order_release);
    }
    const bool last = through && next.work == through;
    runOp(next);
    releaseLater(std::move(next));
    if (last) return;
  }
}

bool OregBackend::runInline(Op& op) {
  {
    std::lock_guard<std::mutex> g(mutex_);
    // The worker owns the transport while it runs an op or drives p2p
    // requests; otherwise it is parked on cv_ and the caller may borrow it
    // (mutex_ orders the two threads' uses of the transport).
    // A collective would wait for its peers here, so only posts may start
    // while sends/receives are in flight (and not while the worker drives
    // them). Once shutdown() began, the worker may be tearing down inflight_.
    if (shutDown_ || stopping_ || running_ || driving_ || !queue_.empty() ||
        (!op.post && hasInflight_.load(std::memory_order_acquire)))
      return false;
    running_ = true;
  }
  {
    // Meanwhile this thread is the group's runner, as its worker is.
    auto restore = c10::make_scope_exit([outer = t_workerOf] { t_workerOf = outer; });
    t_workerOf = this;
    runOp(op);
  }
  bool wakeWorker;
  {
    std::lock_guard<std::mutex> g(mutex_);
    running_ = false;
    // Only shutdown() waits for running_ to clear, and only the worker drives
    // what is left in flight; waking the parked worker for nothing would cost
    // a futex wake-up and two context switches per call.
    wakeWorker = shutDown_ || !queue_.empty() || hasInflight_.load(std::memory_order_acquire);
  }
  if (wakeWorker) cv_.notify_all();
  return true;
}

void OregBackend::workerLoop() {
  for (;;) {
    Op op;
    bool have = false, stop = false;
    // Small operations come in bursts: poll the queue briefly before sleeping,
    // which saves a futex wake-up per operation when every rank has a core.
    for (auto until = Clock::now() + spin_;
         queued_.load(std::memory_order_acquire) == 0 &&
         !hasInflight_.load(std::memory_order_acquire) && Clock::now() < until;) {
      std::this_thread::yield();
    }
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // While an op runs inline (running_), the caller owns the transport,
      // even once stopping (shutdown() cancelled the transport first, so it
      // ends soon).
      cv_.wait(lock, [&] {
        return !running_ && (stopping_ || !queue_.empty() || (hasInflight_ && !broken_));
      });
      if (stopping_ && queue_.empty()) {
        stop = true;
      } else if (!queue_.empty()) {
        op = std::move(queue_.front());
        queue_.pop_front();
        queued_.fetch_sub(1, std::memory_order_release);
        running_ = have = true;
      } else {
        driving_ = true;  // nothing queued: drive what is in flight
      }
    }
    if (have) {
      runOp(op);
      {
        std::lock_guard<std::mutex> g(mutex_);
        running_ = false;
      }
      cv_.notify_all();
      releaseLater(std::move(op));
      continue;
    }
    if (stop) break;
    // Idle, with sends/receives in flight: drive them until something happens.
    try {
      // Wake at least once a second; a transport blocked on a peer inside
      // progress gives up only at the operations' own deadline.
      auto deadline = Clock::time_point::max();
      for (auto& f : inflight_) deadline = std::min(deadline, f.deadline);
      transport_->progress(std::min(deadline, Clock::now() + std::chrono::seconds(1)), deadline);
      sweepInFlight();
    } catch (...) {
      auto e = asDistError(std::current_exception());
      // Our transport has failed for good (e.g. a send/recv size mismatch):
      // tell the peers instead of letting them wait out their timeout; but a
      // shutdown is ours alone.
      bool shuttingDown;
      {
        std::lock_guard<std::mutex> g(mutex_);
        shuttingDown = shutDown_;
      }
      if (!shuttingDown) transport_->cancel(messageOf(e), /*propagate=*/true);
      failAll(withGlobalRanks(e), /*announced=*/!shuttingDown);
    }
    std::lock_guard<std::mutex> g(mutex_);
    driving_ = false;
  }
  failAll(distError("oreg_ccl: the process group was shut down before this operation completed"));
}

void OregBackend::runOp(Op& op) {
  if (!op.post) {
    op.tag = started_++;
    op.what = op.name + "#" + std::to_string(op.tag) + " " + op.desc;
  }
  if (broken_) {
    op.kept = op.work->complete(broken_);
    return;
  }
  Collective c{*transport_, op.tag, op.what, deadlineAfter(op.timeout),
               topology_.multiHost() ? &topology_ : nullptr};
  try {
    while (op.ready && !op.ready->load(std::memory_order_acquire)) {
      // A failed kernel before the marker: the stream skips the marker too
      // (sticky, like CUDA's errors). Fail now, as NCCL's watchdog would.
      if (op.stream && orStreamQuery(op.stream) == orErrorLaunchFailure)
        OREG_CCL_THROW("oreg_ccl: rank ", getRank(), ": ", op.what,
                       " cannot start: a kernel queued before it on its openreg stream failed: ",
                       orStreamLastError(op.stream));
      if (Clock::now() >= c.deadline)
        OREG_CCL_THROW("oreg_ccl: rank ", getRank(), ": Timed out in ", op.what,
                         ": the work queued before it on the openreg stream did not finish");
      // Woken by the marker; the bound is for the failure check above.
      transport_->progress(std::min(c.deadline, Clock::now() + std::chrono::milliseconds(200)),
                           c.deadline);
      sweepInFlight();
    }
    if (op.post) {
      op.kept = op.work->lock();  // p2p works are never weakened
      // A send or receive is device work from its post to its completion
      // (which may come inside the post), recorded before the work completes.
      if (op.origin.traced)
        op.kept->beforeCompleting([origin = std::move(op.origin), start = c10::getTime()]() mutable {
          recordRun(origin.device, kCollectiveRow, origin.correlation, origin.op,
                    std::move(origin.name), start);
        });
      RequestPtr req = op.post(c, op.kept);
      inflight_.push_back({req, op.kept, c.deadline, op.what, op.group});
      inflightChanged();
    } else {
      {
        BusySpan busy;  // stream dependencies met: the collective itself
        runTracedCollective(op.origin, [&] { op.body(c); });
      }
      // Future callbacks run here; one that issues on this group runs that
      // operation on this thread (enqueue).
      auto restore = c10::make_scope_exit(
          [outer = t_completingFor, point = t_completingPoint] {
            t_completingFor = outer;
            t_completingPoint = point;
          });
      t_completingFor = this;
      const auto work = op.work->lock();
      t_completingPoint = work ? work->futureQueuePoint() : 0;
      op.kept = op.work->complete(nullptr);
    }
    sweepInFlight();
  } catch (...) {
    auto e = asDistError(std::current_exception());
    // The peers of a failed collective would wait for us: fail them too.
    transport_->cancel(messageOf(e), /*propagate=*/true);
    e = withGlobalRanks(e);  // for this process's user only: peers add their own
    failAll(e, /*announced=*/true);  // quiesces the transport before any tensors go back
    op.kept = op.work->complete(e);
  }
}

void OregBackend::sweepInFlight() {
  auto now = Clock::now();
  for (auto& f : inflight_) {
    if (!f.req->done.load(std::memory_order_acquire) && now >= f.deadline) {
      std::string why = "oreg_ccl: rank " + std::to_string(getRank()) + ": Timed out in " + f.what +
                        " (peer " + std::to_string(f.req->peer) + ")";
      transport_->cancel(why, /*propagate=*/true);
      OREG_CCL_THROW(why);
    }
  }
  auto done = std::stable_partition(inflight_.begin(), inflight_.end(),
                                    [](const InFlight& f) { return !f.req->done.load(); });
  if (done == inflight_.end()) return;
  std::vector<InFlight> finished(std::make_move_iterator(done),
                                 std::make_move_iterator(inflight_.end()));
  inflight_.erase(done, inflight_.end());
  inflightChanged();
  releaseLater(std::move(finished));
}

void OregBackend::inflightChanged() {
  hasInflight_.store(!inflight_.empty(), std::memory_order_release);
  // A send to this rank itself is left out: once shutdown() began, nothing
  // can post its receive.
  const bool sending = std::any_of(inflight_.begin(), inflight_.end(), [&](const InFlight& f) {
    return f.work->retrieveOpType() == c10d::OpType::SEND && f.req->peer != getRank();
  });
  if (sendsInFlight_.exchange(sending, std::memory_order_acq_rel) && !sending) {
    bool waited;
    {
      std::lock_guard<std::mutex> g(mutex_);  // shutdown() may be between its check and its wait
      waited = shutDown_;
    }
    if (waited) cv_.notify_all();  // not the parked worker after every inline send
  }
}

// Errors name ranks of this group (as NCCL's do); in a subgroup (new_group,
// a DeviceMesh dimension) the user thinks in global ranks, so say which is which.
std::string OregBackend::globalRanksNote() const {
  const auto& global = options_->global_ranks_in_group;
  bool identity = true;
  for (size_t i = 0; i < global.size(); ++i) identity = identity && global[i] == i;
  if (identity) return "";
  const std::string& desc = getGroupDesc();
  std::string note = c10::str(" [process group ", getGroupUid(),
                              desc.empty() || desc == "undefined" ? "" : " (" + desc + ")",
                              ": its ranks 0-", global.size() - 1, " are global ranks ");
  constexpr size_t kShown = 32;
  for (size_t i = 0; i < std::min(global.size(), kShown); ++i)
    note += (i ? ", " : "") + std::to_string(global[i]);
  note += global.size() > kShown ? ", ...]" : "]";
  return note;
}

std::exception_ptr OregBackend::withGlobalRanks(std::exception_ptr e) const {
  const std::string note = globalRanksNote();
  return note.empty() ? e : distError(messageOf(e) + note);
}

void OregBackend::failAll(std::exception_ptr error, bool announced) {
  {
    std::lock_guard<std::mutex> g(mutex_);  // the worker's wait predicate reads broken_
    if (!broken_) broken_ = error;
  }
  transport_->quiesce();
  if (announced) transport_->awaitPeersFailed(std::chrono::seconds(2));
  for (auto& f : inflight_) f.work->complete(error);
  selfChannel_.clear();
  std::vector<InFlight> failed;
  failed.swap(inflight_);
  inflightChanged();
  releaseLater(std::move(failed));
}

// ---- point to point ----------------------------------------------------------

c10::intrusive_ptr<c10d::Work> OregBackend::raiseAtWaitWhileCoalescing(
    c10d::OpType type, c10::function_ref<c10::intrusive_ptr<c10d::Work>()> issue) {
  if (!coalescing()) return issue();
  try {
    return issue();
  } catch (const std::exception&) {
    // c10d's coalescing manager is not exception-safe: an error raised inside
    // its block leaves the process group coalescing for good (later
    // collectives silently do nothing). Raise it at wait(), as gloo does.
    auto failed = c10::make_intrusive<OregWork>(getRank(), type, std::vector<at::Tensor>{}, -1,
                                                /*blockHost=*/true);
    failed->complete(std::current_exception());
    coalesced_.push_back(failed);
    return failed;
  }
}

namespace {
// Negative tags are the backend's own (the monitored barrier's): refused, as gloo refuses them.
void checkUserTag(int tag) { TORCH_CHECK(tag >= 0, "oreg_ccl: Tag must be nonnegative, got ", tag); }
}  // namespace

c10::intrusive_ptr<c10d::Work> OregBackend::send(std::vector<at::Tensor>& tensors, int dstRank,
                                                 int tag) {
  // Inside: an error raised in a coalescing block must wait for wait().
  return raiseAtWaitWhileCoalescing(c10d::OpType::SEND, [&] {
    checkUserTag(tag);
    return sendImpl(tensors, dstRank, tag);
  });
}

c10::intrusive_ptr<c10d::Work> OregBackend::sendImpl(std::vector<at::Tensor>& tensors, int dstRank,
                                                     int tag) {
  at::Tensor t = checkSingle(tensors, "send");
  TORCH_CHECK_VALUE(dstRank >= 0 && dstRank < getSize(), "oreg_ccl: send to invalid rank ",
                    dstRank, " (group size ", getSize(), ")");
  Post post = [t = forWorker(t), dstRank, tag, self = &selfChannel_](
                  Collective& c, const c10::intrusive_ptr<OregWork>& work) {
    auto s = std::make_shared<Staged>(stage(t, t.scalar_type(), /*load=*/true));
    const auto wireTag = static_cast<uint64_t>(tag);
    RequestPtr req =
        dstRank == c.rank()
            ? self->isend(wireTag, c.what, s->buf.data_ptr(), s->buf.nbytes())
            : c.transport.isend(Channel::kP2P, dstRank, wireTag, c.what, s->buf.data_ptr(),
                                s->buf.nbytes());
    // Raw pointer: the in-flight entry owns the work until it completes.
    onDone(req, [w = work.get(), s] { w->complete(nullptr); });
    return req;
  };
  return enqueue(c10d::OpType::SEND, "send", describe(t) + " to " + std::to_string(dstRank),
                 {t}, {}, Call{c10d::kUnsetTimeout, true, dstRank}, nullptr, post);
}

c10::intrusive_ptr<c10d::Work> OregBackend::recv(std::vector<at::Tensor>& tensors, int srcRank,
                                                 int tag) {
  return raiseAtWaitWhileCoalescing(c10d::OpType::RECV, [&] {
    checkUserTag(tag);
    return recvImpl(tensors, srcRank, tag, c10d::kUnsetTimeout);
  });
}

c10::intrusive_ptr<c10d::Work> OregBackend::recvImpl(std::vector<at::Tensor>& tensors, int srcRank,
                                                     int tag, std::chrono::milliseconds timeout) {
  at::Tensor t = checkSingle(tensors, "recv");
  checkWritable({t}, "recv");
  TORCH_CHECK_VALUE(srcRank == kAnySource || (srcRank >= 0 && srcRank < getSize()),
                    "oreg_ccl: recv from invalid rank ", srcRank, " (group size ", getSize(), ")");
  Post post = [t = forWorker(t), srcRank, tag, self = &selfChannel_](
                  Collective& c, const c10::intrusive_ptr<OregWork>& work) {
    auto s = std::make_shared<Staged>(stage(t, t.scalar_type(), /*load=*/false));
    char* base = static_cast<char*>(s->buf.data_ptr());
    const auto wireTag = static_cast<uint64_t>(tag);
    // A receive from any source takes messages of other ranks only (as gloo's).
    RequestPtr req =
        srcRank == c.rank()
            ? self->irecv(wireTag, c.what, base, s->buf.nbytes())
            : c.transport.irecv(
                  Channel::kP2P, srcRank, wireTag, c.what, s->buf.nbytes(),
                  [base](const void* piece, size_t off, size_t n) { std::memcpy(base + off, piece, n); },
                  base);
    Request* raw = req.get();
    onDone(req, [w = work.get(), s, raw, srcRank] {
      unstage(*s);
      w->setSourceRank(srcRank == kAnySource ? raw->peer : srcRank);
      w->complete(nullptr);
    });
    return req;
  };
  return enqueue(srcRank == kAnySource ? c10d::OpType::RECVANYSOURCE : c10d::OpType::RECV, "recv",
                 describe(t), {}, {t}, Call{timeout, true, srcRank}, nullptr, post);
}

c10::intrusive_ptr<c10d::Work> OregBackend::recvAnysource(std::vector<at::Tensor>& tensors,
                                                          int tag) {
  return recv(tensors, kAnySource, tag);
}

// ---- monitored barrier (gloo's debugging barrier) -------------------------------

namespace {
// p2p tag of monitored-barrier messages: negative, which send/recv refuse to users.
constexpr int kMonitoredBarrierTag = -0x6d62;
}  // namespace

// As gloo: every rank > 0 reports to rank 0 and waits for its release; rank 0
// waits up to the timeout for all of them, then releases them, or raises
// naming the first rank (every rank with waitAllRanks) that did not report.
// A failed monitored barrier fails the group like any oreg_ccl timeout, so
// the waiting ranks raise at once instead of waiting out their own timeout.
void OregBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  const auto timeout = timeoutOf(opts.timeout);
  const int rank = getRank(), size = getSize();
  auto token = [] { return std::vector<at::Tensor>{at::zeros({1}, at::kFloat)}; };
  if (rank != 0) {
    auto t = token();
    sendImpl(t, 0, kMonitoredBarrierTag)->wait();
    try {
      auto r = token();
      recvImpl(r, 0, kMonitoredBarrierTag, c10d::kUnsetTimeout)->wait();
    } catch (const std::exception&) {
      OREG_CCL_THROW("Rank ", rank, " successfully reached monitoredBarrier, but received errors "
                     "while waiting for send/recv from rank 0. Please check rank 0 logs for "
                     "faulty rank. Original exception: ", messageOf(std::current_exception()));
    }
    return;
  }
  if (timeout.count() <= 0) {
    std::string why = c10::str("Rank 0 timed out in monitoredBarrier after ", timeout.count(),
                               " ms");
    transport_->cancel(why, /*propagate=*/true);
    OREG_CCL_THROW(why);
  }
  // All receives share one deadline: a rank that did not report by then failed.
  std::vector<c10::intrusive_ptr<c10d::Work>> recvs;
  for (int r = 1; r < size; ++r) {
    auto t = token();
    recvs.push_back(recvImpl(t, r, kMonitoredBarrierTag, timeout));
  }
  std::vector<int> failed;
  std::string firstError;
  for (int r = 1; r < size; ++r) {
    try {
      recvs[r - 1]->wait();
    } catch (const std::exception&) {
      failed.push_back(r);
      if (firstError.empty()) firstError = messageOf(std::current_exception());
      if (!waitAllRanks) break;
    }
  }
  if (!failed.empty()) {
    std::string ranks = c10::Join(", ", failed);
    OREG_CCL_THROW("[Rank 0]: Rank", failed.size() > 1 ? "s " : " ", ranks,
                   " failed to pass monitoredBarrier in ", timeout.count(),
                   " ms. Original exception: ", firstError);
  }
  std::vector<c10::intrusive_ptr<c10d::Work>> sends;
  for (int r = 1; r < size; ++r) {
    auto t = token();
    sends.push_back(sendImpl(t, r, kMonitoredBarrierTag));
  }
  for (auto& w : sends) w->wait();
}

// ---- coalescing, split, lifecycle ----------------------------------------------

void OregBackend::startCoalescing() {
  // Already coalescing: an error raised inside the last block skipped its
  // endCoalescing (c10d's coalescing manager is not exception-safe). Its parts
  // were issued; start afresh, as NCCL does, rather than refuse every later block.
  coalescingThread_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  coalescedDevice_ = -1;
  coalesced_.clear();
  captured_ = {};
}

c10::intrusive_ptr<c10d::Work> OregBackend::endCoalescing() {
  TORCH_CHECK(coalescing(), "oreg_ccl: endCoalescing called without startCoalescing");
  coalescingThread_.store(std::thread::id(), std::memory_order_relaxed);
  auto work = OregWork::combine(getRank(), coalesced_);
  work->setOwner(this);
  // Parts captured in a graph: recorded now, as one kernel (CapturedOperations.cpp),
  // unless a part was refused (its error reaches the caller at the wait).
  if (!captured_.parts.empty() && captured_.parts.size() == coalesced_.size()) {
    const orStream stream = rawStream(*captured_.stream);
    work->setCaptured(stream, recordCaptured());
  }
  captured_ = {};
  coalesced_.clear();
  return work;
}

c10::intrusive_ptr<c10d::Backend> OregBackend::split(
    const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
    const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  // Refused here: a rank no process has would only show as a rendezvous
  // timeout, long after.
  std::vector<bool> listed(getSize(), false);
  for (int r : ranks) {
    TORCH_CHECK_VALUE(r >= 0 && r < getSize(), "oreg_ccl: split: rank ", r,
                      " is not in the parent group (ranks 0-", getSize() - 1, ")");
    TORCH_CHECK_VALUE(!listed[r], "oreg_ccl: split: rank ", r, " is listed twice");
    listed[r] = true;
  }
  auto it = std::find(ranks.begin(), ranks.end(), getRank());
  if (it == ranks.end()) return nullptr;  // this rank is in none of the new groups
  // c10d's splitGroup calls split() once per device type the parent serves
  // (cpu and openreg), with the store it made for that one call: one backend
  // serves them all, as the parent does. (Keyed on the store object, not the
  // group name: a name comes back once its group is destroyed.)
  if (lastSplitStore_.lock().get() == store.get())
    if (auto same = lastSplit_.lock())
      if (!static_cast<OregBackend*>(same.get())->isShutDown()) return same;
  auto o = c10::make_intrusive<Options>(opts ? opts->timeout : options_->timeout);
  if (opts) {
    o->group_name = opts->group_name;
    o->group_desc = opts->group_desc;
    o->global_ranks_in_group = opts->global_ranks_in_group;
  }
  // A key space named by the members only, identical on each of them (a
  // split's non-members may not call split() at all). Another group of the
  // same ranks, now or after this one is destroyed, is told apart by the
  // constructor's per-incarnation rendezvous (attemptPrefix).
  std::string name;
  for (int r : ranks) name += std::to_string(r) + ",";
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("oreg_ccl_split/" + name + "/", store);
  c10::intrusive_ptr<c10d::Backend> backend = c10::make_intrusive<OregBackend>(
      prefixed, static_cast<int>(it - ranks.begin()), static_cast<int>(ranks.size()), o);
  ++splitsBuilt_;
  lastSplitStore_ = store;
  lastSplit_ = backend;
  return backend;
}

void OregBackend::warnUnreceived() {
  std::string message = transport_->unreceived(Channel::kCollective);
  if (!message.empty())
    TORCH_WARN("oreg_ccl: rank ", getRank(), ": the process group was shut down without receiving ",
               message, ". Its ranks did not call the same collectives: a broadcast or scatter ",
               "whose ranks named different roots returns on every rank, with wrong results.");
  // A send that fits the transport's buffer completes before it is matched
  // (batch_isend_irecv issues sends one after another): its data is lost.
  message = transport_->unreceived(Channel::kP2P);
  if (!message.empty())
    TORCH_WARN("oreg_ccl: rank ", getRank(), ": the process group was shut down without receiving ",
               message, ": no receive matched that send, whose sender went on (gloo raises a "
               "timeout at the sender there, NCCL hangs); its data is lost.");
}

void OregBackend::shutdown() {
  if (t_workerOf == this) {
    std::lock_guard<std::mutex> g(mutex_);
    shutDown_ = true;
    return;
  }
  std::lock_guard<std::mutex> serial(shutdownMutex_);
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (stopping_) return;  // done already
    shutDown_ = true;
    // Let issued operations finish, but never wait unboundedly for peers.
    // Sends too, as NCCL's: one whose work a caller waited for on an openreg
    // stream (which does not block the host) still has to reach its receiver.
    auto grace = std::min<std::chrono::milliseconds>(options_->timeout, std::chrono::seconds(10));
    const bool idle = cv_.wait_for(lock, grace, [&] {
      return queue_.empty() && !running_ && !sendsInFlight_.load(std::memory_order_acquire);
    });
    // Only while no thread drives the transport: the check reads its state.
    if (idle && !driving_ && !hasInflight_.load(std::memory_order_acquire) &&
        transport_->failure().empty())
      warnUnreceived();
  }
  transport_->cancel("oreg_ccl: rank " + std::to_string(getRank()) +
                         ": the process group was shut down",
                     /*propagate=*/false);
  {
    std::lock_guard<std::mutex> g(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  transport_->wakeup();
  if (worker_.joinable()) worker_.join();
  transport_->shutdown();
  // Anything still queued never started.
  auto error = distError("oreg_ccl: the process group was shut down before this operation started");
  std::deque<Op> left;
  {
    std::lock_guard<std::mutex> g(mutex_);
    left.swap(queue_);
  }
  for (auto& op : left) op.work->complete(error);  // on the caller's thread
}

bool OregBackend::isShutDown() {
  std::lock_guard<std::mutex> g(mutex_);
  return shutDown_;
}

OregBackend::NetworkInfo OregBackend::networkInfo() const {
  NetworkInfo info;
  info.topology = topology_.describe();
  info.hostCount = static_cast<int>(topology_.hosts.size());
  info.splits = splitsBuilt_;
  info.streamMarkers = streamMarkers_.load(std::memory_order_relaxed);
  info.streamMarkersSkipped = streamMarkersSkipped_.load(std::memory_order_relaxed);
  if (auto* routed = dynamic_cast<RoutedTransport*>(transport_.get())) {
    info.endpoint = routed->zmq().endpoint(getRank());
    info.groupId = routed->zmq().groupId();
    info.rejected = routed->zmq().rejected();
    if (routed->shm()) {
      info.singleCopy = routed->shm()->singleCopy();
      info.sharedChunksWritten = routed->shm()->sharedChunksWritten();
      info.peerMappedRead = routed->shm()->peerMappedRead();
      info.peerMappedWritten = routed->shm()->peerMappedWritten();
    }
  } else if (auto* shm = dynamic_cast<ShmTransport*>(transport_.get())) {
    info.singleCopy = shm->singleCopy();
    info.sharedChunksWritten = shm->sharedChunksWritten();
    info.peerMappedRead = shm->peerMappedRead();
    info.peerMappedWritten = shm->peerMappedWritten();
  }
  return info;
}

void OregBackend::abort() {
  // Tell the peers first, so their pending collectives fail now.
  transport_->cancel("oreg_ccl: rank " + std::to_string(getRank()) + " aborted the process group",
                     /*propagate=*/true);
  shutdown();
}

}  // namespace openreg::ccl
