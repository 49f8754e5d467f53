// The dtype check of a kernel launch, made on the host.
//
// A CUDA kernel's AT_DISPATCH switch runs on the host at launch, so an
// unsupported dtype ("softmax of an int tensor") raises NotImplementedError at
// the call. An openreg kernel body is ATen CPU code whose AT_DISPATCH runs on
// the stream, where the same error could only fail the stream. So before a
// kernel is queued (a native one, or the fallback's), its CPU body runs once
// on the host over probe tensors (same dtypes and ranks, sizes 1 or 2, on the
// CPU) for each dtype signature of each launch site; the verdict is kept per
// thread and a rejected signature raises the CPU's own error from then on.
//
// NotImplementedError (what AT_DISPATCH throws) and a typed data pointer's
// dtype check are verdicts. Another error of the probe is one only if the
// kernel's own dtype check raised it ("std and var only support floating
// point and complex dtypes"), which two more probes tell apart from a check of
// shapes or values: the error stays with the probe filled with ones instead
// of zeros (not a division by zero) and goes away with the same probe in
// float32 where it holds integers or bools; or AT_DISPATCH's
// NotImplementedError from the probe filled with ones (zeros failed a check of
// values before the dispatch). Such a verdict raises the CPU's
// own exception and is not kept (a Scalar argument's value may have been what
// the kernel rejected, and keys only classify values). Any other failure
// says nothing about dtypes: the launch goes ahead as before. Launches with
// an empty tensor are not probed: CPU kernels return before their dispatch.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/IListRef.h>
#include <c10/core/Scalar.h>
#include <c10/util/Exception.h>

#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace openreg::dispatch_probe {

// A zero-filled CPU tensor (so a probe's index tensors hold valid indices;
// ones or float32 inside runProbe's second and third runs)
// with t's dtype and rank, its size-1 dimensions, its broadcast (stride-0)
// dimensions, and size 2 elsewhere: CPU kernels take other paths, with other
// dtype lists, for a one-element operand, a size-1 reduced dimension or an
// expanded input. An undefined tensor stays undefined.
at::Tensor probeTensor(const at::Tensor& t);

// A zero-filled CPU tensor of t's dtype and sizes (ones in checkShapes' second run).
at::Tensor exactProbeTensor(const at::Tensor& t);

// For a launch with an empty tensor, which check() does not probe: runs
// `probe` (over exactProbeTensor's) and, if it raises with zeros and with
// ones alike (so not over values), raises the CPU's exception. Kept nowhere.
void checkShapes(const std::function<void()>& probe);

// An empty CPU tensor with an output's dtype: out= kernels resize it.
at::Tensor probeOutput(const at::Tensor& t);

// Drops the warnings raised while it is installed (WarningHandlerGuard): a
// probe's (an out= resize, a deprecation) are not the user's call's.
class DropWarnings final : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override {}
};

// Why a dtype signature is rejected: AT_DISPATCH's NotImplementedError, the
// RuntimeError of a typed data pointer ("expected scalar type Float but found
// Long", a kernel handed operands of two dtypes), or (`error` set, not kept)
// the kernel's own dtype check.
struct Rejection {
  bool notImplemented;
  std::string message;
  std::exception_ptr error;
};

// Runs `probe` (up to three times, see above); the rejection, if any.
std::optional<Rejection> runProbe(const std::function<void()>& probe);

[[noreturn]] void raise(const Rejection& rejection);

// Marks an empty tensor in a key (no other key byte is negative).
constexpr char kEmpty = '\xff';

// The dtype signature of an argument list: tensors' dtypes and what the
// probe tensor keeps of their shapes, and everything else that can change
// which kernel, and so which dtype list, a call takes (scalars' kinds and
// special values, dtype, flag and mode arguments).
inline void appendKey(std::string& key, const at::Tensor& t) {
  if (!t.defined()) {
    key.push_back('\x7f');
    return;
  }
  key.push_back(static_cast<char>(t.scalar_type()));
  if (t.numel() == 0) {
    key.push_back(kEmpty);
    return;
  }
  const int64_t dim = t.dim();
  bool plain = true;  // no size-1 or broadcast dimension: the rank says all
  for (int64_t d = 0; d < dim && plain; ++d) plain = t.size(d) > 1 && t.stride(d) != 0;
  key.push_back(static_cast<char>((plain ? '0' : 'A') + dim));
  if (plain) return;
  for (int64_t d = 0; d < dim; ++d)
    key.push_back(t.size(d) == 1 ? '1' : t.stride(d) == 0 ? 'x' : 'n');
}
inline void appendKey(std::string& key, const std::optional<at::Tensor>& t) {
  appendKey(key, t.has_value() ? *t : at::Tensor());
}
inline void appendKey(std::string& key, at::OptionalTensorRef t) {
  appendKey(key, t.has_value() ? *t : at::Tensor());
}
inline void appendKey(std::string& key, const at::ITensorListRef& ts) {
  for (const at::Tensor& t : ts) appendKey(key, t);
  key.push_back('|');
}
inline void appendKey(std::string& key, at::TensorList ts) {
  for (const at::Tensor& t : ts) appendKey(key, t);
  key.push_back('|');
}
// pow(x, 0), pow(x, 1), clamp(x, nan) and the like are special cases with
// kernels of their own.
char scalarValueClass(const c10::Scalar& s);
inline void appendKey(std::string& key, const c10::Scalar& s) {
  key.push_back(static_cast<char>(64 + static_cast<int>(s.type())));
  key.push_back(scalarValueClass(s));
}
inline void appendKey(std::string& key, const std::optional<c10::Scalar>& s) {
  if (s.has_value()) appendKey(key, *s);
  else key.push_back('N');
}
inline void appendKey(std::string& key, at::ArrayRef<c10::Scalar> scalars) {
  for (const c10::Scalar& s : scalars) appendKey(key, s);
  key.push_back('|');
}
inline void appendKey(std::string& key, std::optional<at::ScalarType> dtype) {
  key.push_back(dtype.has_value() ? static_cast<char>(*dtype) : '\x7e');
}
inline void appendKey(std::string& key, bool flag) { key.push_back(flag ? 'T' : 'F'); }
// Dims: reducing a size-1 dimension takes a shortcut the others do not.
inline void appendKey(std::string& key, int64_t value) {
  key += std::to_string(value);
  key.push_back('i');
}
inline void appendKey(std::string& key, at::IntArrayRef values) {
  for (int64_t v : values) appendKey(key, v);
  key.push_back('|');
}
inline void appendKey(std::string& key, at::OptionalIntArrayRef values) {
  if (values.has_value()) appendKey(key, *values);
  key.push_back('|');
}
// Modes ("tanh" gelu, "floor" division) pick other kernels.
inline void appendKey(std::string& key, c10::string_view mode) {
  key.append(mode.data(), mode.size());
  key.push_back('|');
}
inline void appendKey(std::string& key, const std::optional<c10::string_view>& mode) {
  if (mode.has_value()) appendKey(key, *mode);
  key.push_back('|');
}
template <class T>
void appendKey(std::string&, const T&) {}

// Raises AT_DISPATCH's NotImplementedError if the CPU body rejects this dtype
// signature (a key without kEmpty: callers skip launches with an empty tensor). `Site` is a type unique to the launch site (its kernel body's
// lambda type), so each site keeps its own verdicts.
template <class Site, class Probe>
void check(const std::string& key, Probe&& probe) {
  static thread_local std::unordered_map<std::string, std::optional<Rejection>> verdicts;
  auto it = verdicts.find(key);
  if (it == verdicts.end()) {
    std::optional<Rejection> verdict = runProbe(probe);
    if (verdict.has_value() && verdict->error) raise(*verdict);
    it = verdicts.emplace(key, std::move(verdict)).first;
  }
  if (it->second.has_value()) raise(*it->second);
}

}  // namespace openreg::dispatch_probe
