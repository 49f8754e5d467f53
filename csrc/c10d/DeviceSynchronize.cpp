#include "DeviceSynchronize.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "../runtime/OpenRegStream.h"

namespace openreg::ccl {
namespace {

struct Pending {
  const void* group;
  std::shared_ptr<OregWork::Completion> completion;
  orSanitizerPoint point;
};

std::mutex g_mutex;
std::vector<std::vector<Pending>> g_pending;  // GUARDED_BY g_mutex; per device

void waitForPending(c10::DeviceIndex device) {
  std::vector<Pending> pending;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (device < 0 || static_cast<size_t>(device) >= g_pending.size()) return;
    pending = g_pending[device];
  }
  for (const Pending& p : pending) {
    if (p.group == t_workerOf) continue;  // would wait for itself
    p.completion->wait();
    orSanitizerHostJoin(p.point);
  }
}

}  // namespace

void waitAtDeviceSynchronize(int device, const void* group,
                             std::shared_ptr<OregWork::Completion> completion,
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
  list.push_back({group, std::move(completion), std::move(point)});
}

}  // namespace openreg::ccl
