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
const int kAtForkSet = pthread_atfork(nullptr, nullptr, [] { t_pool_from_parent = true; });
}  // namespace

void releaseOpenMPTeam() {
  if (!t_pool_from_parent) omp_pause_resource_all(omp_pause_soft);
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
