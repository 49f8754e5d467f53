// Device enumeration, configuration knobs, lazy initialisation and fork state.
#include "Internal.h"

#include <pthread.h>

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace openreg {
namespace {

std::atomic<bool> g_initialized{false};
std::atomic<bool> g_forked_child{false};

void onForkChild() {
  // The parent's stream workers do not exist in the child.
  if (g_initialized.load()) g_forked_child.store(true);
}

int readDeviceCount() {
  const char* env = std::getenv("OPENREG_DEVICE_COUNT");
  if (!env || !*env) return 8;
  char* end = nullptr;
  long n = std::strtol(env, &end, 10);
  if (*end != '\0' || n < 1 || n > 64) return 8;  // Python side validates loudly
  return static_cast<int>(n);
}

}  // namespace

namespace detail {

long long parseByteSize(const char* text) {
  if (!text) return -1;
  char* end = nullptr;
  double value = std::strtod(text, &end);
  if (end == text || value < 0) return -1;
  while (*end == ' ') ++end;
  std::string unit(end);
  for (auto& c : unit) c = static_cast<char>(std::tolower(c));
  double scale = 1;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib") scale = 1024.0;
  else if (unit == "m" || unit == "mb" || unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "gb" || unit == "gib") scale = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tb" || unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  else return -1;
  return static_cast<long long>(value * scale);
}

void markInitialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    pthread_atfork(nullptr, nullptr, onForkChild);
    installFaultHandler();
    g_initialized.store(true);
  });
}

}  // namespace detail

const char* orGetErrorString(orError error) {
  switch (error) {
    case orSuccess: return "no error";
    case orErrorInvalidDevice: return "invalid device ordinal";
    case orErrorMemoryAllocation: return "out of memory";
    case orErrorInvalidValue: return "invalid argument";
    case orErrorNotReady: return "device not ready";
    case orErrorLaunchFailure: return "unspecified launch failure";
    case orErrorForkedChild:
      return "openreg was initialized in the parent process and cannot be used in a forked child";
  }
  return "unknown error";
}

int orDeviceCount() {
  static const int count = readDeviceCount();
  return count;
}

size_t orDeviceTotalMemory() {
  static const size_t bytes = [] {
    long long parsed = detail::parseByteSize(std::getenv("OPENREG_DEVICE_MEMORY"));
    return parsed > 0 ? static_cast<size_t>(parsed) : (size_t{16} << 30);
  }();
  return bytes;
}

bool orIsInitialized() { return g_initialized.load(); }
bool orIsForkedChild() { return g_forked_child.load(std::memory_order_relaxed); }

}  // namespace openreg
