// Helpers for boxed kernels (the generic fallbacks, Fallback.cpp and
// NestedFallback.cpp): the tensors inside an argument or return value, and
// what an operator's schema says it writes.
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <algorithm>
#include <optional>

namespace openreg::kernels {

// Apply `fn` to every tensor inside an argument or return value.
template <typename Fn>
void forEachTensor(const c10::IValue& value, Fn&& fn) {
  if (value.isTensor()) {
    fn(value.toTensor());
  } else if (value.isTensorList()) {
    for (const at::Tensor& t : value.toTensorList()) fn(t);
  } else if (value.isList()) {
    for (const c10::IValue& v : value.toListRef())
      if (v.isTensor()) fn(v.toTensor());
  }
}

// Rebuild an argument with each tensor replaced by `fn(tensor)`.
template <typename Fn>
c10::IValue mapTensors(const c10::IValue& value, Fn&& fn) {
  if (value.isTensor()) return fn(value.toTensor());
  if (value.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : value.toTensorList()) out.push_back(fn(t));
    return out;
  }
  if (value.isList()) {
    auto list = value.toList();
    bool has_tensor = false;
    for (const c10::IValue& v : list)
      has_tensor = has_tensor || v.isTensor();
    if (!has_tensor) return value;
    c10::impl::GenericList out(list.elementType());
    for (const c10::IValue& v : list) out.push_back(v.isTensor() ? c10::IValue(fn(v.toTensor())) : v);
    return out;
  }
  return value;
}

// Whether the operator writes any of its arguments (in place or out=).
inline bool writesAnArgument(const c10::FunctionSchema& schema) {
  const auto& arguments = schema.arguments();
  return std::any_of(arguments.begin(), arguments.end(), [](const c10::Argument& a) {
    return a.alias_info() && a.alias_info()->isWrite();
  });
}

// The argument a written return names (`Tensor(a!)`: an in-place op's self,
// an out= argument), if return `k` is one.
inline std::optional<size_t> writtenArgumentIndex(const c10::FunctionSchema& schema, size_t k) {
  const auto* ret = schema.returns()[k].alias_info();
  if (!ret || !ret->isWrite()) return std::nullopt;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const auto* arg = schema.arguments()[i].alias_info();
    if (arg && arg->isWrite() && arg->beforeSets() == ret->beforeSets()) return i;
  }
  return std::nullopt;
}

}  // namespace openreg::kernels
