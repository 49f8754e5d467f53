#include "OpenMPThreads.h"

// Only the header: the functions bind at load time to the libgomp that
// libtorch_cpu already loaded (linking a libgomp here could bring a second).
#include <omp.h>

#include <pthread.h>

#include <chrono>

#include <ATen/Parallel.h>

#include "../runtime/driver/Driver.h"

namespace openreg {

namespace {
// In a fork's child, the thread that forked keeps its OpenMP pool but not the
// pool's threads: pausing it would wait for them forever. (The child's own
// new threads have pools of their own.)
thread_local bool t_pool_from_parent = false;
// Held while a thread pauses its pool, and by fork: a child must not inherit
// libgomp in the middle of a pause (an idle stream worker's, 50 ms after its
// last kernel), whose locks it would then wait for forever.
pthread_mutex_t g_pausing = PTHREAD_MUTEX_INITIALIZER;
const int kAtForkSet = pthread_atfork(
    [] { pthread_mutex_lock(&g_pausing); },
    [] { pthread_mutex_unlock(&g_pausing); },
    [] {
      t_pool_from_parent = true;
      pthread_mutex_unlock(&g_pausing);
    });
}  // namespace

void releaseOpenMPTeam() {
  if (t_pool_from_parent) return;
  pthread_mutex_lock(&g_pausing);
  omp_pause_resource_all(omp_pause_soft);
  pthread_mutex_unlock(&g_pausing);
}

void releaseOpenMPTeamForLaunch() {
  using Clock = std::chrono::steady_clock;
  thread_local Clock::time_point next;
  const auto now = Clock::now();
  if (now < next) return;
  next = now + std::chrono::milliseconds(100);
  releaseOpenMPTeam();
}

// at::get_num_threads first gives the thread PyTorch's setting (torch.set_num_threads)
// if it has not run an ATen parallel region yet: restored on exit.
SerialOpenMP::SerialOpenMP() : threads_(at::get_num_threads()) { omp_set_num_threads(1); }

SerialOpenMP::~SerialOpenMP() { omp_set_num_threads(threads_); }

namespace {
// Stream workers call this once idle (Driver.h: orSetStreamIdleHook).
const bool kIdleHookSet = (orSetStreamIdleHook(&releaseOpenMPTeam), true);
}  // namespace

}  // namespace openreg
