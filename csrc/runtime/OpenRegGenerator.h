// PyTorch hook: the per-device default generator (returned by
// PrivateUse1HooksInterface::getDefaultGenerator / getNewGenerator).
//
// An openreg generator is a GeneratorImpl whose device is openreg:N; its draws
// come from an inner CPU generator (mt19937), so the same seed gives the same
// numbers on openreg as on the CPU, while get_state()/set_state() use CUDA's
// 16-byte (seed, offset) layout that DTensor's RNG tracker manipulates. Generator state is read and written by
// kernels on streams: the Python API synchronises the device before touching
// it (see openreg/random.py).
// Tests: tests/runtime/test_generators.py.
#pragma once

#include <ATen/core/Generator.h>

namespace openreg {

const at::Generator& getDefaultGenerator(c10::DeviceIndex device);
at::Generator createGenerator(c10::DeviceIndex device);
// The CPU generator a random kernel should draw from (advances the offset).
at::Generator cpuGeneratorOf(const at::Generator& generator);

}  // namespace openreg
