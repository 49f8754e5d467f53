#include "OpenMPThreads.h"

// Only the header: the functions bind at load time to the libgomp that
// libtorch_cpu already loaded (linking a libgomp here could bring a second).
#include <omp.h>

#include <pthread.h>

#include <atomic>
#include <chrono>

#include "../runtime/driver/Driver.h"

namespace openreg {

namespace {
// A fork's child inherits its thread's OpenMP pool but not the pool's
// threads: pausing it would wait for them forever.
std::atomic<bool> g_in_forked_child{false};
const int kAtForkSet = pthread_atfork(nullptr, nullptr, [] { g_in_forked_child = true; });
}  // namespace

void releaseOpenMPTeam() {
  if (g_in_forked_child.load(std::memory_order_relaxed)) return;
  omp_pause_resource_all(omp_pause_soft);
}

void releaseOpenMPTeamForLaunch() {
  using Clock = std::chrono::steady_clock;
  thread_local Clock::time_point next;
  const auto now = Clock::now();
  if (now < next) return;
  next = now + std::chrono::milliseconds(100);
  releaseOpenMPTeam();
}

SerialOpenMP::SerialOpenMP() : threads_(omp_get_max_threads()) { omp_set_num_threads(1); }

SerialOpenMP::~SerialOpenMP() { omp_set_num_threads(threads_); }

namespace {
// Stream workers call this once idle (Driver.h: orSetStreamIdleHook).
const bool kIdleHookSet = (orSetStreamIdleHook(&releaseOpenMPTeam), true);
}  // namespace

}  // namespace openreg
