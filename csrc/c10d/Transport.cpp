#include "Transport.h"

#include <cstdio>
#include <cstring>

#include <c10/util/Exception.h>

namespace openreg::ccl {

void completeRequest(Request& req, int peer) {
  req.peer = peer;
  req.done.store(true, std::memory_order_release);
  if (auto fn = std::move(req.onComplete)) {
    req.onComplete = nullptr;
    fn();
  }
}

void onDone(const RequestPtr& req, std::function<void()> fn) {
  if (req->done.load(std::memory_order_acquire))
    fn();
  else
    req->onComplete = std::move(fn);
}

std::string wireWhat(const std::string& what, size_t field) {
  if (what.size() < field) return what;
  uint64_t digest = 0xcbf29ce484222325ULL;  // FNV-1a: the same in every process
  for (unsigned char ch : what) digest = (digest ^ ch) * 0x100000001b3ULL;
  char tail[20];
  std::snprintf(tail, sizeof(tail), " ~%016llx", static_cast<unsigned long long>(digest));
  return what.substr(0, field - 1 - std::strlen(tail)) + tail;
}

void putWireWhat(char* dst, size_t field, const std::string& what) {
  if (what.size() < field) {
    std::memcpy(dst, what.c_str(), what.size() + 1);  // the common case: no copy of `what`
    return;
  }
  const std::string cut = wireWhat(what, field);
  std::memcpy(dst, cut.c_str(), cut.size() + 1);
}

std::string mismatchMessage(int rank, const PostedRecv& expected, int src, const std::string& what,
                            size_t bytes) {
  return "oreg_ccl: mismatched collectives: rank " + std::to_string(rank) + " runs " +
         expected.what + " (a message of " + std::to_string(expected.bytes) + " bytes) but rank " +
         std::to_string(src) + " runs " + what + " (a message of " + std::to_string(bytes) +
         " bytes). Every rank of a group must call the same collectives in the same order with "
         "matching sizes and dtypes.";
}

std::string sizeMismatchMessage(int rank, const PostedRecv& recv, int src, size_t sent) {
  return "oreg_ccl: rank " + std::to_string(rank) + " posted a recv of " +
         std::to_string(recv.bytes) + " bytes (tag " + std::to_string(recv.tag) + ") but rank " +
         std::to_string(src) + " sent " + std::to_string(sent) + " bytes";
}

std::string unreceivedMessage(int src, const std::string& what, size_t bytes) {
  return "rank " + std::to_string(src) + "'s " + what + " (" + std::to_string(bytes) + " bytes)";
}

void waitFor(Transport& transport, const RequestPtr& req, Clock::time_point deadline,
             const std::string& what) {
  while (!req->done.load(std::memory_order_acquire)) {
    if (Clock::now() >= deadline) {
      // req->peer is in the numbering of the transport that posted it: the group's.
      std::string why = "oreg_ccl: rank " + std::to_string(transport.groupRank(transport.rank())) +
                        ": Timed out in " +
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
