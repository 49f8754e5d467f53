// Who owns OpenMP threads when the host and stream workers both run CPU code.
//
// Kernels are ATen CPU code, so they parallelise with OpenMP (libgomp, as
// PyTorch's CPU wheel ships it), from whichever thread runs them: the host for
// its own CPU ops, a stream worker for device kernels. Each such thread gets a
// team of its own, and once the process holds more OpenMP threads than cores,
// libgomp stops spinning between parallel regions in every team: each region
// then wakes its threads from a futex, which on a small VM costs more than a
// small kernel (measured on 2 cores: a 128K-float add 7 -> 90 us, a small GPT
// training step 20 -> 31 ms; CPU eager ops after any device kernel 8 -> 75
// us). So one side gives its team up when the other computes:
//  - a thread that launches a kernel releases its team (the device computes);
//  - a stream worker idle for 50 ms releases its team (the host computes);
//  - dispatch probes run their tiny CPU kernels on one thread, never waking a team.
// Never in a fork's child on the thread that forked (its pool's threads stayed
// in the parent; a child forked before openreg was loaded, which takes
// TORCH_DEVICE_BACKEND_AUTOLOAD=0, is not recognised, and hangs there as any
// CPU parallel op of that thread would). Not more often: a team started while
// another thread's team is idle waits for the cores that team's threads spin
// on (up to milliseconds), so a program that alternates short CPU and device
// phases keeps both teams.
#pragma once

namespace openreg {

// Releases the calling thread's OpenMP team (omp_pause_resource_all). Cheap
// when it has none; a no-op inside a parallel region, and on a fork's child's
// forking thread. The next parallel region of this thread starts a new team.
void releaseOpenMPTeam();

// releaseOpenMPTeam at most once per 100 ms per thread, so a host that
// alternates CPU ops and launches does not restart its team every time
// (measured: a CPU add + device add + synchronize loop, 0.16 -> 2.5 ms).
void releaseOpenMPTeamForLaunch();

// For its lifetime, OpenMP parallel regions of the calling thread run on that
// thread alone (its omp_set_num_threads, which at::parallel_for reads).
class SerialOpenMP {
 public:
  SerialOpenMP();
  ~SerialOpenMP();
  SerialOpenMP(const SerialOpenMP&) = delete;
  SerialOpenMP& operator=(const SerialOpenMP&) = delete;

 private:
  int threads_;
};

}  // namespace openreg
