// How oreg_ccl raises: c10::DistBackendError (torch.distributed.DistBackendError
// in Python) for everything that goes wrong between ranks. c10d's own
// C10D_THROW_ERROR cannot name DistBackendError (c10d does not re-export it).
#pragma once

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include "../runtime/driver/Driver.h"

#define OREG_CCL_THROW(...) C10_THROW_ERROR(DistBackendError, ::c10::str(__VA_ARGS__))

namespace openreg::ccl {

inline std::exception_ptr distError(const std::string& msg) {
  return std::make_exception_ptr(
      c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, msg));
}

// The message of an exception, without c10's backtrace (the driver's wording).
inline std::string messageOf(std::exception_ptr e) { return orErrorMessage(e); }

}  // namespace openreg::ccl
