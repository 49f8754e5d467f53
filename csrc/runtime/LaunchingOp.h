// The name of the operator that is launching a kernel, for the race checker's
// reports ("a kernel (aten::mul_) on stream 1 ... that a kernel (aten::fill_)
// on stream 0 wrote") and the profiler's kernel names. Kept with a
// RecordFunction callback (the hook PyTorch's profiler uses), installed while
// someone needs it (the checker, once turned on: Module.cpp; a profile that
// records kernels): otherwise no op pays for it.
#pragma once

namespace openreg {

// Installs the callback for one more user (any thread); the last
// untrackLaunchingOps() removes it.
void trackLaunchingOps();
void untrackLaunchingOps();
// The innermost dispatcher operator running on this thread (a static string),
// or the name a NamedLaunch gave, or nullptr.
const char* launchingOpName();

// While one lives, this thread's launches are named `name` (a string that
// outlives every report: the race checker keeps it): kernels no dispatcher
// operator launches, such as Inductor's (csrc/python/CompiledKernels.cpp).
class NamedLaunch {
 public:
  explicit NamedLaunch(const char* name);
  ~NamedLaunch();
  NamedLaunch(const NamedLaunch&) = delete;
  NamedLaunch& operator=(const NamedLaunch&) = delete;

 private:
  const char* previous_;
};

}  // namespace openreg
