// torch.openreg.Event(interprocess=True), Event.ipc_handle() and
// Event.from_ipc_handle(), as torch.cuda.Event's: a torch.Event over an
// interprocess driver event (orEventCreateInterprocess). torch.Event passes
// only a timing flag down to DeviceGuardImplInterface (c10::EventFlag has no
// interprocess one), so these make the driver event themselves and hand it to
// the guard impl (OpenRegGuardImpl.cpp), which adopts it as the c10::Event's
// handle at a record that records nothing.
// Tests: tests/runtime/test_ipc_events.py.
#pragma once

#include <c10/core/Event.h>

#include <string>

#include "driver/Driver.h"

namespace openreg {

// Gives `event` (never recorded) a new interprocess driver event of `device`.
void makeInterprocessEvent(c10::Event& event, c10::DeviceIndex device);
// Makes `event` (never recorded) the event of `device` that another process's
// Event.ipc_handle() names.
void openInterprocessEvent(c10::Event& event, c10::DeviceIndex device, const std::string& handle);
// The bytes Event.ipc_handle() returns.
std::string interprocessEventHandle(const c10::Event& event);

// For the guard impl's record: the driver event to adopt instead of creating
// one (null when none is being handed over on this thread).
orEvent takeEventToAdopt();

}  // namespace openreg
