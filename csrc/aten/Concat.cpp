// Native concatenation and split copies: cat (clip_grad_norm_'s stack, FSDP),
// split_with_sizes_copy (FSDP2's all-gather copy-out) and _chunk_cat (FSDP2's
// reduce-scatter copy-in). Output metadata and argument checks on the host
// (cat: ATen's structured meta; the others: their CPU implementations'
// checks), all copies of one call in one kernel.
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorShape.h>
#include <ATen/ops/_chunk_cat_native.h>
#include <ATen/ops/cat_cpu_dispatch.h>
#include <ATen/ops/cat_meta.h>
#include <ATen/ops/split_with_sizes.h>

#include "NativeKernels.h"
#include "Structured.h"

namespace openreg::kernels {

using at::Tensor;

namespace {

void catKernel(Tensor& out, const at::ITensorListRef& tensors, int64_t dim) {
  at::cpu::cat_out(out, tensors, dim);
}

}  // namespace

Tensor cat(const at::ITensorListRef& tensors, int64_t dim) {
  return structured<at::meta::structured_cat>("cat", catKernel, tensors, dim);
}

Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, Tensor& out) {
  // cat_out's own overlap checks (made by the CPU kernel, so before launch).
  at::assert_no_internal_overlap(out);
  for (const Tensor& t : tensors) at::assert_no_overlap(out, t);
  return structuredOut<at::meta::structured_cat>("cat", catKernel, out, tensors, dim);
}

// The CPU (CompositeExplicitAutogradNonFunctional) version clones each split
// to a contiguous tensor; here the clones are one kernel.
std::vector<Tensor> split_with_sizes_copy(const Tensor& self, c10::SymIntArrayRef split_sizes,
                                          int64_t dim) {
  c10::DeviceGuard guard(opDevice("split_with_sizes_copy", self));
  std::vector<Tensor> splits = at::split_with_sizes_symint(self, split_sizes, dim);
  std::vector<Tensor> outs;
  outs.reserve(splits.size());
  for (const Tensor& s : splits) outs.push_back(allocateOutput(s.sizes(), {}, s.options()));
  launchOnCurrentStream(
      self,
      [outs = kernelViews(outs), splits = kernelViews(splits)]() mutable {
        for (size_t i = 0; i < outs.size(); ++i) outs[i].copy_(splits[i]);
      },
      {self}, outs);
  return outs;
}

// at::native::split_with_sizes_copy_out's checks and resizes on the host, its
// copies in one kernel.
void split_with_sizes_copy_out(const Tensor& self, c10::SymIntArrayRef split_sizes, int64_t dim,
                               at::TensorList out) {
  c10::DeviceGuard guard(opDevice("split_with_sizes_copy", self, out));
  std::vector<Tensor> tmp = at::split_with_sizes_symint(self, split_sizes, dim);
  TORCH_CHECK(out.size() == tmp.size(), "split_with_sizes_copy_out() expected an out= argument of size ",
              tmp.size(), ", got size ", out.size());
  std::vector<Tensor> dsts;
  for (size_t i = 0; i < out.size(); ++i) {
    if (at::native::resize_output_check(out[i], tmp[i].sizes())) out[i].resize_(tmp[i].sizes());
    TORCH_CHECK(out[i].dtype() == tmp[i].dtype(), "Expected out tensor to have dtype ", tmp[i].dtype(),
                ", but got ", out[i].dtype(), " instead");
    TORCH_CHECK(out[i].device() == tmp[i].device(), "Expected out tensor to have device ",
                tmp[i].device(), ", but got ", out[i].device(), " instead");
    // copy_'s overlap checks (TensorIterator), before the kernel runs.
    at::assert_no_internal_overlap(out[i]);
    at::assert_no_partial_overlap(out[i], tmp[i]);
    dsts.push_back(out[i]);
  }
  launchOnCurrentStream(
      self,
      [dsts = kernelViews(dsts), srcs = kernelViews(tmp)]() mutable {
        for (size_t i = 0; i < dsts.size(); ++i) dsts[i].copy_(srcs[i]);
      },
      {self}, dsts);
}

namespace {

// _chunk_cat's result shape: the leading dims, num_chunks, then each tensor's
// padded chunk (ceil(size[dim] / num_chunks) rows of its trailing elements).
std::vector<int64_t> chunkCatShape(at::TensorList tensors, int64_t dim, int64_t num_chunks) {
  std::vector<int64_t> shape(tensors[0].sizes().begin(), tensors[0].sizes().begin() + dim);
  int64_t chunk = 0;
  for (const Tensor& t : tensors) {
    int64_t trailing = 1;
    for (int64_t d = dim + 1; d < t.dim(); ++d) trailing *= t.size(d);
    chunk += (t.size(dim) + num_chunks - 1) / num_chunks * trailing;
  }
  shape.push_back(num_chunks);
  shape.push_back(chunk);
  return shape;
}

}  // namespace

// The CPU runs the composite _chunk_cat (pad, reshape, cat); here the whole
// composite runs inside one kernel over kernel views.
Tensor _chunk_cat(at::TensorList tensors, int64_t dim, int64_t num_chunks) {
  c10::DeviceGuard guard(opDevice("_chunk_cat", tensors));
  int64_t wrapped = at::native::preprocess_chunk_cat_inputs(tensors, dim, num_chunks);
  Tensor out = allocateOutput(chunkCatShape(tensors, wrapped, num_chunks), {}, tensors[0].options());
  return _chunk_cat_out(tensors, dim, num_chunks, out);
}

Tensor& _chunk_cat_out(at::TensorList tensors, int64_t dim, int64_t num_chunks, Tensor& out) {
  c10::DeviceGuard guard(opDevice("_chunk_cat", out, tensors));
  checkWrittenOnDevice(out, "_chunk_cat");
  int64_t wrapped = at::native::preprocess_chunk_cat_inputs(tensors, dim, num_chunks);
  // cat_out's checks on its output, which the composite ends in.
  TORCH_CHECK(out.scalar_type() == tensors[0].scalar_type() || at::canCast(tensors[0].scalar_type(), out.scalar_type()),
              "torch.cat(): input types can't be cast to the desired output type ", out.scalar_type());
  at::assert_no_internal_overlap(out);
  for (const Tensor& t : tensors) at::assert_no_overlap(out, t);
  at::native::resize_output(out, chunkCatShape(tensors, wrapped, num_chunks));
  launchOnCurrentStream(
      out,
      [o = kernelView(out), views = kernelViews(tensors), wrapped, num_chunks]() mutable {
        at::native::_chunk_cat_out(views, wrapped, num_chunks, o);
      },
      std::vector<Tensor>(tensors.begin(), tensors.end()), {out});
  return out;
}

}  // namespace openreg::kernels
