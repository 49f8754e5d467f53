// PyTorch hook: the per-device default generator (returned by
// PrivateUse1HooksInterface::getDefaultGenerator / getNewGenerator).
//
// An openreg generator is a GeneratorImpl whose device is openreg:N and whose
// state is a CPU generator (mt19937 + normal cache). Random kernels run the
// CPU kernel with that inner generator, so the same seed gives the same
// numbers on openreg as on the CPU. Generator state is read and written by
// kernels on streams: the Python API synchronises the device before touching
// it (see openreg/random.py).
// Tests: tests/runtime/test_generators.py.
#pragma once

#include <ATen/core/Generator.h>

namespace openreg {

const at::Generator& getDefaultGenerator(c10::DeviceIndex device);
at::Generator createGenerator(c10::DeviceIndex device);
// The CPU generator carrying an openreg generator's state (for kernels).
at::Generator cpuGeneratorOf(const at::Generator& generator);

}  // namespace openreg
