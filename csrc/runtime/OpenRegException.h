// OPENREG_CHECK: turns a driver error code into a c10::AcceleratorError
// carrying the code (torch.AcceleratorError, a RuntimeError, in Python), the
// way C10_CUDA_CHECK does for cudaError_t.
#pragma once

#include <c10/util/Exception.h>

#include "driver/Driver.h"

namespace openreg {
// Throws c10::AcceleratorError(code, message), as CUDA's checks do.
[[noreturn]] inline void throwAcceleratorError(orError code, std::string message) {
  throw c10::AcceleratorError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                              static_cast<int32_t>(code), std::move(message));
}
}  // namespace openreg

#define OPENREG_CHECK(expr)                                                          \
  do {                                                                               \
    ::openreg::orError __err = (expr);                                               \
    if (C10_UNLIKELY(__err != ::openreg::orSuccess)) {                               \
      TORCH_CHECK(__err != ::openreg::orErrorForkedChild,                            \
                  "Cannot re-initialize openreg in forked subprocess. To use openreg " \
                  "with multiprocessing, you must use the 'spawn' start method");    \
      TORCH_CHECK(__err != ::openreg::orErrorDataRace, ::openreg::orSanitizerLastReport()); \
      ::openreg::throwAcceleratorError(__err, ::c10::str("openreg error: ",           \
                                                         ::openreg::orGetErrorString(__err))); \
    }                                                                                \
  } while (0)
