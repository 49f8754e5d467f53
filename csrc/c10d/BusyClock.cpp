#include "BusyClock.h"

#include <mutex>

#include "Transport.h"  // Clock

namespace openreg::ccl {
namespace {

struct BusyClock {
  std::mutex mutex;
  int active = 0;           // GUARDED_BY(mutex)
  Clock::time_point since;  // GUARDED_BY(mutex): when `active` became non-zero
  Clock::duration total{};  // GUARDED_BY(mutex): of earlier busy spans
};
BusyClock g_busy;

}  // namespace

BusySpan::BusySpan() {
  std::lock_guard<std::mutex> g(g_busy.mutex);
  if (g_busy.active++ == 0) g_busy.since = Clock::now();
}

BusySpan::~BusySpan() {
  std::lock_guard<std::mutex> g(g_busy.mutex);
  if (--g_busy.active == 0) g_busy.total += Clock::now() - g_busy.since;
}

double collectiveBusySeconds() {
  std::lock_guard<std::mutex> g(g_busy.mutex);
  auto busy = g_busy.total + (g_busy.active ? Clock::now() - g_busy.since : Clock::duration{});
  return std::chrono::duration<double>(busy).count();
}

}  // namespace openreg::ccl
