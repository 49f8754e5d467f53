// Interprocess events behind torch.Event (OpenRegIpcEvent.h).
#include "OpenRegIpcEvent.h"

#include <c10/util/Exception.h>

#include <cstring>
#include <utility>

#include "OpenRegException.h"
#include "OpenRegFunctions.h"
#include "OpenRegStream.h"

namespace openreg {
namespace {

// The handle's bytes: a tag that tells a foreign blob from ours, then the
// driver's handle.
constexpr char kTag[8] = {'o', 'r', 'e', 'g', 'e', 'v', '0', '2'};

thread_local orEvent t_to_adopt = nullptr;

void adopt(c10::Event& event, orEvent made, c10::DeviceIndex device) {
  if (event.was_marked_for_recording()) {
    orEventDestroy(made);
    TORCH_CHECK(false, "openreg: the event was recorded already");
  }
  // c10::Event reaches the guard impl only through record(): it hands `made`
  // over there (the record itself is skipped), and the event's device becomes
  // the stream's.
  t_to_adopt = made;
  try {
    event.record(getCurrentStream(device));
  } catch (...) {
    if (orEvent unused = std::exchange(t_to_adopt, nullptr)) orEventDestroy(unused);
    throw;
  }
  TORCH_INTERNAL_ASSERT(!t_to_adopt && event.eventId() == made);
}

}  // namespace

orEvent takeEventToAdopt() { return std::exchange(t_to_adopt, nullptr); }

void makeInterprocessEvent(c10::Event& event, c10::DeviceIndex device) {
  check_device_index(device);
  orEvent made = nullptr;
  const orError error = orEventCreateInterprocess(&made);
  // Every 1024 interprocess events take a file descriptor (a memfd the handles name).
  TORCH_CHECK(error != orErrorMemoryAllocation, "openreg: cannot create an interprocess event: "
              "out of file descriptors (see ulimit -n) or memory");
  OPENREG_CHECK(error);
  adopt(event, made, device);
}

void openInterprocessEvent(c10::Event& event, c10::DeviceIndex device, const std::string& handle) {
  check_device_index(device);
  orIpcEventHandle raw;
  TORCH_CHECK(handle.size() == sizeof(kTag) + sizeof(raw) &&
                  std::memcmp(handle.data(), kTag, sizeof(kTag)) == 0,
              "openreg: not an interprocess event handle (expected the bytes of an openreg "
              "Event(interprocess=True).ipc_handle())");
  std::memcpy(&raw, handle.data() + sizeof(kTag), sizeof(raw));
  orEvent opened = nullptr;
  const orError error = orIpcOpenEventHandle(&opened, raw);
  TORCH_CHECK(error != orErrorInvalidValue, "openreg: cannot open the interprocess event of process ",
              raw.pid, ": it was destroyed, or its process exited");
  OPENREG_CHECK(error);
  adopt(event, opened, device);
}

std::string interprocessEventHandle(const c10::Event& event) {
  orIpcEventHandle raw;
  TORCH_CHECK(orIpcGetEventHandle(&raw, static_cast<orEvent>(event.eventId())) == orSuccess,
              "openreg: ipc_handle() needs an event created with interprocess=True");
  std::string bytes(kTag, sizeof(kTag));
  bytes.append(reinterpret_cast<const char*>(&raw), sizeof(raw));
  return bytes;
}

}  // namespace openreg
