// The name of the operator that is launching a kernel, for the race checker's
// reports ("a kernel (aten::mul_) on stream 1 ... that a kernel (aten::fill_)
// on stream 0 wrote"). Kept with a RecordFunction callback (the
// hook PyTorch's profiler uses), installed when the checker is turned on
// (Module.cpp): until then no op pays for it.
#pragma once

namespace openreg {

// Installs the callback once (any thread).
void trackLaunchingOps();
// The innermost dispatcher operator running on this thread (a static string),
// or nullptr.
const char* launchingOpName();

}  // namespace openreg
