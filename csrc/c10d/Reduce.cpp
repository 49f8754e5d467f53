// Plain loops the compiler vectorises (O3 for this file only: the rest of the
// extension is built with -O2, which vectorises far less).
#pragma GCC optimize("O3")

#include "Reduce.h"

#include <c10/util/Exception.h>

#include <algorithm>

namespace openreg::ccl {

namespace {

template <typename T, typename F>
void loop(void* acc, const void* in, size_t n, F f) {
  T* __restrict a = static_cast<T*>(acc);
  const T* __restrict b = static_cast<const T*>(in);
  for (size_t i = 0; i < n; ++i) a[i] = f(a[i], b[i]);
}

template <typename T>
void arithmetic(void* acc, const void* in, size_t n, ReduceKind op) {
  switch (op) {
    case ReduceKind::kSum: return loop<T>(acc, in, n, [](T x, T y) { return T(x + y); });
    case ReduceKind::kProduct: return loop<T>(acc, in, n, [](T x, T y) { return T(x * y); });
    // NaN propagates like torch.maximum/minimum.
    case ReduceKind::kMin:
      return loop<T>(acc, in, n, [](T x, T y) { return (y < x || y != y) ? y : x; });
    case ReduceKind::kMax:
      return loop<T>(acc, in, n, [](T x, T y) { return (y > x || y != y) ? y : x; });
    default: break;
  }
  if constexpr (std::is_integral_v<T>) {
    switch (op) {
      case ReduceKind::kBand: return loop<T>(acc, in, n, [](T x, T y) { return T(x & y); });
      case ReduceKind::kBor: return loop<T>(acc, in, n, [](T x, T y) { return T(x | y); });
      case ReduceKind::kBxor: return loop<T>(acc, in, n, [](T x, T y) { return T(x ^ y); });
      default: break;
    }
  }
  TORCH_CHECK(false, "oreg_ccl: reduction ", reduceName(op), " is not defined for this dtype");
}

void logical(void* acc, const void* in, size_t n, ReduceKind op) {
  // bool is stored as one byte holding 0 or 1.
  switch (op) {
    case ReduceKind::kSum:
    case ReduceKind::kMax:
    case ReduceKind::kBor: return loop<uint8_t>(acc, in, n, [](uint8_t x, uint8_t y) { return uint8_t(x | y); });
    case ReduceKind::kProduct:
    case ReduceKind::kMin:
    case ReduceKind::kBand: return loop<uint8_t>(acc, in, n, [](uint8_t x, uint8_t y) { return uint8_t(x & y); });
    case ReduceKind::kBxor: return loop<uint8_t>(acc, in, n, [](uint8_t x, uint8_t y) { return uint8_t(x ^ y); });
  }
}

}  // namespace

const char* reduceName(ReduceKind op) {
  switch (op) {
    case ReduceKind::kSum: return "SUM";
    case ReduceKind::kProduct: return "PRODUCT";
    case ReduceKind::kMin: return "MIN";
    case ReduceKind::kMax: return "MAX";
    case ReduceKind::kBand: return "BAND";
    case ReduceKind::kBor: return "BOR";
    case ReduceKind::kBxor: return "BXOR";
  }
  return "?";
}

bool reduceSupported(c10::ScalarType dtype, ReduceKind op) {
  bool bitwise = op == ReduceKind::kBand || op == ReduceKind::kBor || op == ReduceKind::kBxor;
  switch (dtype) {
    case c10::kFloat:
    case c10::kDouble: return !bitwise;
    case c10::kBool:
    case c10::kByte:
    case c10::kChar:
    case c10::kShort:
    case c10::kInt:
    case c10::kLong:
    case c10::kUInt16:
    case c10::kUInt32:
    case c10::kUInt64: return true;
    default: return false;
  }
}

void reduceInto(void* acc, const void* in, size_t n, c10::ScalarType dtype, ReduceKind op) {
  switch (dtype) {
    case c10::kFloat: return arithmetic<float>(acc, in, n, op);
    case c10::kDouble: return arithmetic<double>(acc, in, n, op);
    case c10::kByte: return arithmetic<uint8_t>(acc, in, n, op);
    case c10::kChar: return arithmetic<int8_t>(acc, in, n, op);
    case c10::kShort: return arithmetic<int16_t>(acc, in, n, op);
    case c10::kInt: return arithmetic<int32_t>(acc, in, n, op);
    case c10::kLong: return arithmetic<int64_t>(acc, in, n, op);
    case c10::kUInt16: return arithmetic<uint16_t>(acc, in, n, op);
    case c10::kUInt32: return arithmetic<uint32_t>(acc, in, n, op);
    case c10::kUInt64: return arithmetic<uint64_t>(acc, in, n, op);
    case c10::kBool: return logical(acc, in, n, op);
    default: TORCH_CHECK(false, "oreg_ccl: cannot reduce dtype ", dtype);
  }
}

}  // namespace openreg::ccl
