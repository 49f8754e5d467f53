// The collectives of OregBackend: validate on the caller's thread, then
// enqueue a body that stages tensors (Staging.h) and runs an algorithm.
// Bodies capture forWorker() aliases (Staging.h): CPU tensors themselves, which
// keeps them alive until the worker is done; for openreg tensors, non-owning
// views at the issue-time address (the Work keeps the caller's tensors).
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorUtils.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/InferenceMode.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sparse_coo_tensor.h>
#include <ATen/ops/zeros.h>
#include "Errors.h"

#include <algorithm>
#include <numeric>
#include <optional>

#include "OregBackend.h"
#include "Staging.h"

namespace openreg::ccl {

namespace {

void checkRoot(int64_t root, int size, const char* op) {
  TORCH_CHECK_VALUE(root >= 0 && root < size, "oreg_ccl: ", op, ": invalid root rank ", root,
                    " for a group of ", size);
}

size_t bytesOf(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

// Reduce `t` in place across the group with `spec`.
void allreduceTensor(Collective& c, const at::Tensor& t, const ReduceSpec& spec) {
  Staged s = stage(t, stageDtype(t.scalar_type()), /*load=*/true);
  preReduce(spec, s.buf);
  allreduce(c, s.buf.data_ptr(), reduceCount(s.buf), reduceDtype(s.buf), spec.kind);
  postReduce(spec, s.buf, c.size());
  unstage(s);
}

bool sameNumel(const at::Tensor& ref, const std::vector<at::Tensor>& ts) {
  return std::all_of(ts.begin(), ts.end(), [&](const at::Tensor& t) { return t.numel() == ref.numel(); });
}

// The description a list of unequal sizes is matched by across ranks: every
// rank knows every size from its own list.
// One tensor of a list op's description: "1000 x Float, 1000 x Float, ...".
void appendDescribed(std::string& desc, const at::Tensor& t) {
  if (!desc.empty()) desc += ", ";
  desc += describe(t);
}

std::string describeSizes(c10::ScalarType dtype, const std::vector<at::Tensor>& ts) {
  std::string desc = c10::str(dtype, " of sizes");
  for (const auto& t : ts) desc += c10::str(" ", t.numel());
  return desc;
}

// Copy `parts` (same size each) into one contiguous host buffer of `dtype`.
at::Tensor packed(const std::vector<at::Tensor>& parts, c10::ScalarType dtype) {
  int64_t each = parts.empty() ? 0 : parts[0].numel();
  at::Tensor flat = at::empty({int64_t(parts.size()) * each}, at::TensorOptions().dtype(dtype));
  for (size_t p = 0; p < parts.size(); ++p)
    if (each) flat.narrow(0, p * each, each).view(parts[p].sizes()).copy_(hostView(parts[p]));
  return flat;
}

void unpack(const at::Tensor& flat, const std::vector<at::Tensor>& parts) {
  int64_t each = parts.empty() ? 0 : parts[0].numel();
  for (size_t p = 0; p < parts.size(); ++p)
    if (each) hostView(parts[p]).copy_(flat.narrow(0, p * each, each).view(parts[p].sizes()));
}

// The root's block per rank for gather (`load` false) and scatter (true): the
// parts themselves when each is contiguous and none overlaps another, so data
// moves straight between the ranks' tensors; else consecutive blocks of `flat`,
// a packed copy (scatter) or a buffer the caller unpacks (gather), in rank order.
std::vector<char*> rootBlocks(const std::vector<at::Tensor>& parts, c10::ScalarType dtype,
                              bool load, at::Tensor& flat) {
  std::vector<std::pair<char*, size_t>> spans;
  for (const at::Tensor& p : parts) {
    at::Tensor h = hostView(p);
    if (!h.is_contiguous()) break;
    spans.emplace_back(static_cast<char*>(h.data_ptr()), h.nbytes());
  }
  std::vector<char*> blocks;
  for (const auto& s : spans) blocks.push_back(s.first);
  std::sort(spans.begin(), spans.end());
  bool direct = spans.size() == parts.size();
  for (size_t i = 1; direct && i < spans.size(); ++i)
    direct = !spans[i - 1].second || spans[i - 1].first + spans[i - 1].second <= spans[i].first;
  if (direct) return blocks;
  const int64_t each = parts[0].numel();
  flat = load ? packed(parts, dtype)
              : at::empty({int64_t(parts.size()) * each}, at::TensorOptions().dtype(dtype));
  blocks.clear();
  for (size_t p = 0; p < parts.size(); ++p)
    blocks.push_back(static_cast<char*>(flat.data_ptr()) + p * each * flat.element_size());
  return blocks;
}

// Sparse COO allreduce (SUM, as gloo): every rank gathers every rank's
// coalesced indices and values (padded to the largest nnz) and adds them in
// rank order, so all ranks end with the same tensor, which replaces `t`'s
// contents.
void allreduceSparse(Collective& c, const at::Tensor& t) {
  // An inference tensor's sparse kernels expect the inference mode it was made
  // in, which the group's worker thread does not inherit from the caller.
  c10::InferenceMode inferenceMode(t.is_inference());
  at::Tensor in = t.coalesce();
  at::Tensor idx = in._indices().contiguous(), val = in._values().contiguous();
  int64_t n = c.size(), nnz = in._nnz();
  std::vector<int64_t> counts(n);
  ccl::allgather(c, &nnz, counts.data(), sizeof(int64_t));
  int64_t most = *std::max_element(counts.begin(), counts.end());
  std::vector<int64_t> valShape = val.sizes().vec();
  valShape[0] = most;
  at::Tensor padIdx = at::zeros({idx.size(0), most}, idx.options());
  at::Tensor padVal = at::zeros(valShape, val.options());
  if (nnz) {
    padIdx.narrow(1, 0, nnz).copy_(idx);
    padVal.narrow(0, 0, nnz).copy_(val);
  }
  valShape.insert(valShape.begin(), n);
  at::Tensor allIdx = at::empty({n, idx.size(0), most}, idx.options());
  at::Tensor allVal = at::empty(valShape, val.options());
  ccl::allgather(c, padIdx.data_ptr(), allIdx.data_ptr(), padIdx.nbytes());
  ccl::allgather(c, padVal.data_ptr(), allVal.data_ptr(), padVal.nbytes());
  std::vector<at::Tensor> idxs, vals;
  for (int64_t r = 0; r < n; ++r) {
    idxs.push_back(allIdx[r].narrow(1, 0, counts[r]));
    vals.push_back(allVal[r].narrow(0, 0, counts[r]));
  }
  // Written below autograd, as the dense collectives write through plain views:
  // a leaf that requires grad takes the result like any other tensor.
  at::Tensor sum =
      at::sparse_coo_tensor(at::cat(idxs, 1), at::cat(vals, 0), in.sizes(), in.options()).coalesce();
  at::AutoDispatchBelowADInplaceOrView belowAutograd;
  t.copy_(sum);
}

// Whether `t` shares memory with any of `list` other than list[except].
bool overlapsAnyBut(const at::Tensor& t, const std::vector<at::Tensor>& list, int except) {
  for (size_t i = 0; i < list.size(); ++i)
    if (int(i) != except && at::get_overlap_status(t, list[i]) != at::MemOverlapStatus::No)
      return true;
  return false;
}

// The step between consecutive elements of `t` in row-major order, if it is
// the same throughout (`t` can be viewed as one dimension).
std::optional<int64_t> flatStride(const at::Tensor& t) {
  const int64_t numel = t.numel();
  auto strides = at::detail::computeStride(t.sizes(), t.strides(), at::IntArrayRef(&numel, 1));
  if (!strides) return std::nullopt;
  return (*strides)[0];
}

// `part` may alias `whole` only as NCCL's in-place form: exactly block `rank`
// of it (all-gather's input, reduce-scatter's output). Any other overlap is
// undefined for NCCL, and here a peer reading straight from this rank's
// memory could see the block already overwritten: refuse it at the call.
// Strided tensors qualify too (they are staged through a private buffer):
// the block is then the same evenly spaced elements.
void checkInPlaceBlock(const at::Tensor& whole, const at::Tensor& part, int rank, const char* name,
                       const char* partName, const char* wholeName) {
  if (!whole.storage().is_alias_of(part.storage()) ||
      at::get_overlap_status(whole, part) == at::MemOverlapStatus::No)
    return;
  const auto wholeStride = flatStride(whole), partStride = flatStride(part);
  const bool block =
      wholeStride && partStride && (part.numel() == 1 || *partStride == *wholeStride) &&
      part.storage_offset() == whole.storage_offset() + rank * part.numel() * *wholeStride;
  TORCH_CHECK_VALUE(block, "oreg_ccl: ", name, ": the ", partName, " overlaps the ", wholeName,
                    " other than as block ", rank,
                    " of it (this rank's; in-place use passes exactly that block)");
}

}  // namespace

c10::intrusive_ptr<c10d::Work> OregBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                      const c10d::AllreduceOptions& opts) {
  if (tensors.size() == 1 && tensors[0].defined() && tensors[0].is_sparse()) {
    at::Tensor t = tensors[0];
    TORCH_CHECK_VALUE(t.device().is_cpu(), "oreg_ccl: allreduce of sparse tensors supports CPU "
                      "tensors only, got one on ", t.device());
    TORCH_CHECK_VALUE(opts.reduceOp == c10d::ReduceOp::SUM,
                      "oreg_ccl: allreduce of sparse tensors supports SUM only");
    std::string desc = std::string("sparse ") + c10::toString(t.scalar_type()) +
                       c10::str(t.sizes()) + " SUM";
    return enqueue(c10d::OpType::ALLREDUCE, "allreduce", desc, {t}, {t}, callOf(opts),
                   [t](Collective& c) { allreduceSparse(c, t); });
  }
  at::Tensor t = checkSingle(tensors, "allreduce");
  checkWritable({t}, "allreduce");
  ReduceSpec spec = reduceSpec(opts.reduceOp, t, "allreduce");
  std::vector<at::Tensor> inputs{t};
  if (spec.factorTensor.defined()) inputs.push_back(spec.factorTensor);
  return enqueue(c10d::OpType::ALLREDUCE, "allreduce", describe(t) + " " + spec.name, inputs, {t},
                 callOf(opts), [t = forWorker(t), spec = forWorker(spec)](Collective& c) {
                   allreduceTensor(c, t, spec);
                 });
}

c10::intrusive_ptr<c10d::Work> OregBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  // c10d's coalescing manager calls this inside its block (see send()).
  return raiseAtWaitWhileCoalescing(c10d::OpType::ALLREDUCE_COALESCED,
                                    [&] { return allreduceCoalescedImpl(tensors, opts); });
}

c10::intrusive_ptr<c10d::Work> OregBackend::allreduceCoalescedImpl(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK_VALUE(!tensors.empty(), "oreg_ccl: allreduce_coalesced needs at least one tensor");
  checkSameDevice(tensors[0], tensors, "allreduce_coalesced");
  checkWritable(tensors, "allreduce_coalesced");
  std::vector<ReduceSpec> specs;
  std::string desc;
  for (const auto& t : tensors) {
    specs.push_back(reduceSpec(opts.reduceOp, t, "allreduce_coalesced"));
    appendDescribed(desc, t);
  }
  // The PREMUL_SUM factor tensor (one for all) is read by the worker too.
  std::vector<at::Tensor> inputs = tensors;
  if (specs[0].factorTensor.defined()) inputs.push_back(specs[0].factorTensor);
  return enqueue(c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced",
                 desc + " " + specs[0].name, inputs, tensors, callOf(opts),
                 [tensors = forWorker(tensors), specs = forWorker(specs)](Collective& c) {
                   for (size_t i = 0; i < tensors.size(); ++i) allreduceTensor(c, tensors[i], specs[i]);
                 });
}

c10::intrusive_ptr<c10d::Work> OregBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                      const c10d::BroadcastOptions& opts) {
  at::Tensor t = checkSingle(tensors, "broadcast");
  TORCH_CHECK_VALUE(opts.rootTensor == 0, "oreg_ccl: broadcast: rootTensor must be 0");
  checkRoot(opts.rootRank, getSize(), "broadcast");
  int root = static_cast<int>(opts.rootRank);
  // On every rank, root included, so that all refuse together (NCCL refuses
  // such a tensor everywhere): a lone refusal would leave the others waiting.
  checkWritable({t}, "broadcast");
  return enqueue(c10d::OpType::BROADCAST, "broadcast",
                 describe(t) + " root " + std::to_string(root), {t}, {t}, callOf(opts),
                 [t = forWorker(t), root](Collective& c) {
                   bool isRoot = c.rank() == root;
                   Staged s = stage(t, t.scalar_type(), /*load=*/isRoot);
                   ccl::broadcast(c, s.buf.data_ptr(), bytesOf(s.buf), root);
                   if (!isRoot) unstage(s);
                 });
}

c10::intrusive_ptr<c10d::Work> OregBackend::reduce(std::vector<at::Tensor>& tensors,
                                                   const c10d::ReduceOptions& opts) {
  at::Tensor t = checkSingle(tensors, "reduce");
  TORCH_CHECK_VALUE(opts.rootTensor == 0, "oreg_ccl: reduce: rootTensor must be 0");
  checkRoot(opts.rootRank, getSize(), "reduce");
  ReduceSpec spec = reduceSpec(opts.reduceOp, t, "reduce");
  int root = static_cast<int>(opts.rootRank);
  checkWritable({t}, "reduce");  // on every rank, as broadcast
  std::vector<at::Tensor> inputs{t};
  if (spec.factorTensor.defined()) inputs.push_back(spec.factorTensor);
  return enqueue(c10d::OpType::REDUCE, "reduce",
                 describe(t) + " " + spec.name + " root " + std::to_string(root), inputs, {t},
                 callOf(opts), [t = forWorker(t), spec = forWorker(spec), root](Collective& c) {
                   bool isRoot = c.rank() == root;
                   // Only the root's tensor changes: others scale a private copy.
                   Staged s = stage(t, stageDtype(t.scalar_type()), /*load=*/true,
                                    /*forceCopy=*/spec.premul && !isRoot);
                   preReduce(spec, s.buf);
                   ccl::reduce(c, s.buf.data_ptr(), reduceCount(s.buf), reduceDtype(s.buf), spec.kind,
                          root);
                   if (isRoot) {
                     postReduce(spec, s.buf, c.size());
                     unstage(s);
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> OregBackend::allgatherImpl(std::vector<at::Tensor> outputs,
                                                          std::vector<at::Tensor> inputs,
                                                          Call call, const char* name) {
  // outputs[i] receives size * inputs[i] (flat, in rank order).
  std::string desc;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor(inputs[i], name);
    // One device for the whole call: it is ordered on, and waited for by, one stream.
    checkSameDevice(inputs[0], {inputs[i], outputs[i]}, name);
    TORCH_CHECK_VALUE(outputs[i].scalar_type() == inputs[i].scalar_type(), "oreg_ccl: ", name,
                      ": output dtype ", outputs[i].scalar_type(), " differs from input dtype ",
                      inputs[i].scalar_type());
    TORCH_CHECK_VALUE(outputs[i].numel() == inputs[i].numel() * getSize(), "oreg_ccl: ", name,
                      ": output has ", outputs[i].numel(), " elements, expected ", getSize(),
                      " x ", inputs[i].numel());
    appendDescribed(desc, inputs[i]);
    checkInPlaceBlock(outputs[i], inputs[i], getRank(), name, "input", "output");
  }
  checkWritable(outputs, name);
  return enqueue(c10d::OpType::_ALLGATHER_BASE, name, desc, inputs, outputs, call,
                 [outputs = forWorker(outputs), inputs = forWorker(inputs)](Collective& c) {
                   for (size_t i = 0; i < inputs.size(); ++i) {
                     Staged in = stage(inputs[i], inputs[i].scalar_type(), true);
                     Staged out = stage(outputs[i], outputs[i].scalar_type(), false);
                     ccl::allgather(c, in.buf.data_ptr(), out.buf.data_ptr(), bytesOf(in.buf));
                     unstage(out);
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> OregBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                            const c10d::AllgatherOptions& opts) {
  return allgatherImpl({output}, {input}, callOf(opts), "_allgather_base");
}

c10::intrusive_ptr<c10d::Work> OregBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return raiseAtWaitWhileCoalescing(c10d::OpType::COALESCED, [&] {
    TORCH_CHECK_VALUE(!inputs.empty() && outputs.size() == inputs.size(),
                      "oreg_ccl: allgather_into_tensor_coalesced needs matching, non-empty lists");
    return allgatherImpl(outputs, inputs, callOf(opts), "allgather_into_tensor_coalesced");
  });
}

c10::intrusive_ptr<c10d::Work> OregBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                      std::vector<at::Tensor>& inputs,
                                                      const c10d::AllgatherOptions& opts) {
  checkSingle(inputs, "allgather");
  TORCH_CHECK_VALUE(outputs.size() == 1, "oreg_ccl: allgather expects one list of output tensors");
  if (!sameNumel(inputs[0], outputs[0])) return allgatherUneven(outputs[0], inputs[0], callOf(opts));
  return allgatherLists(outputs, inputs, callOf(opts), "allgather", c10d::OpType::ALLGATHER);
}

c10::intrusive_ptr<c10d::Work> OregBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  // c10d's layout is outputLists[rank][input]; allgatherLists wants [input][rank].
  TORCH_CHECK_VALUE(!inputs.empty() && outputLists.size() == size_t(getSize()),
                    "oreg_ccl: allgather_coalesced expects one output list per rank");
  std::vector<std::vector<at::Tensor>> byInput(inputs.size());
  for (const auto& perRank : outputLists) {
    TORCH_CHECK_VALUE(perRank.size() == inputs.size(), "oreg_ccl: allgather_coalesced expects ",
                      inputs.size(), " output tensors per rank, got ", perRank.size());
    for (size_t i = 0; i < inputs.size(); ++i) byInput[i].push_back(perRank[i]);
  }
  return allgatherLists(byInput, inputs, callOf(opts), "allgather_coalesced",
                        c10d::OpType::ALLGATHER_COALESCED);
}

c10::intrusive_ptr<c10d::Work> OregBackend::allgatherUneven(const std::vector<at::Tensor>& outs,
                                                            const at::Tensor& in, Call call) {
  const int me = getRank();
  TORCH_CHECK_VALUE(outs.size() == size_t(getSize()), "oreg_ccl: allgather expects ", getSize(),
                    " output tensors, got ", outs.size());
  checkSameType(in, outs, "allgather");
  TORCH_CHECK_VALUE(outs[me].numel() == in.numel(), "oreg_ccl: allgather: output ", me, " has ",
                    outs[me].numel(), " elements, this rank's input ", in.numel());
  checkWritable(outs, "allgather");
  // The input inside another rank's output: that block arrives before this
  // rank's turn to send. A copy, queued on the caller's stream, is sent instead.
  const at::Tensor source = overlapsAnyBut(in, outs, me) ? in.clone() : in;
  return enqueue(c10d::OpType::ALLGATHER, "allgather", describeSizes(in.scalar_type(), outs),
                 {source}, outs, call,
                 [outs = forWorker(outs), in = forWorker(source)](Collective& c) {
                   for (int p = 0; p < c.size(); ++p) {
                     const bool mine = p == c.rank();
                     Staged s = stage(mine ? in : outs[p], in.scalar_type(), /*load=*/mine);
                     ccl::broadcast(c, s.buf.data_ptr(), bytesOf(s.buf), p);
                     if (mine)
                       hostView(outs[p]).copy_(s.buf.view(outs[p].sizes()));
                     else
                       unstage(s);
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> OregBackend::allgatherLists(
    const std::vector<std::vector<at::Tensor>>& outputLists, const std::vector<at::Tensor>& inputs,
    Call call, const char* name, c10d::OpType type) {
  // outputLists[i][p] receives rank p's inputs[i].
  std::vector<at::Tensor> outs;
  std::string desc;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor(inputs[i], name);
    TORCH_CHECK_VALUE(outputLists[i].size() == size_t(getSize()), "oreg_ccl: ", name,
                      " expects ", getSize(), " output tensors per input, got ",
                      outputLists[i].size());
    checkSameTypeAndSize(inputs[i], outputLists[i], name);
    checkSameDevice(inputs[0], {inputs[i]}, name);
    outs.insert(outs.end(), outputLists[i].begin(), outputLists[i].end());
    appendDescribed(desc, inputs[i]);
  }
  checkWritable(outs, name);
  return enqueue(type, name, desc, inputs, outs, call, [outputLists = forWorker(outputLists),
                                                        inputs = forWorker(inputs)](Collective& c) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const at::Tensor& in = inputs[i];
      Staged s = stage(in, in.scalar_type(), true);
      at::Tensor flat =
          at::empty({in.numel() * c.size()}, at::TensorOptions().dtype(in.scalar_type()));
      ccl::allgather(c, s.buf.data_ptr(), flat.data_ptr(), bytesOf(s.buf));
      unpack(flat, outputLists[i]);
    }
  });
}

c10::intrusive_ptr<c10d::Work> OregBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                   std::vector<at::Tensor>& inputs,
                                                   const c10d::GatherOptions& opts) {
  at::Tensor in = checkSingle(inputs, "gather");
  checkRoot(opts.rootRank, getSize(), "gather");
  int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> outs;
  if (getRank() == root) {
    TORCH_CHECK_VALUE(outputs.size() == 1 && outputs[0].size() == size_t(getSize()),
                      "oreg_ccl: gather expects one list of ", getSize(),
                      " output tensors on the root");
    outs = outputs[0];
    checkSameTypeAndSize(in, outs, "gather");
    checkWritable(outs, "gather");
  } else {
    TORCH_CHECK_VALUE(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                      "oreg_ccl: gather: only the root passes output tensors");
  }
  return enqueue(c10d::OpType::GATHER, "gather", describe(in) + " root " + std::to_string(root),
                 {in}, outs, callOf(opts),
                 [in = forWorker(in), outs = forWorker(outs), root](Collective& c) {
                   Staged s = stage(in, in.scalar_type(), true);
                   at::Tensor flat;
                   std::vector<char*> blocks;
                   if (c.rank() == root) blocks = rootBlocks(outs, in.scalar_type(), false, flat);
                   ccl::gather(c, s.buf.data_ptr(), blocks, bytesOf(s.buf), root);
                   if (flat.defined()) unpack(flat, outs);
                 });
}

c10::intrusive_ptr<c10d::Work> OregBackend::scatter(std::vector<at::Tensor>& outputs,
                                                    std::vector<std::vector<at::Tensor>>& inputs,
                                                    const c10d::ScatterOptions& opts) {
  at::Tensor out = checkSingle(outputs, "scatter");
  checkWritable({out}, "scatter");
  checkRoot(opts.rootRank, getSize(), "scatter");
  int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> ins;
  if (getRank() == root) {
    TORCH_CHECK_VALUE(inputs.size() == 1 && inputs[0].size() == size_t(getSize()),
                      "oreg_ccl: scatter expects one list of ", getSize(),
                      " input tensors on the root");
    ins = inputs[0];
    checkSameTypeAndSize(out, ins, "scatter");
  } else {
    TORCH_CHECK_VALUE(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                      "oreg_ccl: scatter: only the root passes input tensors");
  }
  // The root's output is also another rank's input block (scatter(t, [x, t])):
  // its own block goes to a private buffer first, as the peers may still be
  // reading theirs out of the root's memory when it lands.
  const bool outIsAnInput = overlapsAnyBut(out, ins, root);
  return enqueue(c10d::OpType::SCATTER, "scatter", describe(out) + " root " + std::to_string(root),
                 ins, {out}, callOf(opts),
                 [out = forWorker(out), ins = forWorker(ins), root, outIsAnInput](Collective& c) {
                   at::Tensor flat;
                   std::vector<char*> blocks;
                   if (c.rank() == root) blocks = rootBlocks(ins, out.scalar_type(), true, flat);
                   Staged s = stage(out, out.scalar_type(), false, /*forceCopy=*/outIsAnInput);
                   ccl::scatter(c, {blocks.begin(), blocks.end()}, s.buf.data_ptr(),
                                bytesOf(s.buf), root);
                   unstage(s);
                 });
}

c10::intrusive_ptr<c10d::Work> OregBackend::reduceScatterImpl(std::vector<at::Tensor> outputs,
                                                              std::vector<at::Tensor> inputs,
                                                              const c10d::ReduceScatterOptions& opts,
                                                              const char* name) {
  // inputs[i] (flat, size x outputs[i]) is reduced; rank r keeps part r.
  std::vector<ReduceSpec> specs;
  std::vector<at::Tensor> reads = inputs;
  std::string desc;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor(outputs[i], name);
    checkSameDevice(outputs[0], {outputs[i], inputs[i]}, name);  // one stream, as above
    TORCH_CHECK_VALUE(outputs[i].scalar_type() == inputs[i].scalar_type(), "oreg_ccl: ", name,
                      ": output dtype ", outputs[i].scalar_type(), " differs from input dtype ",
                      inputs[i].scalar_type());
    TORCH_CHECK_VALUE(inputs[i].numel() == outputs[i].numel() * getSize(), "oreg_ccl: ", name,
                      ": input has ", inputs[i].numel(), " elements, expected ", getSize(), " x ",
                      outputs[i].numel());
    specs.push_back(reduceSpec(opts.reduceOp, inputs[i], name));
    if (specs.back().factorTensor.defined()) reads.push_back(specs.back().factorTensor);
    appendDescribed(desc, outputs[i]);
    checkInPlaceBlock(inputs[i], outputs[i], getRank(), name, "output", "input");
  }
  checkWritable(outputs, name);
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, name, desc + " " + specs[0].name, reads,
                 outputs, callOf(opts), [outputs = forWorker(outputs), inputs = forWorker(inputs),
                                         specs = forWorker(specs)](Collective& c) {
                   for (size_t i = 0; i < inputs.size(); ++i) {
                     c10::ScalarType dt = stageDtype(inputs[i].scalar_type());
                     // The input is the caller's: scale a private copy.
                     Staged in = stage(inputs[i], dt, true, /*forceCopy=*/specs[i].premul);
                     Staged out = stage(outputs[i], dt, false);
                     preReduce(specs[i], in.buf);
                     ccl::reduceScatter(c, in.buf.data_ptr(), out.buf.data_ptr(), reduceCount(out.buf),
                                   reduceDtype(out.buf), specs[i].kind);
                     postReduce(specs[i], out.buf, c.size());
                     unstage(out);
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> OregBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  return reduceScatterImpl({output}, {input}, opts, "_reduce_scatter_base");
}

c10::intrusive_ptr<c10d::Work> OregBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  return raiseAtWaitWhileCoalescing(c10d::OpType::COALESCED, [&] {
    TORCH_CHECK_VALUE(!inputs.empty() && outputs.size() == inputs.size(),
                      "oreg_ccl: reduce_scatter_tensor_coalesced needs matching, non-empty lists");
    return reduceScatterImpl(outputs, inputs, opts, "reduce_scatter_tensor_coalesced");
  });
}

c10::intrusive_ptr<c10d::Work> OregBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  at::Tensor out = checkSingle(outputs, "reduce_scatter");
  checkWritable({out}, "reduce_scatter");
  TORCH_CHECK_VALUE(inputs.size() == 1 && inputs[0].size() == size_t(getSize()),
                    "oreg_ccl: reduce_scatter expects one list of ", getSize(), " input tensors");
  std::vector<at::Tensor> ins = inputs[0];
  if (!sameNumel(out, ins)) return reduceScatterUneven(out, ins, opts);
  checkSameTypeAndSize(out, ins, "reduce_scatter");
  ReduceSpec spec = reduceSpec(opts.reduceOp, out, "reduce_scatter");
  std::vector<at::Tensor> reads = ins;
  if (spec.factorTensor.defined()) reads.push_back(spec.factorTensor);
  return enqueue(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", describe(out) + " " + spec.name,
                 reads, {out}, callOf(opts),
                 [out = forWorker(out), ins = forWorker(ins), spec = forWorker(spec)](Collective& c) {
                   c10::ScalarType dt = stageDtype(out.scalar_type());
                   at::Tensor flat = packed(ins, dt);
                   Staged o = stage(out, dt, false);
                   preReduce(spec, flat);
                   ccl::reduceScatter(c, flat.data_ptr(), o.buf.data_ptr(), reduceCount(o.buf),
                                 reduceDtype(o.buf), spec.kind);
                   postReduce(spec, o.buf, c.size());
                   unstage(o);
                 });
}

c10::intrusive_ptr<c10d::Work> OregBackend::reduceScatterUneven(
    const at::Tensor& out, const std::vector<at::Tensor>& ins,
    const c10d::ReduceScatterOptions& opts) {
  const int me = getRank();
  checkSameType(out, ins, "reduce_scatter");
  TORCH_CHECK_VALUE(ins[me].numel() == out.numel(), "oreg_ccl: reduce_scatter: input ", me,
                    " has ", ins[me].numel(), " elements, the output ", out.numel());
  ReduceSpec spec = reduceSpec(opts.reduceOp, out, "reduce_scatter");
  std::vector<at::Tensor> reads = ins;
  if (spec.factorTensor.defined()) reads.push_back(spec.factorTensor);
  return enqueue(c10d::OpType::REDUCE_SCATTER, "reduce_scatter",
                 describeSizes(out.scalar_type(), ins) + " " + spec.name, reads, {out}, callOf(opts),
                 [out = forWorker(out), ins = forWorker(ins), spec = forWorker(spec)](Collective& c) {
                   at::Tensor mine;
                   for (int p = 0; p < c.size(); ++p) {
                     // A private copy: reduce may use the buffers of every rank.
                     Staged s = stage(ins[p], stageDtype(out.scalar_type()), /*load=*/true,
                                      /*forceCopy=*/true);
                     preReduce(spec, s.buf);
                     ccl::reduce(c, s.buf.data_ptr(), reduceCount(s.buf), reduceDtype(s.buf),
                                 spec.kind, p);
                     if (p == c.rank()) mine = s.buf;
                   }
                   // Written once every block is reduced: the output may be
                   // (inside) a later block's input.
                   postReduce(spec, mine, c.size());
                   hostView(out).copy_(mine.view(out.sizes()));
                 });
}

c10::intrusive_ptr<c10d::Work> OregBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                          std::vector<int64_t>& outputSplits,
                                                          std::vector<int64_t>& inputSplits,
                                                          const c10d::AllToAllOptions& opts) {
  checkTensor(input, "alltoall_base");
  checkSameDevice(input, {output}, "alltoall_base");
  checkWritable({output}, "alltoall_base");
  TORCH_CHECK_VALUE(input.scalar_type() == output.scalar_type(),
                    "oreg_ccl: alltoall_base: input and output dtypes differ");
  const int n = getSize();
  // Splits count rows (dim 0); empty means equal splits.
  auto rowsOf = [&](const at::Tensor& t, std::vector<int64_t> splits, const char* which) {
    int64_t rows = t.dim() ? t.size(0) : 1;
    if (splits.empty()) {
      TORCH_CHECK_VALUE(rows % n == 0, "oreg_ccl: alltoall_base: ", which, " dim 0 (", rows,
                        ") is not divisible by the group size ", n);
      splits.assign(n, rows / n);
    }
    TORCH_CHECK_VALUE(splits.size() == size_t(n), "oreg_ccl: alltoall_base: ", which,
                      " split sizes need ", n, " entries, got ", splits.size());
    for (auto s : splits) {
      TORCH_CHECK_VALUE(s >= 0, "oreg_ccl: alltoall_base: negative split");
      // Also keeps their sum from wrapping around to dim 0.
      TORCH_CHECK_VALUE(s <= rows, "oreg_ccl: alltoall_base: ", which, " split size ", s,
                        " is larger than dim 0 (", rows, ")");
    }
    TORCH_CHECK_VALUE(std::accumulate(splits.begin(), splits.end(), int64_t(0)) == rows,
                      "oreg_ccl: alltoall_base: ", which, " split sizes sum to ",
                      std::accumulate(splits.begin(), splits.end(), int64_t(0)), " but dim 0 is ",
                      rows);
    size_t rowBytes = rows ? bytesOf(t) / rows : 0;
    std::vector<size_t> offsets(n), bytes(n);
    size_t off = 0;
    for (int p = 0; p < n; ++p) {
      offsets[p] = off;
      bytes[p] = splits[p] * rowBytes;
      off += bytes[p];
    }
    return std::make_pair(offsets, bytes);
  };
  auto [sendOff, sendBytes] = rowsOf(input, inputSplits, "input");
  auto [recvOff, recvBytes] = rowsOf(output, outputSplits, "output");
  const int me = getRank();
  TORCH_CHECK_VALUE(sendBytes[me] == recvBytes[me], "oreg_ccl: alltoall_base: rank ", me,
                    " sends itself ", sendBytes[me], " bytes but expects ", recvBytes[me],
                    " (input and output split sizes at index ", me, " differ)");
  // all_to_all_single(x, x): a block would be overwritten by a peer's before
  // it is sent (NCCL's result is undefined too). The list form packs its
  // inputs first; here a copy, queued on the caller's stream, plays that part.
  const at::Tensor source =
      at::get_overlap_status(input, output) == at::MemOverlapStatus::No ? input : input.clone();
  // Equal splits (none given) across hosts: every rank knows every block's
  // size (compared on the wire), so small blocks may travel through a host's
  // first rank. Otherwise (splits given, or large blocks) the direct exchange,
  // which compares only the dtype on the wire: sizes may legitimately differ
  // per rank, and a rank cannot tell from its own splits what the others
  // chose. (A rank passing split sizes where the others pass none, with
  // blocks of at most 4 KiB, gets a mismatch error there; NCCL accepts it.)
  const bool hierarchical = inputSplits.empty() && outputSplits.empty() &&
                            alltoallIsHierarchical(topology().multiHost(), sendBytes[0]);
  const std::string label = hierarchical ? c10::str(input.scalar_type(), " equal blocks of ",
                                                    sendBytes[0], " bytes")
                                         : c10::str(input.scalar_type());
  return enqueue(c10d::OpType::ALLTOALL_BASE, "alltoall_base", label, {source}, {output},
                 callOf(opts),
                 [input = forWorker(source), output = forWorker(output), sendOff, sendBytes, recvOff,
                  recvBytes, hierarchical](Collective& c) {
                   Staged in = stage(input, input.scalar_type(), true);
                   Staged out = stage(output, output.scalar_type(), false);
                   const char* from = static_cast<const char*>(in.buf.data_ptr());
                   char* to = static_cast<char*>(out.buf.data_ptr());
                   if (hierarchical)
                     ccl::alltoallHierarchical(c, from, to, sendBytes[0]);
                   else
                     ccl::alltoall(c, from, sendOff, sendBytes, to, recvOff, recvBytes);
                   unstage(out);
                 });
}

c10::intrusive_ptr<c10d::Work> OregBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllToAllOptions& opts) {
  const int n = getSize();
  TORCH_CHECK_VALUE(inputs.size() == size_t(n) && outputs.size() == size_t(n),
                    "oreg_ccl: alltoall expects ", n, " input and ", n, " output tensors");
  checkSameDevice(inputs[0], inputs, "alltoall");
  checkSameDevice(inputs[0], outputs, "alltoall");
  checkWritable(outputs, "alltoall");
  for (const auto* list : {&inputs, &outputs})
    for (const auto& t : *list)
      TORCH_CHECK_VALUE(t.scalar_type() == inputs[0].scalar_type(),
                        "oreg_ccl: alltoall: all tensors must have one dtype");
  const int me = getRank();
  TORCH_CHECK_VALUE(inputs[me].numel() == outputs[me].numel(), "oreg_ccl: alltoall: rank ", me,
                    " sends itself ", inputs[me].numel(), " elements but expects ",
                    outputs[me].numel());
  std::vector<at::Tensor> ins = inputs, outs = outputs;
  return enqueue(c10d::OpType::ALLTOALL, "alltoall", c10::str(inputs[0].scalar_type()), ins, outs,
                 callOf(opts), [ins = forWorker(ins), outs = forWorker(outs)](Collective& c) {
                   const int n = c.size();
                   std::vector<size_t> sendOff(n), sendBytes(n), recvOff(n), recvBytes(n);
                   size_t s = 0, r = 0;
                   for (int p = 0; p < n; ++p) {
                     sendOff[p] = s;
                     sendBytes[p] = bytesOf(ins[p]);
                     s += sendBytes[p];
                     recvOff[p] = r;
                     recvBytes[p] = bytesOf(outs[p]);
                     r += recvBytes[p];
                   }
                   auto dt = ins[0].scalar_type();
                   at::Tensor in = at::empty({int64_t(s / c10::elementSize(dt))}, at::TensorOptions().dtype(dt));
                   at::Tensor out = at::empty({int64_t(r / c10::elementSize(dt))}, at::TensorOptions().dtype(dt));
                   char* ip = static_cast<char*>(in.data_ptr());
                   for (int p = 0; p < n; ++p)
                     if (ins[p].numel())
                       in.narrow(0, sendOff[p] / ins[p].element_size(), ins[p].numel())
                           .view(ins[p].sizes())
                           .copy_(hostView(ins[p]));
                   ccl::alltoall(c, ip, sendOff, sendBytes, static_cast<char*>(out.data_ptr()), recvOff,
                            recvBytes);
                   for (int p = 0; p < n; ++p)
                     if (outs[p].numel())
                       hostView(outs[p]).copy_(
                           out.narrow(0, recvOff[p] / outs[p].element_size(), outs[p].numel())
                               .view(outs[p].sizes()));
                 });
}

c10::intrusive_ptr<c10d::Work> OregBackend::barrier(const c10d::BarrierOptions& opts) {
  int device = -1;
  if (!opts.device_ids.empty()) device = static_cast<int>(opts.device_ids[0]);
  // Blocks the host in wait(), and (with device ids) first waits for the
  // work queued on that device's current stream, like NCCL's barrier.
  return enqueue(c10d::OpType::BARRIER, "barrier", "", {}, {}, callOf(opts),
                 [](Collective& c) { ccl::barrier(c); }, nullptr, /*blockHost=*/true, device);
}

}  // namespace openreg::ccl
