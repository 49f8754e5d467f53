// PyTorch hook: the per-device default generator (returned by
// PrivateUse1HooksInterface::getDefaultGenerator / getNewGenerator).
//
// An openreg generator is a GeneratorImpl whose device is openreg:N, with
// CUDA's contract: its whole state is CUDA's 16-byte (seed, offset), which
// DTensor's RNG tracker manipulates, and a random kernel's numbers are a
// function of the (seed, offset) at its launch (each kernel gets a CPU
// generator made from them; the first after seeding is the CPU's own, so the
// same seed gives the CPU's numbers for that op).
// Tests: tests/runtime/test_generators.py.
#pragma once

#include <ATen/core/Generator.h>

namespace openreg {

const at::Generator& getDefaultGenerator(c10::DeviceIndex device);
at::Generator createGenerator(c10::DeviceIndex device);
// The CPU generator a random kernel launched now draws from (advances the offset).
at::Generator cpuGeneratorOf(const at::Generator& generator);

}  // namespace openreg
