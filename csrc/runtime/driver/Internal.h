// Driver-internal state shared by the driver's .cpp files (not a public API).
#pragma once

#include "Driver.h"

namespace openreg::detail {

// Marks the driver initialised (first device use) and installs the fork
// handler and the device-memory fault handler once.
void markInitialized();

// Parses a byte size such as "512MiB", "16GiB", "1G" or "4096"; -1 if invalid.
long long parseByteSize(const char* text);

// Called by the fault handler: the device owning `addr` in its
// host-inaccessible mapping, or -1.
int deviceOfInaccessibleAddress(const void* addr);

void installFaultHandler();

// The race checker (Sanitizer.cpp) as the streams and memory call it, besides
// its public functions; each is a no-op (null) while the checker is off.
int sanitizerNewStreamLane(const std::string& label);
int streamLane(orStream stream);  // Stream.cpp
// The stream's clock now (an event recorded, or what a host wait will have seen).
orSanitizerPoint sanitizerSnapshot(orStream stream);
// Memory given back to the driver: its history goes.
void sanitizerForget(const void* begin, size_t bytes);
orSanitizerPoint eventPoint(orEvent event);  // Stream.cpp: the clock of its last record

}  // namespace openreg::detail

// Every driver entry point that touches devices starts with this: in a forked
// child of an initialised parent the worker threads are gone, so waiting on
// them would hang forever.
#define OR_RETURN_IF_FORKED()                       \
  do {                                              \
    if (::openreg::orIsForkedChild())               \
      return ::openreg::orErrorForkedChild;         \
  } while (0)
