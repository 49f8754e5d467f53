// OPENREG_CHECK: turns a driver error code into a c10::Error (RuntimeError in
// Python), the way C10_CUDA_CHECK does for cudaError_t.
#pragma once

#include <c10/util/Exception.h>

#include "driver/Driver.h"

#define OPENREG_CHECK(expr)                                                          \
  do {                                                                               \
    ::openreg::orError __err = (expr);                                               \
    if (C10_UNLIKELY(__err != ::openreg::orSuccess)) {                               \
      TORCH_CHECK(__err != ::openreg::orErrorForkedChild,                            \
                  "Cannot re-initialize openreg in forked subprocess. To use openreg " \
                  "with multiprocessing, you must use the 'spawn' start method");    \
      TORCH_CHECK(__err != ::openreg::orErrorDataRace, ::openreg::orSanitizerLastReport()); \
      TORCH_CHECK(false, "openreg error: ", ::openreg::orGetErrorString(__err));     \
    }                                                                                \
  } while (0)
