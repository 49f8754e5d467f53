#include "OpenRegGenerator.h"  // PyTorch hook: the default generators; contract in the header

#include <array>
#include <cstring>
#include <mutex>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <c10/core/GeneratorImpl.h>

#include "OpenRegFunctions.h"
#include "OpenRegStream.h"
#include "driver/Driver.h"

namespace openreg {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The CPU generator a kernel launched at (seed, offset) draws from: a
// function of those two numbers alone, as a CUDA kernel's Philox stream is.
// At offset 0 it is the CPU's own generator for the seed (so the first
// random op after seeding gives the CPU's numbers); elsewhere an mt19937
// whose whole state is expanded from (seed, offset), so distinct pairs do not
// share streams (seeding mt19937 with a derived number would use only 32 bits).
at::Generator cpuGeneratorAt(uint64_t seed, uint64_t offset) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  if (offset == 0) return generator;
  at::mt19937_data_pod data{};
  data.seed_ = seed;
  data.seeded_ = true;
  data.left_ = 1;  // the first draw twists the state below
  data.next_ = 0;
  // Not symmetric in (seed, offset): (s, o) and (o, s) name different streams.
  uint64_t x = splitmix64(splitmix64(seed) + offset);
  for (auto& word : data.state_) word = static_cast<uint32_t>(splitmix64(x++) >> 32);
  at::mt19937 engine;
  engine.set_data(data);
  at::check_generator<at::CPUGeneratorImpl>(generator)->set_engine(engine);
  return generator;
}

// State as PyTorch's distributed RNG expects of an accelerator (CUDA's Philox
// layout): 16 bytes, a uint64 seed then a uint64 offset, and nothing else:
// each random kernel takes its own CPU generator from the (seed, offset) at
// its launch, and the offset moves on by 4 (as a small CUDA kernel's does).
// So a state names the same numbers in every process and on every device,
// whichever way it was reached, and a kernel's numbers do not depend on when
// its stream runs it (get_state need not wait for queued kernels).
class OpenRegGeneratorImpl final : public c10::GeneratorImpl {
 public:
  explicit OpenRegGeneratorImpl(c10::DeviceIndex device, uint64_t seed = c10::default_rng_seed_val)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        seed_(seed) {}

  void set_current_seed(uint64_t seed) override {
    if (seed == seed_ && currentStreamIsCapturing(device().index())) return;  // as CUDA's: a no-op
    assertNotCapturing("set_current_seed");
    seed_ = seed;
    offset_ = 0;
  }
  void set_offset(uint64_t offset) override {
    assertNotCapturing("set_offset");
    checkOffset(offset);
    offset_ = offset;
  }
  uint64_t get_offset() const override {
    assertNotCapturing("get_offset");
    return offset_;
  }
  uint64_t current_seed() const override { return seed_; }  // the same for every replay
  uint64_t seed() override {
    uint64_t random = c10::detail::getNonDeterministicRandom();
    set_current_seed(random);
    return random;
  }
  void set_state(const c10::TensorImpl& state) override {
    assertNotCapturing("set_state");
    at::detail::check_rng_state(state);  // a CPU, contiguous ByteTensor, as CUDA requires
    TORCH_CHECK(state.dtype() == caffe2::TypeMeta::Make<uint8_t>() && state.numel() == kStateBytes,
                "RNG state for openreg must be a torch.ByteTensor of ", kStateBytes,
                " bytes (seed and offset), got ", state.numel(), " elements of ", state.dtype());
    uint64_t words[2];
    std::memcpy(words, state.data(), kStateBytes);
    checkOffset(words[1]);
    seed_ = words[0];
    offset_ = words[1];
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    assertNotCapturing("get_state");
    auto state = at::detail::empty_cpu({kStateBytes}, at::kByte, std::nullopt, std::nullopt,
                                       std::nullopt, std::nullopt);
    uint64_t words[2] = {seed_, offset_};
    std::memcpy(state.data_ptr(), words, kStateBytes);
    return state.getIntrusivePtr();
  }
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // The CPU generator of a kernel launched now; counts the kernel.
  at::Generator forKernel() {
    at::Generator generator = cpuGeneratorAt(seed_, offset_);
    offset_ += kOffsetPerKernel;
    return generator;
  }

 private:
  static constexpr int64_t kStateBytes = 16;
  static constexpr uint64_t kOffsetPerKernel = 4;

  OpenRegGeneratorImpl* clone_impl() const override {
    auto* copy = new OpenRegGeneratorImpl(device().index(), seed_);
    copy->offset_ = offset_;
    return copy;
  }

  uint64_t seed_ = 0;
  uint64_t offset_ = 0;
  // A graph's replays read the generator when they are launched, so an
  // offset or state read or set on the host during the capture would hold for
  // the capture only (torch.utils.checkpoint's saved state would not match
  // what the replayed forward drew: wrong gradients). CUDA refuses the offset
  // calls too; its state calls work on a per-capture offset (torch 2.10+),
  // which openreg does not keep: refused rather than silently wrong.
  void assertNotCapturing(const char* call) const {
    TORCH_CHECK(!currentStreamIsCapturing(device().index()),
                "Cannot call OpenRegGeneratorImpl::", call,
                " during graph capture: each replay reads and advances the generator, and openreg "
                "keeps no per-capture generator state (CUDA's since torch 2.10), so a state read or "
                "set here would not hold for the replays.");
  }
  // CUDA's Philox check (set_philox_offset_per_thread): kernels move it by 4.
  static void checkOffset(uint64_t offset) {
    TORCH_CHECK(offset % 4 == 0, "offset must be a multiple of 4");
  }
};

std::array<std::once_flag, orMaxDevices> g_once;
std::array<at::Generator, orMaxDevices> g_defaults;

}  // namespace

const at::Generator& getDefaultGenerator(c10::DeviceIndex device) {
  device = resolve_device(device);
  std::call_once(g_once[device], [&] {
    g_defaults[device] = at::make_generator<OpenRegGeneratorImpl>(device);  // seeded, even in a capture
  });
  return g_defaults[device];
}

at::Generator createGenerator(c10::DeviceIndex device) {
  return at::make_generator<OpenRegGeneratorImpl>(resolve_device(device));
}

at::Generator cpuGeneratorOf(const at::Generator& generator) {
  auto* impl = dynamic_cast<OpenRegGeneratorImpl*>(generator.unsafeGetGeneratorImpl());
  TORCH_CHECK(impl, "Expected an openreg generator, got one for ", generator.device());
  std::lock_guard<std::mutex> lock(impl->mutex_);
  return impl->forKernel();
}

}  // namespace openreg
