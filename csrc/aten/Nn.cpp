// Native kernels for the layers of a transformer step that are not
// TensorIterator ops: layer norm (+ backward), NLL loss (+ backward),
// embedding backward, index_select and where. Output shapes are computed on
// the host (ATen's structured meta where one exists, else the documented
// shape rule); the CPU implementation runs on the stream.
#include <ATen/native/cpu/mixed_data_type.h>
#include <ATen/ExpandUtils.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/layer_norm.h>
#include <ATen/ops/embedding_dense_backward_cpu_dispatch.h>
#include <ATen/TensorIterator.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/index_select_cpu_dispatch.h>
#include <ATen/ops/native_layer_norm_backward_cpu_dispatch.h>
#include <ATen/ops/native_layer_norm_cpu_dispatch.h>
#include <ATen/ops/nll_loss_backward_cpu_dispatch.h>
#include <ATen/ops/nll_loss_backward_meta.h>
#include <ATen/ops/nll_loss_forward_cpu_dispatch.h>
#include <ATen/ops/nll_loss_forward_meta.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/where_cpu_dispatch.h>

#include "NativeKernels.h"
#include "Structured.h"

namespace openreg::kernels {

using at::Tensor;

namespace {

std::array<Tensor, 3> toArray(std::tuple<Tensor, Tensor, Tensor> t) {
  return {std::get<0>(t), std::get<1>(t), std::get<2>(t)};
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> native_layer_norm(const Tensor& input,
                                                     c10::SymIntArrayRef normalized_shape_sym,
                                                     const std::optional<Tensor>& weight,
                                                     const std::optional<Tensor>& bias, double eps) {
  auto normalized_shape = C10_AS_INTARRAYREF_SLOW(normalized_shape_sym);
  c10::Device device = opDevice("native_layer_norm", input, weight.value_or(Tensor()),
                                bias.value_or(Tensor()));
  c10::DeviceGuard guard(device);
  // The CPU kernel's own argument checks, on the host (a failure inside the
  // kernel would be asynchronous and leave the stream failed).
  at::native::_check_layer_norm_inputs(input, normalized_shape, weight.value_or(Tensor()),
                                       bias.value_or(Tensor()));
  const int64_t axis = input.dim() - static_cast<int64_t>(normalized_shape.size());
  // Statistics are kept in float for reduced-precision input with float
  // params (weight or bias); other mixes raise here, as the CPU kernel would.
  const Tensor& w = weight.has_value() ? *weight : Tensor();
  const Tensor& b = bias.has_value() ? *bias : Tensor();
  const bool mixed = at::native::is_mixed_type(input, w, b);
  if (mixed) at::native::check_mixed_data_type(input, w, b);
  std::vector<int64_t> stat_shape(input.sizes().begin(), input.sizes().begin() + axis);
  stat_shape.resize(input.dim(), 1);
  auto stat_options = input.options().dtype(mixed ? at::kFloat : input.scalar_type());
  std::array<Tensor, 3> outputs{at::empty(input.sizes(), input.options()),
                                at::empty(stat_shape, stat_options),
                                at::empty(stat_shape, stat_options)};
  // The dispatch probe's input has other sizes: its normalized shape is its own.
  checkDispatch(
      outputs,
      [](std::array<Tensor, 3>&, const Tensor& x, at::IntArrayRef shape,
         const std::optional<Tensor>& w, const std::optional<Tensor>& b, double e) {
        at::cpu::native_layer_norm(x, x.sizes().slice(x.dim() - shape.size()), w, b, e);
      },
      input, normalized_shape, weight, bias, eps);
  launchIntoOutputs(
      outputs,
      [](const Tensor& x, at::IntArrayRef shape, const std::optional<Tensor>& w,
         const std::optional<Tensor>& b, double e) {
        return toArray(at::cpu::native_layer_norm(x, shape, w, b, e));
      },
      input, normalized_shape, weight, bias, eps);
  return {outputs[0], outputs[1], outputs[2]};
}

std::tuple<Tensor, Tensor, Tensor> native_layer_norm_backward(
    const Tensor& grad_out, const Tensor& input, c10::SymIntArrayRef normalized_shape_sym,
    const Tensor& mean, const Tensor& rstd, const std::optional<Tensor>& weight,
    const std::optional<Tensor>& bias, std::array<bool, 3> output_mask) {
  auto normalized_shape = C10_AS_INTARRAYREF_SLOW(normalized_shape_sym);
  c10::Device device = opDevice("native_layer_norm_backward", grad_out, input, mean, rstd);
  c10::DeviceGuard guard(device);
  auto like = [](const std::optional<Tensor>& t) {
    return t.has_value() && t->defined() ? at::empty(t->sizes(), t->options()) : Tensor();
  };
  std::array<Tensor, 3> outputs{
      output_mask[0] ? at::empty(input.sizes(), input.options()) : Tensor(),
      output_mask[1] ? like(weight) : Tensor(), output_mask[2] ? like(bias) : Tensor()};
  if (!outputs[0].defined() && !outputs[1].defined() && !outputs[2].defined()) return {};
  launchIntoOutputs(
      outputs,
      [output_mask](const Tensor& g, const Tensor& x, at::IntArrayRef shape, const Tensor& m,
                    const Tensor& r, const std::optional<Tensor>& w, const std::optional<Tensor>& b) {
        return toArray(at::cpu::native_layer_norm_backward(g, x, shape, m, r, w, b, output_mask));
      },
      grad_out, input, normalized_shape, mean, rstd, weight, bias);
  return {outputs[0], outputs[1], outputs[2]};
}

std::tuple<Tensor, Tensor> nll_loss_forward(const Tensor& self, const Tensor& target,
                                            const std::optional<Tensor>& weight, int64_t reduction,
                                            int64_t ignore_index) {
  c10::Device device = opDevice("nll_loss_forward", self, target, weight.value_or(Tensor()));
  c10::DeviceGuard guard(device);
  OpenRegStructured<at::meta::structured_nll_loss_forward, 2> op;
  op.meta(self, target, at::OptionalTensorRef(weight.value_or(Tensor())), reduction, ignore_index);
  checkDispatch(
      op.outputs,
      [](std::array<Tensor, 2>& o, const Tensor& s, const Tensor& t, const std::optional<Tensor>& w,
         int64_t r, int64_t i) { at::cpu::nll_loss_forward_out(o[0], o[1], s, t, w, r, i); },
      self, target, weight, reduction, ignore_index);
  std::array<Tensor, 2> views{kernelView(op.outputs[0]), kernelView(op.outputs[1])};
  launchOnCurrentStream(
      op.outputs[0],
      [views, s = kernelView(self), t = kernelView(target), w = toKernelArg(weight), reduction,
       ignore_index]() mutable {
        at::cpu::nll_loss_forward_out(views[0], views[1], s, t, w, reduction, ignore_index);
      },
      {self, target}, {op.outputs[0], op.outputs[1]});
  return {op.outputs[0], op.outputs[1]};
}

Tensor nll_loss_backward(const Tensor& grad_output, const Tensor& self, const Tensor& target,
                         const std::optional<Tensor>& weight, int64_t reduction,
                         int64_t ignore_index, const Tensor& total_weight) {
  c10::Device device = opDevice("nll_loss_backward", grad_output, self, target, total_weight);
  c10::DeviceGuard guard(device);
  OpenRegStructured<at::meta::structured_nll_loss_backward, 1> op;
  op.meta(grad_output, self, target, at::OptionalTensorRef(weight.value_or(Tensor())), reduction,
          ignore_index, total_weight);
  checkDispatch(
      op.outputs,
      [](std::array<Tensor, 1>& o, const Tensor& g, const Tensor& s, const Tensor& t,
         const std::optional<Tensor>& w, int64_t r, int64_t i, const Tensor& tw) {
        at::cpu::nll_loss_backward_out(o[0], g, s, t, w, r, i, tw);
      },
      grad_output, self, target, weight, reduction, ignore_index, total_weight);
  launchOnCurrentStream(
      op.outputs[0],
      [out = kernelView(op.outputs[0]), g = kernelView(grad_output), s = kernelView(self),
       t = kernelView(target), w = toKernelArg(weight), reduction, ignore_index,
       tw = kernelView(total_weight)]() mutable {
        at::cpu::nll_loss_backward_out(out, g, s, t, w, reduction, ignore_index, tw);
      },
      {grad_output, self, target, total_weight}, {op.outputs[0]});
  return op.outputs[0];
}

Tensor embedding_dense_backward(const Tensor& grad_output, const Tensor& indices,
                                c10::SymInt num_weights, c10::SymInt padding_idx,
                                bool scale_grad_by_freq) {
  c10::Device device = opDevice("embedding_dense_backward", grad_output, indices);
  c10::DeviceGuard guard(device);
  int64_t n = num_weights.expect_int();
  std::array<Tensor, 1> outputs{at::empty({n, grad_output.size(-1)}, grad_output.options())};
  launchIntoOutputs(
      outputs,
      [n, pad = padding_idx.expect_int(), scale_grad_by_freq](const Tensor& g, const Tensor& i) {
        return std::array<Tensor, 1>{at::cpu::embedding_dense_backward(g, i, n, pad, scale_grad_by_freq)};
      },
      grad_output, indices);
  return outputs[0];
}

Tensor index_select(const Tensor& self, int64_t dim, const Tensor& index) {
  c10::Device device = opDevice("index_select", self, index);
  c10::DeviceGuard guard(device);
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_select(): Index is supposed to be a vector");
  TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt,
              "index_select(): Expected dtype int32 or int64 for index");
  dim = at::maybe_wrap_dim(dim, self.dim());
  // The CPU kernel's shape check, on the host (in a kernel it would fail the stream).
  TORCH_CHECK(self.dim() > 0 || index.numel() == 1,
              "index_select(): Index to scalar can have only 1 value, got ", index.numel(),
              " value(s)");
  std::vector<int64_t> shape = self.sizes().vec();
  if (self.dim() > 0) shape[dim] = index.numel();
  Tensor out = at::empty(shape, self.options());
  if (out.numel() == 0) return out;
  checkDispatch(
      std::array<Tensor, 1>{out},
      [](std::array<Tensor, 1>& o, const Tensor& s, int64_t d, const Tensor& i) {
        at::cpu::index_select_out(o[0], s, d, i);
      },
      self, dim, index);
  launchOnCurrentStream(
      out,
      [o = kernelView(out), s = kernelView(self), dim, i = kernelView(index)]() mutable {
        at::cpu::index_select_out(o, s, dim, i);
      },
      {self, index}, {out});
  return out;
}

Tensor where(const Tensor& condition_in, const Tensor& self, const Tensor& other) {
  c10::Device device = opDevice("where", condition_in, self, other);
  c10::DeviceGuard guard(device);
  TORCH_CHECK(condition_in.scalar_type() == at::kBool || condition_in.scalar_type() == at::kByte,
              "where expected condition to be a boolean tensor, but got a tensor with dtype ",
              condition_in.scalar_type());
  // A uint8 condition is deprecated, not refused, as on the CPU and CUDA; the
  // warning is the host's (the kernel gets a bool condition).
  if (condition_in.scalar_type() == at::kByte) {
    TORCH_WARN_ONCE("where received a uint8 condition tensor. This behavior is deprecated and "
                    "will be removed in a future version of PyTorch. Use a boolean condition "
                    "instead.");
  }
  const Tensor condition = condition_in.to(at::kBool);
  auto shape = at::infer_size_dimvector(at::infer_size_dimvector(condition.sizes(), self.sizes()),
                                        other.sizes());
  // On the op's device: `self` may be a CPU scalar (torch.where(c, 9.0, x)).
  auto options = self.options().dtype(at::result_type(self, other)).device(device);
  Tensor out;
  if (condition.is_contiguous() && self.is_contiguous() && other.is_contiguous()) {
    out = at::empty(shape, options);
  } else {
    // The CPU's layout (TensorIterator's: a transposed or channels_last input
    // keeps its dimension order), learnt from Meta stand-ins of the inputs.
    auto stand_in = [](const Tensor& t) {
      return at::empty_strided(t.sizes(), t.strides(), at::TensorOptions(at::kMeta).dtype(at::kFloat));
    };
    Tensor layout;  // undefined: TensorIterator allocates it
    auto iter = at::TensorIteratorConfig()
                    .add_output(layout)
                    .add_owned_const_input(stand_in(condition))
                    .add_owned_const_input(stand_in(self))
                    .add_owned_const_input(stand_in(other))
                    .build();
    out = at::empty_strided(shape, iter.output().strides(), options);
  }
  launchIntoOutputs(
      std::array<Tensor, 1>{out},
      [](const Tensor& c, const Tensor& s, const Tensor& o) {
        return std::array<Tensor, 1>{at::cpu::where(c, s, o)};
      },
      condition, self, other);
  return out;
}

}  // namespace openreg::kernels
