// OPENREG_CHECK: turns a driver error code into a c10::AcceleratorError
// carrying the code (torch.AcceleratorError, a RuntimeError, in Python), the
// way C10_CUDA_CHECK does for cudaError_t.
#pragma once

#include <c10/util/Exception.h>

#include "driver/Driver.h"

// Throws c10::AcceleratorError carrying the driver's code, with the caller's
// source location, as CUDA's checks do; the message is c10::str of the rest.
#define OPENREG_THROW_ACCELERATOR_ERROR(code, ...)                                    \
  throw ::c10::AcceleratorError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, \
                                static_cast<int32_t>(code), ::c10::str(__VA_ARGS__))

#define OPENREG_CHECK(expr)                                                          \
  do {                                                                               \
    ::openreg::orError __err = (expr);                                               \
    if (C10_UNLIKELY(__err != ::openreg::orSuccess)) {                               \
      TORCH_CHECK(__err != ::openreg::orErrorForkedChild,                            \
                  "Cannot re-initialize openreg in forked subprocess. To use openreg " \
                  "with multiprocessing, you must use the 'spawn' start method");    \
      TORCH_CHECK(__err != ::openreg::orErrorDataRace, ::openreg::orSanitizerLastReport()); \
      OPENREG_THROW_ACCELERATOR_ERROR(__err, "openreg error: ",                      \
                                      ::openreg::orGetErrorString(__err));               \
    }                                                                                \
  } while (0)
