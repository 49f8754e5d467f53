// Where the generic fallback (Fallback.cpp) treats named operators apart from
// the rest: which take its synchronous path and why (SyncOnlyOps), the rules
// that make Meta's description of a few operators' results what their CPU
// kernels return (batch norm, embedding bag, convolution's memory format),
// and an error their CPU kernels raise at the call (integer division by a
// zero the host can see). Argument checks made before the fallback, through
// routes of their own, are FallbackChecks.cpp's.
// Tests: tests/ops/test_opinfo.py, tests/ops/test_fallback_checks.py.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/stack.h>

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace c10 {
class OperatorHandle;
struct FunctionSchema;
struct OperatorName;
}  // namespace c10

namespace openreg::kernels {

// Operators that take the synchronous path although Meta can describe their
// outputs, for one of these reasons:
//  - kShapes: Meta disagrees with the CPU kernel about an output's shape or
//    dtype, so the outputs cannot be allocated before the CPU kernel has run.
//    Found by tests/ops/test_opinfo.py; kernels add to the set at run time
//    when they detect a new disagreement.
//    nonzero is listed from the start: its output's size is data, so Meta
//    cannot describe it, and its Python Meta kernel imports sympy to say so.
//  - kBatchNorm: as kShapes, except for a functional call whose dtypes Meta
//    gets right (batchNormAgreesWithMeta).
//  - kEmbeddingBag: Meta's result shapes are replaced by the CPU kernel's
//    (embeddingBagResultsAsTheCpus), which follow from sizes and flags.
//  - kChecks: the CPU kernel makes argument checks Meta skips; on the host
//    they raise at the call instead of failing the stream. In a graph capture
//    (where the host may not wait) these are queued all the same, after a run
//    of the CPU kernel over dummy tensors of the arguments' shapes raised its
//    checks of shapes and dtypes; a bad value fails the replay, as a
//    device-side assert fails a CUDA graph's.
class SyncOnlyOps {
 public:
  enum class Reason { kNone, kShapes, kBatchNorm, kEmbeddingBag, kChecks };

  SyncOnlyOps();
  // A listed name without an overload covers all of the op's overloads.
  Reason reason(const c10::OperatorName& name);
  // Sends the op down the synchronous path from now on (kShapes).
  void insert(const c10::OperatorName& name);

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, Reason> names_;  // GUARDED_BY mutex_
};

SyncOnlyOps& syncOnlyOps();

// Whether Meta describes this functional batch norm's results as its CPU
// kernel returns them, so that it may run asynchronously.
bool batchNormAgreesWithMeta(const c10::FunctionSchema& schema, const c10::IValue* args);

// Whether an embedding bag's arguments pass the CPU kernel's host-side checks
// (index and offset ranks and dtypes, mode, per-sample weights), which Meta
// skips: if not, it runs synchronously, so that the CPU's error is raised at
// the call instead of failing the stream.
bool embeddingBagArgumentsPassTheCpusChecks(const c10::IValue* args);

// Meta's results of batch norm (forward and backward) and embedding bag,
// replaced by tensors of the shapes and memory formats the CPU kernels return.
void batchNormResultsAsTheCpus(const c10::OperatorHandle& op, SyncOnlyOps::Reason reason,
                               const c10::IValue* args, torch::jit::Stack& meta_stack);
void embeddingBagResultsAsTheCpus(const c10::OperatorHandle& op, SyncOnlyOps::Reason reason,
                                  const c10::IValue* args, torch::jit::Stack& meta_stack);

// The convolution family's fresh 4-D results laid out channels-last where
// the CPU's are. `meta_args`: the call's arguments on Meta; `meta_tensor_args`:
// their tensors (a result that is one of them is a written argument, kept).
void convolutionOutputsInTheCpusFormat(const c10::OperatorHandle& op,
                                       const std::vector<c10::IValue>& meta_args,
                                       const std::vector<at::Tensor>& meta_tensor_args,
                                       torch::jit::Stack& meta_stack);

// Raises the CPU kernel's ZeroDivisionError at the call for an integer
// division by a Scalar or CPU-tensor zero.
void checkHostVisibleZeroDivisor(const c10::OperatorHandle& op, const c10::IValue* args,
                                 size_t num_args);

}  // namespace openreg::kernels
