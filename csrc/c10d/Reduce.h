// Element-wise reductions on raw buffers: acc[i] = op(acc[i], in[i]).
//
// Used by the algorithms on pieces read straight out of a transport (shared
// memory), so they take raw pointers, not tensors. float16/bfloat16 never get
// here: the backend widens them to float32 first, so sums accumulate in fp32.
// bool: SUM/MAX/BOR are "or", PRODUCT/MIN/BAND are "and", BXOR is "xor".
#pragma once

#include <c10/core/ScalarType.h>

#include <cstddef>
#include <cstdint>

namespace openreg::ccl {

enum class ReduceKind : uint8_t { kSum, kProduct, kMin, kMax, kBand, kBor, kBxor };

const char* reduceName(ReduceKind op);

// Whether `reduceInto` handles this pair (bitwise ops need integer or bool).
bool reduceSupported(c10::ScalarType dtype, ReduceKind op);

void reduceInto(void* acc, const void* in, size_t count, c10::ScalarType dtype, ReduceKind op);

}  // namespace openreg::ccl
