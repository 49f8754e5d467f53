#include "Copy.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "Config.h"

namespace openreg::ccl {
namespace {

#if defined(__SSE2__)
void streamingCopy(char* dst, const char* src, size_t n) {
  // Streaming stores need a 16-byte aligned destination: memcpy the head.
  const size_t head = std::min(n, (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16);
  std::memcpy(dst, src, head);
  dst += head, src += head, n -= head;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  std::memcpy(dst + i, src + i, n - i);
  // Streaming stores are weakly ordered: make them visible before whatever
  // publishes the copy (a release store of a counter) can be seen.
  _mm_sfence();
}
#else
void streamingCopy(char* dst, const char* src, size_t n) { std::memcpy(dst, src, n); }
#endif

}  // namespace

void copyMessage(void* dst, const void* src, size_t n, size_t messageBytes) {
  const size_t threshold = config().streamingCopyBytes;
  if (threshold && messageBytes >= threshold)
    streamingCopy(static_cast<char*>(dst), static_cast<const char*>(src), n);
  else
    std::memcpy(dst, src, n);
}

}  // namespace openreg::ccl
