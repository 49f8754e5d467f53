// Argument checks and host staging shared by the backend's operations.
//
// The algorithms work on contiguous host bytes. On the worker thread, an
// openreg tensor is reached through its kernel mapping (kernelView); a
// tensor that is strided, or whose dtype the algorithm widens (fp16/bf16
// reductions accumulate in fp32), gets a contiguous staging copy that is
// written back afterwards. Contiguous tensors are used in place.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <string>
#include <vector>

#include "Reduce.h"

namespace openreg::ccl {

// ---- caller thread: validation ------------------------------------------------
// The single tensor of `tensors` (c10d passes lists), checked dense and on CPU/openreg.
at::Tensor checkSingle(const std::vector<at::Tensor>& tensors, const char* op);
// Dense, on CPU or openreg, all on the same device as `ref`.
void checkTensor(const at::Tensor& t, const char* op);
void checkSameDevice(const at::Tensor& ref, const std::vector<at::Tensor>& ts, const char* op);
// Tensors the operation writes: one with internal overlap (an expanded tensor)
// is refused at the call, as ATen's in-place ops refuse it, instead of
// failing the whole group on the worker when the result is copied back.
void checkWritable(const std::vector<at::Tensor>& ts, const char* op);
// Every tensor on ref's device with ref's dtype (and, the second, its element count).
void checkSameType(const at::Tensor& ref, const std::vector<at::Tensor>& ts, const char* op);
void checkSameTypeAndSize(const at::Tensor& ref, const std::vector<at::Tensor>& ts,
                          const char* op);
// "float32[2, 3]" — part of the description ranks compare on the wire.
std::string describe(const at::Tensor& t);

// A validated reduce op.
struct ReduceSpec {
  ReduceKind kind = ReduceKind::kSum;
  bool average = false;     // AVG: sum, then divide by the group size
  bool premul = false;      // PREMUL_SUM: scale each input, then sum
  double factor = 1.0;      //   its factor, unless
  at::Tensor factorTensor;  //   this one-element tensor is set
  std::string name;
};
// `reduced`: the tensor reduced (its dtype; a factor tensor must be on its device).
ReduceSpec reduceSpec(const c10d::ReduceOp& op, const at::Tensor& reduced, const char* what);

// The dtype a reduction runs in (fp16/bf16 widen to fp32).
c10::ScalarType stageDtype(c10::ScalarType dtype);

// ---- caller thread: what an operation's body holds ---------------------------------
// An openreg tensor becomes a CPU tensor over its device memory at the address
// it has when the operation is issued, owning nothing: the worker uses that
// address even if the caller resizes the storage after issuing (FSDP1 frees
// unsharded parameters that way; as with NCCL, the stream-ordered caching
// allocator only hands the memory to work queued behind the operation's
// stream hold). The Work stashes the caller's tensors until wait() has queued
// that hold, so the operation pins no device memory after it.
// CPU tensors are returned as they are: nothing orders the host allocator, so
// an operation keeps them until it has finished.
at::Tensor forWorker(const at::Tensor& t);
std::vector<at::Tensor> forWorker(const std::vector<at::Tensor>& ts);
std::vector<std::vector<at::Tensor>> forWorker(const std::vector<std::vector<at::Tensor>>& lists);
ReduceSpec forWorker(ReduceSpec spec);  // its factor tensor
std::vector<ReduceSpec> forWorker(std::vector<ReduceSpec> specs);

// ---- worker thread: staging -----------------------------------------------------
struct Staged {
  at::Tensor view;  // host alias of the user's tensor
  at::Tensor buf;   // contiguous working buffer (== view when no copy is needed)
  bool copied = false;
};
at::Tensor hostView(const at::Tensor& t);
// `load`: fill buf with the tensor's values; `forceCopy`: never use the tensor in place.
Staged stage(const at::Tensor& t, c10::ScalarType dtype, bool load, bool forceCopy = false);
void unstage(Staged& s);  // copy buf back into the user's tensor if it was staged

// Count and dtype the algorithms see for a staged reduction buffer (complex
// tensors reduce as pairs of reals).
size_t reduceCount(const at::Tensor& buf);
c10::ScalarType reduceDtype(const at::Tensor& buf);
void preReduce(const ReduceSpec& spec, at::Tensor& buf);
void postReduce(const ReduceSpec& spec, at::Tensor& buf, int groupSize);

}  // namespace openreg::ccl
