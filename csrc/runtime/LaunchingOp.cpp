#include "LaunchingOp.h"

#include <ATen/record_function.h>

#include <memory>
#include <mutex>
#include <vector>

namespace openreg {
namespace {

thread_local std::vector<const char*> t_ops;  // the dispatcher calls in progress
thread_local const char* t_named = nullptr;     // a NamedLaunch's

std::unique_ptr<at::ObserverContext> enter(const at::RecordFunction& fn) {
  // Only a dispatcher operator's name (its schema's) outlives the call; other
  // FUNCTION-scope records name themselves with a view of a caller's string.
  // They inherit the enclosing operator's name, keeping the stack balanced.
  if (fn.operator_name().has_value()) t_ops.push_back(fn.name());
  else t_ops.push_back(t_ops.empty() ? nullptr : t_ops.back());
  return nullptr;
}

void leave(const at::RecordFunction& /*fn*/, at::ObserverContext* /*ctx*/) {
  if (!t_ops.empty()) t_ops.pop_back();
}

std::mutex g_trackingMutex;
int g_trackers = 0;
at::CallbackHandle g_callback = 0;
}  // namespace

void trackLaunchingOps() {
  std::lock_guard<std::mutex> lock(g_trackingMutex);
  if (g_trackers++ == 0)
    g_callback = at::addGlobalCallback(
        at::RecordFunctionCallback(enter, leave).scopes({at::RecordScope::FUNCTION}));
}

void untrackLaunchingOps() {
  std::lock_guard<std::mutex> lock(g_trackingMutex);
  if (g_trackers > 0 && --g_trackers == 0) at::removeCallback(g_callback);
}

const char* launchingOpName() {
  if (t_named) return t_named;
  return t_ops.empty() ? nullptr : t_ops.back();
}

NamedLaunch::NamedLaunch(const char* name) : previous_(t_named) { t_named = name; }
NamedLaunch::~NamedLaunch() { t_named = previous_; }

}  // namespace openreg
