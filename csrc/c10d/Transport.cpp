#include "Transport.h"

#include <c10/util/Exception.h>

namespace openreg::ccl {

void waitFor(Transport& transport, const RequestPtr& req, Clock::time_point deadline,
             const std::string& what) {
  while (!req->done.load(std::memory_order_acquire)) {
    if (Clock::now() >= deadline) {
      std::string why = "oreg_ccl: rank " + std::to_string(transport.rank()) + ": Timed out in " +
                        what + " waiting for rank " + std::to_string(req->peer);
      // Fail the whole group: the other ranks raise now instead of each
      // waiting out its own timeout.
      transport.cancel(why, /*propagate=*/true);
      throw c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, why);
    }
    transport.progress(deadline);
  }
}

}  // namespace openreg::ccl
