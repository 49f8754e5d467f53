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
// or nullptr.
const char* launchingOpName();

}  // namespace openreg
