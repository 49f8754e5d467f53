// Device enumeration, configuration knobs, lazy initialisation and fork state.
#include "Internal.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <string>
#include <mutex>
#include <vector>

namespace openreg {
namespace {

std::atomic<bool> g_initialized{false};
std::atomic<bool> g_forked_child{false};

void onForkChild() {
  // The parent's stream workers do not exist in the child.
  if (g_initialized.load()) g_forked_child.store(true);
}

bool blank(const char* text) {
  for (; text && *text; ++text)
    if (!std::isspace(static_cast<unsigned char>(*text))) return false;
  return true;
}

// -1 if OPENREG_DEVICE_COUNT is set to anything but an integer in 0..orMaxDevices
// (0: no devices, as CUDA_VISIBLE_DEVICES="" leaves none).
int readDeviceCount() {
  const char* env = std::getenv("OPENREG_DEVICE_COUNT");
  if (blank(env)) return 8;
  if (!std::isdigit(static_cast<unsigned char>(*env))) return -1;
  char* end = nullptr;
  long n = std::strtol(env, &end, 10);
  return *end == '\0' && n >= 0 && n <= orMaxDevices ? static_cast<int>(n) : -1;
}

// The physical devices OPENREG_VISIBLE_DEVICES lets this process see, in
// its order (all of them when unset), read as torch reads CUDA_VISIBLE_DEVICES
// (torch.cuda._parse_visible_devices): each entry's leading integer; the list
// ends at the first entry that is not one (or is negative); an index given
// twice leaves no devices; then the list ends at the first index that names
// no device.
std::vector<int> readVisibleDevices(int physical) {
  std::vector<int> listed;
  const char* env = std::getenv("OPENREG_VISIBLE_DEVICES");
  if (!env) {
    for (int d = 0; d < physical; ++d) listed.push_back(d);
    return listed;
  }
  const std::string text(env);
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    size_t at = start;
    while (at < end && std::isspace(static_cast<unsigned char>(text[at]))) ++at;
    if (at < end && (text[at] == '+' || text[at] == '-')) {
      // "-0" is 0, as strtoul reads it; any other negative ends the list.
      const bool minus = text[at++] == '-';
      if (minus && !(at < end && text[at] == '0' &&
                     (at + 1 == end || !std::isdigit(static_cast<unsigned char>(text[at + 1])))))
        break;
    }
    while (at + 1 < end && text[at] == '0' && std::isdigit(static_cast<unsigned char>(text[at + 1])))
      ++at;  // leading zeros
    size_t digits = at;
    while (digits < end && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
    if (digits == at) break;  // not a number
    // Beyond any device count: kept as "no such device".
    const int index = digits - at > 3 ? orMaxDevices : std::stoi(text.substr(at, digits - at));
    if (std::find(listed.begin(), listed.end(), index) != listed.end()) return {};
    listed.push_back(index);
    start = end + 1;
  }
  std::vector<int> visible;
  for (int index : listed) {
    if (index >= physical) break;
    visible.push_back(index);
  }
  return visible;
}

// 0 if OPENREG_DEVICE_MEMORY is set to anything but a positive size.
size_t readDeviceMemory() {
  const char* env = std::getenv("OPENREG_DEVICE_MEMORY");
  if (blank(env)) return size_t{16} << 30;
  long long parsed = detail::parseByteSize(env);
  constexpr size_t kPage = 4096;  // capacity in whole pages, as the arena maps it
  return parsed > 0 ? (static_cast<size_t>(parsed) + kPage - 1) / kPage * kPage : 0;
}

}  // namespace

namespace detail {

long long parseByteSize(const char* text) {
  if (!text) return -1;
  char* end = nullptr;
  double value = std::strtod(text, &end);
  if (end == text || !std::isfinite(value) || value < 0) return -1;
  while (*end == ' ') ++end;
  std::string unit(end);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.back()))) unit.pop_back();
  for (auto& c : unit) c = static_cast<char>(std::tolower(c));
  double scale = 1;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib") scale = 1024.0;
  else if (unit == "m" || unit == "mb" || unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "gb" || unit == "gib") scale = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tb" || unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  else return -1;
  if (value * scale >= 9.0e18) return -1;  // beyond long long
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
    case orErrorDeviceUnavailable:
      return "the device's memory could not be created or mapped (is OPENREG_DEVICE_MEMORY "
             "larger than this process may map?)";
    case orErrorDataRace: return "data race (see orSanitizerLastReport)";
    case orErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case orErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case orErrorStreamCaptureUnmatched: return "the capture was not initiated in this stream";
    case orErrorStreamCaptureUnjoined:
      return "the capture sequence contains a fork that was not joined to the primary stream";
    case orErrorStreamCaptureMerge:
      return "operation would have merged two independent capture sequences";
    case orErrorIpcPeerExited:
      return "the process that recorded the interprocess event exited before the event completed";
    case orErrorForkedChild:
      return "openreg was initialized in the parent process and cannot be used in a forked child";
  }
  return "unknown error";
}

namespace {

// The knobs, read once; `error` says what is wrong with them ("" if nothing).
struct DeviceConfig {
  int count = readDeviceCount();  // physical devices
  std::vector<int> visible = readVisibleDevices(std::max(count, 0));  // physical index by device index
  size_t memory = readDeviceMemory();
  std::string error;

  DeviceConfig() {
    if (count < 0)
      error = "OPENREG_DEVICE_COUNT must be an integer in 0.." + std::to_string(orMaxDevices) + ", got '" +
              std::getenv("OPENREG_DEVICE_COUNT") + "'";
    if (memory == 0)
      error += std::string(error.empty() ? "" : "; ") +
               "OPENREG_DEVICE_MEMORY must be a positive size such as 512MiB, 16GiB or 4096, "
               "got '" + std::getenv("OPENREG_DEVICE_MEMORY") + "'";
  }
};

const DeviceConfig& deviceConfig() {
  static const DeviceConfig config;
  return config;
}

}  // namespace

int orDeviceCount() { return static_cast<int>(deviceConfig().visible.size()); }

int orPhysicalDeviceCount() { return std::max(deviceConfig().count, 0); }

int orDevicePhysicalIndex(int device) {
  const auto& visible = deviceConfig().visible;
  return device >= 0 && device < static_cast<int>(visible.size()) ? visible[device] : -1;
}

int orDeviceFromPhysicalIndex(int physical) {
  const auto& visible = deviceConfig().visible;
  auto it = std::find(visible.begin(), visible.end(), physical);
  return it == visible.end() ? -1 : static_cast<int>(it - visible.begin());
}
size_t orDeviceTotalMemory() { return deviceConfig().memory; }
const std::string& orConfigError() { return deviceConfig().error; }

bool orIsInitialized() { return g_initialized.load(); }

orError orInit() {
  OR_RETURN_IF_FORKED();
  detail::markInitialized();
  return orSuccess;
}
bool orIsForkedChild() { return g_forked_child.load(std::memory_order_relaxed); }

}  // namespace openreg
