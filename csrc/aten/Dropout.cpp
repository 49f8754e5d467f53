// PyTorch hook: TORCH_LIBRARY_IMPL(aten, PrivateUse1) for native_dropout.
// native_dropout for openreg: the CPU kernel's algorithm, composed of openreg
// ops, so the mask is drawn from the openreg device's default generator.
//
// Why not the generic fallback: native_dropout takes no generator argument, so
// the CPU kernel the fallback runs would draw from the CPU's default generator
// (wrong generator; and torch.manual_seed on the CPU would then change openreg
// results). aten::dropout picks native_dropout for PrivateUse1 tensors
// ("fused kernel acceptable"), so every nn.Dropout in training lands here.
// Tests: tests/ops/test_random.py, tests/ops/test_training.py.
#include <ATen/ops/empty_like.h>
#include <ATen/ops/ones_like.h>
#include <torch/library.h>

namespace openreg::kernels {
namespace {

std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p,
                                                  std::optional<bool> train) {
  if (input.numel() == 0) return {input, at::empty_like(input)};
  auto bool_options = input.options().dtype(at::kBool);
  if (train.has_value() && !*train) return {input.clone(), at::ones_like(input, bool_options)};
  double keep = 1. - p;
  double scale = keep == 0 ? 0. : 1. / keep;  // p == 1: all dropped, no division by zero
  at::Tensor mask = at::empty_like(input, bool_options);
  mask.bernoulli_(keep);
  return {input.mul(mask).mul_(scale), mask};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("native_dropout", TORCH_FN(native_dropout));
}

}  // namespace openreg::kernels
