// PyTorch hook: the per-device default generator (returned by
// PrivateUse1HooksInterface::getDefaultGenerator / getNewGenerator).
//
// An openreg generator is a GeneratorImpl whose device is openreg:N, with
// CUDA's contract: its whole state is CUDA's 16-byte (seed, offset), which
// DTensor's RNG tracker manipulates, and a random kernel's numbers are a
// function of the (seed, offset) at its launch (each kernel gets a CPU
// generator made from them; the first after seeding is the CPU's own, so the
// same seed gives the CPU's numbers for that op).
// During a graph capture the state is the capture's own (CUDA's since torch
// 2.10): its seed, and an offset counted from the start of each replay, so
// torch.utils.checkpoint, fork_rng and DTensor's RNG tracker save and restore
// it inside a capture and the replays draw what they restored.
// Tests: tests/runtime/test_generators.py.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/Stream.h>

#include <functional>

namespace openreg {

const at::Generator& getDefaultGenerator(c10::DeviceIndex device);
at::Generator createGenerator(c10::DeviceIndex device);
// The CPU generator a random kernel launched now draws from (advances the offset).
at::Generator cpuGeneratorOf(const at::Generator& generator);
// For a random kernel being captured in a graph on `stream` (the op's):
// what gives its CPU generator at each replay. As CUDA's per-capture
// philox state: the kernel draws at a fixed offset within the capture, and
// each replay adds it to the generator's offset when the replay is launched,
// then moves the generator on by the capture's total.
std::function<at::Generator()> drawInCapture(const at::Generator& generator,
                                             const c10::Stream& stream);

}  // namespace openreg
