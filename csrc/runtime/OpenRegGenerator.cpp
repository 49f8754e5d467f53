#include "OpenRegGenerator.h"  // PyTorch hook: the default generators; contract in the header

#include <array>
#include <atomic>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>

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

// Where an openreg generator's CPU generator stood when get_state() was called,
// for every generator of the process (a state may be restored into another
// generator: fork_rng, set_rng_state from one device to another, deepcopy).
// One (seed, offset) can name several positions: every kernel adds the same
// offset whatever it drew, and devices seeded alike share keys; each
// snapshot therefore also records the position's unique id and its generator.
class SnapshotStore {
 public:
  struct Snapshot {
    uint64_t seed, offset;
    uint64_t position;         // unique per position reached in this process
    const void* owner;         // the generator that reached it
    at::Generator cpu;         // the CPU generator there
  };

  static SnapshotStore& get() {
    static SnapshotStore* store = new SnapshotStore();  // leaked: used until exit
    return *store;
  }

  void remember(Snapshot s) {
    std::lock_guard<std::mutex> g(mutex_);
    for (auto it = snapshots_.begin(); it != snapshots_.end(); ++it)
      if (it->position == s.position) {
        snapshots_.erase(it);
        break;
      }
    if (snapshots_.size() >= kMaxSnapshots) snapshots_.pop_front();
    snapshots_.push_back(std::move(s));
  }

  // The position a restored (seed, offset) most likely names: the one the
  // generator is at (nothing to do), else the latest it reached itself, else
  // the latest any generator reached. nullopt: none is known.
  std::optional<Snapshot> find(uint64_t seed, uint64_t offset, const void* owner,
                               uint64_t current) const {
    std::lock_guard<std::mutex> g(mutex_);
    const Snapshot* own = nullptr;
    const Snapshot* any = nullptr;
    for (const auto& s : snapshots_) {
      if (s.seed != seed || s.offset != offset) continue;
      if (s.position == current) return s;
      if (s.owner == owner) own = &s;
      any = &s;
    }
    if (own) return *own;
    if (any) return *any;
    return std::nullopt;
  }

 private:
  // ~5 KB each (an mt19937 state and the CPU generator's extras).
  static constexpr size_t kMaxSnapshots = 1024;
  mutable std::mutex mutex_;
  std::deque<Snapshot> snapshots_;  // oldest first
};

uint64_t newPosition() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

// State as PyTorch's distributed RNG expects of an accelerator (CUDA's Philox
// layout): 16 bytes, a uint64 seed then a uint64 offset. Draws come from a CPU
// generator, so a seed reproduces the CPU's own sequence; the offset counts
// kernels that drew numbers. Restoring a state that get_state() returned in
// this process (one of the last 1024, from any openreg generator) resumes that
// exact sequence; a state from another process cannot: the CPU generator's
// position is not in the 16 bytes, so such a state, like any other
// (seed, offset) — e.g. DTensor's per-shard offsets — starts a sequence
// derived from both (offset 0: the seed itself).
class OpenRegGeneratorImpl final : public c10::GeneratorImpl {
 public:
  explicit OpenRegGeneratorImpl(c10::DeviceIndex device, uint64_t seed = c10::default_rng_seed_val)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {
    set_current_seed(seed);
  }

  void set_current_seed(uint64_t seed) override {
    seed_ = seed;
    offset_ = 0;
    position_ = newPosition();
    cpu_ = at::make_generator<at::CPUGeneratorImpl>(seed);
  }
  void set_offset(uint64_t offset) override { restore(seed_, offset); }
  uint64_t get_offset() const override { return offset_; }
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override {
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
    restore(words[0], words[1]);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    waitForQueuedDraws();
    SnapshotStore::get().remember({seed_, offset_, position_, this, cpu_.clone()});
    auto state = at::detail::empty_cpu({kStateBytes}, at::kByte, std::nullopt, std::nullopt,
                                       std::nullopt, std::nullopt);
    uint64_t words[2] = {seed_, offset_};
    std::memcpy(state.data_ptr(), words, kStateBytes);
    return state.getIntrusivePtr();
  }
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // The CPU generator a random kernel draws from; counts the kernel.
  const at::Generator& forKernel() {
    offset_ += kOffsetPerKernel;
    position_ = newPosition();
    return cpu_;
  }

 private:
  static constexpr int64_t kStateBytes = 16;
  static constexpr uint64_t kOffsetPerKernel = 4;

  // Kernels draw when they run, not when they are launched: the CPU
  // generator's position is this state's only once the queued ones have run
  // (a snapshot taken earlier would replay their numbers). They run on the
  // default and pool streams; oreg_ccl's future streams may wait for a peer.
  void waitForQueuedDraws() const {
    synchronizeComputeStreams(device().index(), /*raisesKernelErrors=*/false);
  }

  void restore(uint64_t seed, uint64_t offset) {
    const bool here = seed == seed_ && offset == offset_;
    if (auto s = SnapshotStore::get().find(seed, offset, this, here ? position_ : 0)) {
      if (s->position == position_) return;
      cpu_ = s->cpu.clone();
      position_ = s->position;
    } else {
      if (here) return;  // CUDA's rule: the same (seed, offset) is the same place
      cpu_ = at::make_generator<at::CPUGeneratorImpl>(offset == 0 ? seed
                                                                  : splitmix64(seed ^ splitmix64(offset)));
      position_ = newPosition();
    }
    seed_ = seed;
    offset_ = offset;
  }

  OpenRegGeneratorImpl* clone_impl() const override {
    waitForQueuedDraws();
    auto* copy = new OpenRegGeneratorImpl(device().index(), seed_);
    copy->cpu_ = cpu_.clone();
    copy->offset_ = offset_;
    copy->position_ = position_;
    return copy;
  }

  at::Generator cpu_;
  uint64_t seed_ = 0;
  uint64_t offset_ = 0;
  uint64_t position_ = 0;
};

constexpr int kMaxDevices = 64;
std::array<std::once_flag, kMaxDevices> g_once;
std::array<at::Generator, kMaxDevices> g_defaults;

}  // namespace

const at::Generator& getDefaultGenerator(c10::DeviceIndex device) {
  device = resolve_device(device);
  std::call_once(g_once[device], [&] {
    g_defaults[device] = at::make_generator<OpenRegGeneratorImpl>(device);
    g_defaults[device].set_current_seed(c10::default_rng_seed_val);
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
