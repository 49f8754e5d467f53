#include "OpenRegGenerator.h"  // PyTorch hook: the default generators; contract in the header

#include <array>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <c10/core/GeneratorImpl.h>

#include "OpenRegFunctions.h"
#include "OpenRegGraph.h"
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

// One generator's draws in one graph capture (CUDA's CUDAGeneratorCaptureState).
struct CaptureDraws {
  uint64_t offset = 0;  // the next draw's, from the start of a replay (get/set_state act on it)
  // Of the replay being launched: set by the capture's replay prologue.
  uint64_t seed = 0;
  uint64_t base = 0;
  bool replayed = false;  // a replay's prologue ran
};

// Set while a capture's replay prologue is being launched: a prologue that
// runs then was not recorded (the capture ended meanwhile, on another thread).
thread_local bool t_launchingPrologue = false;

// The stream whose capture the generator's state calls act on: the current
// device's current stream, as CUDA's; none outside a capture.
std::optional<c10::Stream> capturingStream() {
  const c10::DeviceIndex device = current_device();
  if (!currentStreamIsCapturing(device)) return std::nullopt;
  return getCurrentStream(device);
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

  // The setters and getters run under mutex_ (Python's bindings take it).
  void set_current_seed(uint64_t seed) override {
    if (capturingStream()) {
      TORCH_CHECK(seed == seed_,
                  "OpenRegGeneratorImpl::set_current_seed can be called during stream capture only "
                  "if new seed is the same as the original seed.");
      return;  // as CUDA's: a no-op
    }
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
    assertNotCapturing("seed");
    uint64_t random = c10::detail::getNonDeterministicRandom();
    set_current_seed(random);
    return random;
  }
  void set_state(const c10::TensorImpl& state) override {
    at::detail::check_rng_state(state);  // a CPU, contiguous ByteTensor, as CUDA requires
    TORCH_CHECK(state.dtype() == caffe2::TypeMeta::Make<uint8_t>() && state.numel() == kStateBytes,
                "RNG state for openreg must be a torch.ByteTensor of ", kStateBytes,
                " bytes (seed and offset), got ", state.numel(), " elements of ", state.dtype());
    uint64_t words[2];
    std::memcpy(words, state.data(), kStateBytes);
    checkOffset(words[1]);
    set_current_seed(words[0]);
    if (auto draws = captureDraws(capturingStream())) {
      draws->offset = words[1];
      return;
    }
    offset_ = words[1];
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    auto state = at::detail::empty_cpu({kStateBytes}, at::kByte, std::nullopt, std::nullopt,
                                       std::nullopt, std::nullopt);
    auto draws = const_cast<OpenRegGeneratorImpl*>(this)->captureDraws(capturingStream());
    uint64_t words[2] = {seed_, draws ? draws->offset : offset_};
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

  // A kernel being captured on `stream`: its offset within the capture (see the header).
  std::function<at::Generator()> forCapturedKernel(const c10::Stream& stream) {
    auto draws = captureDraws(stream);
    TORCH_CHECK(draws, "openreg: a random op's capture on ", stream, " ended while it was being captured");
    const uint64_t offset = draws->offset;
    draws->offset += kOffsetPerKernel;
    return [draws, offset] {
      TORCH_CHECK(draws->replayed, "openreg: a random op's graph capture ended while it was being "
                  "captured (on another thread): it ran outside the graph");
      return cpuGeneratorAt(draws->seed, draws->base + offset);
    };
  }

 private:
  static constexpr int64_t kStateBytes = 16;
  static constexpr uint64_t kOffsetPerKernel = 4;

  OpenRegGeneratorImpl* clone_impl() const override {
    assertNotCapturing("clone_impl");  // its offset would be neither the capture's nor the replays'
    auto* copy = new OpenRegGeneratorImpl(device().index(), seed_);
    copy->offset_ = offset_;
    return copy;
  }

  // This generator's draws in the capture `stream` takes part in, made on
  // first use; null outside a capture.
  std::shared_ptr<CaptureDraws> captureDraws(const std::optional<c10::Stream>& stream) {
    const auto id = stream ? captureIdOf(*stream) : std::nullopt;
    if (!id) return nullptr;
    auto& draws = captures_[*id];
    if (draws) return draws;
    draws = std::make_shared<CaptureDraws>();
    for (auto it = captures_.begin(); it != captures_.end();)  // forget ended captures
      it = it->first != *id && !captureIsOpen(it->first) ? captures_.erase(it) : std::next(it);
    // Each replay, when launched, runs this before any of the capture's
    // kernels draws: the replay starts at the generator's offset and moves
    // it on by all the capture drew (its final offset, as CUDA's).
    orPrepare prologue = [self = c10::intrusive_ptr<OpenRegGeneratorImpl>::reclaim_copy(this),
                          draws](orStream) {
      // Run at once, not recorded: the caller holds the mutex (no replay to prepare).
      TORCH_CHECK(!t_launchingPrologue, "openreg: a random op's graph capture ended while it was "
                  "being captured (on another thread)");
      std::lock_guard<std::mutex> lock(self->mutex_);
      draws->seed = self->seed_;
      draws->base = self->offset_;
      draws->replayed = true;
      self->offset_ += draws->offset;
      return std::function<void()>([] {});
    };
    orStream raw = rawStream(*stream);
    t_launchingPrologue = true;
    orError error;
    try {
      error = orLaunchPreparedKernel(raw, std::move(prologue), {});
    } catch (...) {
      t_launchingPrologue = false;
      captures_.erase(*id);
      throw;
    }
    t_launchingPrologue = false;
    if (error != orSuccess) {
      captures_.erase(*id);
      checkKernelError(error, c10::str(*stream), orStreamLastException(raw));
    }
    return draws;
  }

  uint64_t seed_ = 0;
  uint64_t offset_ = 0;
  std::unordered_map<uint64_t, std::shared_ptr<CaptureDraws>> captures_;  // by capture id

  // CUDA refuses these during a capture too: the offset they name would not
  // be the replays' (each starts where the generator is when it is launched).
  static void assertNotCapturing(const char* call) {
    TORCH_CHECK(!capturingStream(), "Cannot call OpenRegGeneratorImpl::", call,
                " during graph capture");
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
  TORCH_CHECK(!capturingStream(), "Cannot construct a new OpenRegGeneratorImpl during graph capture");
  return at::make_generator<OpenRegGeneratorImpl>(resolve_device(device));
}

at::Generator cpuGeneratorOf(const at::Generator& generator) {
  auto* impl = dynamic_cast<OpenRegGeneratorImpl*>(generator.unsafeGetGeneratorImpl());
  TORCH_CHECK(impl, "Expected an openreg generator, got one for ", generator.device());
  std::lock_guard<std::mutex> lock(impl->mutex_);
  return impl->forKernel();
}

std::function<at::Generator()> drawInCapture(const at::Generator& generator,
                                             const c10::Stream& stream) {
  auto* impl = dynamic_cast<OpenRegGeneratorImpl*>(generator.unsafeGetGeneratorImpl());
  TORCH_CHECK(impl, "Expected an openreg generator, got one for ", generator.device());
  std::lock_guard<std::mutex> lock(impl->mutex_);
  return impl->forCapturedKernel(stream);
}

}  // namespace openreg
