// How oreg_ccl raises: c10::DistBackendError (torch.distributed.DistBackendError
// in Python) for everything that goes wrong between ranks. c10d's own
// C10D_THROW_ERROR cannot name DistBackendError (c10d does not re-export it).
#pragma once

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#define OREG_CCL_THROW(...) C10_THROW_ERROR(DistBackendError, ::c10::str(__VA_ARGS__))

namespace openreg::ccl {

inline std::exception_ptr distError(const std::string& msg) {
  return std::make_exception_ptr(
      c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, msg));
}

// The message of an exception, without c10's backtrace.
inline std::string messageOf(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const c10::Error& ex) {
    return ex.what_without_backtrace();
  } catch (const std::exception& ex) {
    return ex.what();
  }
}

}  // namespace openreg::ccl
