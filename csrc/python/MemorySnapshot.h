// torch.openreg.memory._record_memory_history / _snapshot bindings (MemorySnapshot.cpp).
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace openreg {

void bindMemorySnapshot(py::module& m);

}  // namespace openreg
