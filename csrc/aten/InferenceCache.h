// A cache of the generic fallback's output inference (Fallback.cpp).
//
// Inferring outputs on the Meta device costs tens of microseconds per call
// (many Meta kernels are Python). A training loop calls the same operators
// with the same shapes every step, so the fallback remembers, per operator
// and argument signature (tensor metadata + aliasing pattern + every
// non-tensor argument), what the outputs look like: fresh tensors of a given
// shape, or views of / the same object as an input. Only operators whose
// returns are single tensors and whose arguments are all of simple,
// comparable types are cached; everything else is inferred every time.
//
// Thread safety: one global mutex; entries are immutable once stored.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace openreg {

struct CachedTensorMeta {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t offset = 0;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  bool conj = false;  // the math bits a view inherits from its base
  bool neg = false;
};

struct CachedOutput {
  enum class Kind { kUndefined, kFresh, kSameAsInput, kViewOfInput } kind = Kind::kFresh;
  int input = -1;  // index into the flattened openreg tensor inputs
  CachedTensorMeta meta;
};

struct CachedInference {
  bool synchronous = false;  // Meta could not infer this call: take the sync path
  std::vector<CachedOutput> outputs;
  // Metadata of each openreg input after the op (out= arguments may be resized).
  std::vector<CachedTensorMeta> inputs_after;
};

// The cache key of a call, or nullopt if the call's arguments are not cacheable.
std::optional<std::string> inferenceKey(const c10::OperatorHandle& op, const c10::IValue* args,
                                        size_t num_args);
std::shared_ptr<const CachedInference> lookupInference(const std::string& key);
void storeInference(const std::string& key, std::shared_ptr<const CachedInference> entry);

CachedTensorMeta metaOf(const at::Tensor& t);

}  // namespace openreg
