#include "Releaser.h"

#include <Python.h>
#include <c10/util/ScopeExit.h>
#include <c10/util/thread_name.h>
#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace openreg::ccl {
namespace {

struct State {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::unique_ptr<Garbage>> queue;  // GUARDED_BY mutex
  bool stopping = false;                        // GUARDED_BY mutex
  std::thread thread;
};

// Never destroyed: workers may queue garbage while static destructors run.
State* g_state = nullptr;

// A forked child inherits the parent's state as it was (the mutex possibly
// locked, the thread absent): start afresh, leaking the copy.
void afterForkInChild() { g_state = new State(); }

State& state() {
  static bool once = [] {
    g_state = new State();
    pthread_atfork(nullptr, nullptr, afterForkInChild);
    return true;
  }();
  (void)once;
  return *g_state;
}

// How long the releaser lets garbage gather after the first piece arrives:
// one wake-up and one GIL hand-over per window, not per operation.
constexpr auto kBatchWindow = std::chrono::milliseconds(5);

void run(State& s) {
  std::unique_lock<std::mutex> lock(s.mutex);
  for (;;) {
    s.cv.wait(lock, [&] { return !s.queue.empty() || s.stopping; });
    s.cv.wait_for(lock, kBatchWindow, [&] { return s.stopping; });
    if (s.queue.empty()) return;
    auto batch = std::move(s.queue);
    s.queue.clear();
    lock.unlock();
    {
      // Dropping a tensor that has a Python object takes the GIL: take it once
      // for the batch, not once per tensor (each hand-over can wait for the
      // interpreter's switch interval, and a backlog would pin memory).
      PyGILState_STATE gil = PyGILState_Ensure();
      batch.clear();
      PyGILState_Release(gil);
    }
    lock.lock();
  }
}

}  // namespace

void releaseLater(std::unique_ptr<Garbage> garbage) {
  State& s = state();
  bool wake;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.stopping) {
      (void)garbage.release();  // exiting: leak rather than take the GIL here
      return;
    }
    if (!s.thread.joinable()) s.thread = std::thread([&s] {
        c10::setThreadName("oreg_ccl_free");
        run(s);
      });
    wake = s.queue.empty();  // otherwise a wake-up is already on its way
    s.queue.push_back(std::move(garbage));
  }
  if (wake) s.cv.notify_one();
}

void withoutGil(const std::function<void()>& f) {
  if (!Py_IsInitialized() || !PyGILState_Check()) return f();
  PyThreadState* saved = PyEval_SaveThread();
  auto restore = c10::make_scope_exit([saved] { PyEval_RestoreThread(saved); });
  f();
}

void stopReleaser() {
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.stopping) return;
    s.stopping = true;
  }
  s.cv.notify_one();
  if (s.thread.joinable()) s.thread.join();
}

}  // namespace openreg::ccl
