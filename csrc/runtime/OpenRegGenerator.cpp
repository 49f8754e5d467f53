#include "OpenRegGenerator.h"

#include <array>
#include <mutex>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GeneratorImpl.h>

#include "OpenRegFunctions.h"

namespace openreg {
namespace {

class OpenRegGeneratorImpl final : public c10::GeneratorImpl {
 public:
  explicit OpenRegGeneratorImpl(c10::DeviceIndex device, uint64_t seed = c10::default_rng_seed_val)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        cpu_(at::make_generator<at::CPUGeneratorImpl>(seed)) {}

  void set_current_seed(uint64_t seed) override { cpu_.set_current_seed(seed); }
  void set_offset(uint64_t offset) override { cpu_.set_offset(offset); }
  uint64_t get_offset() const override { return cpu_.get_offset(); }
  uint64_t current_seed() const override { return cpu_.current_seed(); }
  uint64_t seed() override { return cpu_.seed(); }
  void set_state(const c10::TensorImpl& state) override { cpu_.unsafeGetGeneratorImpl()->set_state(state); }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    return cpu_.unsafeGetGeneratorImpl()->get_state();
  }
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  const at::Generator& cpu() const { return cpu_; }

 private:
  OpenRegGeneratorImpl* clone_impl() const override {
    auto* copy = new OpenRegGeneratorImpl(device().index());
    copy->cpu_ = cpu_.clone();
    return copy;
  }

  at::Generator cpu_;
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
  return impl->cpu();
}

}  // namespace openreg
