// BusyClock: the wall time during which at least one collective of this
// process ran (each from the moment its stream dependencies were met until
// it finished), over all its groups: the launcher's "time in collectives".
// HSDP's two groups run collectives at once; time they overlap counts once.
#pragma once

namespace openreg::ccl {

// Counts the process as busy from construction to destruction (spans nest
// and overlap across threads).
class BusySpan {
 public:
  BusySpan();
  ~BusySpan();
  BusySpan(const BusySpan&) = delete;
  BusySpan& operator=(const BusySpan&) = delete;
};

// Seconds of busy time so far (Python: openreg._C._ccl_busy_seconds).
double collectiveBusySeconds();

}  // namespace openreg::ccl
