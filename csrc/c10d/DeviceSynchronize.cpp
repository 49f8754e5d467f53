#include "DeviceSynchronize.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "../runtime/OpenRegStream.h"

namespace openreg::ccl {
namespace {

struct Pending {
  std::shared_ptr<OregWork::Completion> completion;
  orSanitizerPoint point;
};

std::mutex g_mutex;
std::vector<std::vector<Pending>> g_pending;  // GUARDED_BY g_mutex; per device

std::exception_ptr waitForPending(c10::DeviceIndex device) {
  // On a thread that runs a group's operations (a future's callback), any
  // pending operation may be queued behind this very callback, directly or
  // through another group whose start depends on this one: waiting could
  // deadlock, so only the streams are waited for there.
  if (t_workerOf) return nullptr;
  std::vector<Pending> pending;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (device < 0 || static_cast<size_t>(device) >= g_pending.size()) return nullptr;
    pending = g_pending[device];
  }
  std::exception_ptr failed;
  for (const Pending& p : pending) {
    p.completion->wait();
    orSanitizerHostJoin(p.point);
    // An operation nobody waited for failed: its outputs were never written,
    // so the synchronisation raises (the first such error, once) rather than
    // let the caller read them. One that was waited for reports through
    // wait() or the stream it held.
    std::lock_guard<std::mutex> lock(p.completion->mutex);
    if (p.completion->error && !p.completion->waited.exchange(true, std::memory_order_relaxed) &&
        !failed)
      failed = p.completion->error;
  }
  return failed;
}

}  // namespace

void waitAtDeviceSynchronize(int device, std::shared_ptr<OregWork::Completion> completion,
                             orSanitizerPoint point) {
  static std::once_flag registered;
  std::call_once(registered, [] { addDeviceSynchronizeWaiter(waitForPending); });
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_pending.size() <= static_cast<size_t>(device)) g_pending.resize(device + 1);
  auto& list = g_pending[device];
  // Finished ones go at the next issue: the list stays as long as what is in flight.
  list.erase(std::remove_if(list.begin(), list.end(),
                            [](const Pending& p) {
                              return p.completion->polled.load(std::memory_order_acquire);
                            }),
             list.end());
  list.push_back({std::move(completion), std::move(point)});
}

}  // namespace openreg::ccl
