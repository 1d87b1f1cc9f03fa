// Rank-order reduction in f32 with one final rounding. f32 sums 16 elements at a time in four SSE
// registers, or 32 in four AVX registers where the CPU's vector level (core/base/cpu_simd.hpp,
// chosen at run time: the build targets baseline x86-64) is AVX2 or wider, in one pass over the
// sources with no accumulator in memory; bf16 and f16 convert a tile of elements to f32 on the
// stack. Per element the order is always src[0] + src[1] + ... + src[n-1], then / n for avg: the
// same bits whatever the tile, the vector width or the thread (IEEE single-precision adds and
// divides, lane by lane, no fused operations).
#include "core/comm/reduce.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/base/cpu_simd.hpp"
#include "core/base/error.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if SL_CPU_SIMD_DISPATCH
#include <immintrin.h>
#endif

namespace shardlab {

namespace {

// One element of f32: the scalar form of the vector loop (heads and tails).
inline void reduce_one_f32(const float* const* src, int n, float* const* dst, int ndst, int64_t i,
                           bool avg, float fn) {
  float a = src[0][i];
  for (int j = 1; j < n; ++j) a += src[j][i];
  if (avg) a = a / fn;  // a division, as the contract says
  for (int k = 0; k < ndst; ++k) dst[k][i] = a;
}

void reduce_f32_sse(const float* const* src, int n, float* const* dst, int ndst, int64_t len,
                    bool avg, bool stream) {
  const float fn = static_cast<float>(n);
  int64_t i = 0;
#if defined(__SSE2__)
  // Non-temporal stores need 16-byte aligned destinations: peel elements until dst[0] is aligned,
  // and stream only when every destination then is.
  if (stream) {
    while (i < len && (reinterpret_cast<uintptr_t>(dst[0] + i) & 15) != 0)
      reduce_one_f32(src, n, dst, ndst, i++, avg, fn);
    for (int k = 1; k < ndst; ++k)
      stream = stream && (reinterpret_cast<uintptr_t>(dst[k] + i) & 15) == 0;
  }
  const __m128 vn = _mm_set1_ps(fn);
  for (; i + 16 <= len; i += 16) {
    __m128 a0 = _mm_loadu_ps(src[0] + i);
    __m128 a1 = _mm_loadu_ps(src[0] + i + 4);
    __m128 a2 = _mm_loadu_ps(src[0] + i + 8);
    __m128 a3 = _mm_loadu_ps(src[0] + i + 12);
    for (int j = 1; j < n; ++j) {
      const float* s = src[j] + i;
      a0 = _mm_add_ps(a0, _mm_loadu_ps(s));
      a1 = _mm_add_ps(a1, _mm_loadu_ps(s + 4));
      a2 = _mm_add_ps(a2, _mm_loadu_ps(s + 8));
      a3 = _mm_add_ps(a3, _mm_loadu_ps(s + 12));
    }
    if (avg) {
      a0 = _mm_div_ps(a0, vn);
      a1 = _mm_div_ps(a1, vn);
      a2 = _mm_div_ps(a2, vn);
      a3 = _mm_div_ps(a3, vn);
    }
    for (int k = 0; k < ndst; ++k) {
      float* d = dst[k] + i;
      if (stream) {
        _mm_stream_ps(d, a0);
        _mm_stream_ps(d + 4, a1);
        _mm_stream_ps(d + 8, a2);
        _mm_stream_ps(d + 12, a3);
      } else {
        _mm_storeu_ps(d, a0);
        _mm_storeu_ps(d + 4, a1);
        _mm_storeu_ps(d + 8, a2);
        _mm_storeu_ps(d + 12, a3);
      }
    }
  }
  // Streamed stores are weakly ordered: make them visible before the caller's barrier releases
  // the other ranks to read them.
  if (stream) _mm_sfence();
#else
  (void)stream;
#endif
  for (; i < len; ++i) reduce_one_f32(src, n, dst, ndst, i, avg, fn);
}

#if SL_CPU_SIMD_DISPATCH
// The SSE loop at twice the width: 32 elements in four 256-bit registers, streamed stores from a
// 32-byte aligned destination. Compiled for AVX whatever the build's flags. It is a second copy of
// the loop because the intrinsics need it: the loop written once in GCC's generic vectors, or as
// plain arrays for each copy to vectorise, kept its sums on the stack and ran at 0.5 to 0.7 of
// these two on cache-resident buffers. Against the SSE loop (one thread calling reduce_rank_order
// on 2 sources, 2026-11-23): 1.13-1.30x from 64 KiB to 1 MiB, the size of a unit's gradient, and
// the same from 16 MiB up. SHARDLAB_CPU_SIMD=baseline runs the SSE loop, to compare them.
__attribute__((target("avx"))) void reduce_f32_avx(const float* const* src, int n,
                                                   float* const* dst, int ndst, int64_t len,
                                                   bool avg, bool stream) {
  const float fn = static_cast<float>(n);
  int64_t i = 0;
  if (stream) {
    while (i < len && (reinterpret_cast<uintptr_t>(dst[0] + i) & 31) != 0)
      reduce_one_f32(src, n, dst, ndst, i++, avg, fn);
    for (int k = 1; k < ndst; ++k)
      stream = stream && (reinterpret_cast<uintptr_t>(dst[k] + i) & 31) == 0;
  }
  const __m256 vn = _mm256_set1_ps(fn);
  for (; i + 32 <= len; i += 32) {
    __m256 a0 = _mm256_loadu_ps(src[0] + i);
    __m256 a1 = _mm256_loadu_ps(src[0] + i + 8);
    __m256 a2 = _mm256_loadu_ps(src[0] + i + 16);
    __m256 a3 = _mm256_loadu_ps(src[0] + i + 24);
    for (int j = 1; j < n; ++j) {
      const float* s = src[j] + i;
      a0 = _mm256_add_ps(a0, _mm256_loadu_ps(s));
      a1 = _mm256_add_ps(a1, _mm256_loadu_ps(s + 8));
      a2 = _mm256_add_ps(a2, _mm256_loadu_ps(s + 16));
      a3 = _mm256_add_ps(a3, _mm256_loadu_ps(s + 24));
    }
    if (avg) {
      a0 = _mm256_div_ps(a0, vn);
      a1 = _mm256_div_ps(a1, vn);
      a2 = _mm256_div_ps(a2, vn);
      a3 = _mm256_div_ps(a3, vn);
    }
    for (int k = 0; k < ndst; ++k) {
      float* d = dst[k] + i;
      if (stream) {
        _mm256_stream_ps(d, a0);
        _mm256_stream_ps(d + 8, a1);
        _mm256_stream_ps(d + 16, a2);
        _mm256_stream_ps(d + 24, a3);
      } else {
        _mm256_storeu_ps(d, a0);
        _mm256_storeu_ps(d + 8, a1);
        _mm256_storeu_ps(d + 16, a2);
        _mm256_storeu_ps(d + 24, a3);
      }
    }
  }
  if (stream) _mm_sfence();  // as in the SSE loop
  _mm256_zeroupper();
  for (; i < len; ++i) reduce_one_f32(src, n, dst, ndst, i, avg, fn);
}

#endif

inline float load_half(DType t, const uint16_t* p, int64_t i) {
  return t == DType::bf16 ? bf16_bits_to_f32(p[i]) : f16_bits_to_f32(p[i]);
}

// bf16 and f16: a tile converted to f32 on the stack, summed, rounded once per destination.
void reduce_half(const void* const* src, int n, void* const* dst, int ndst, int64_t len, DType t,
                 bool avg) {
  constexpr int64_t kTile = 64;
  const float fn = static_cast<float>(n);
  float acc[kTile];
  uint16_t out[kTile];
  for (int64_t b = 0; b < len; b += kTile) {
    const int64_t m = std::min(kTile, len - b);
    const uint16_t* s0 = static_cast<const uint16_t*>(src[0]) + b;
    for (int64_t i = 0; i < m; ++i) acc[i] = load_half(t, s0, i);
    for (int j = 1; j < n; ++j) {
      const uint16_t* s = static_cast<const uint16_t*>(src[j]) + b;
      for (int64_t i = 0; i < m; ++i) acc[i] += load_half(t, s, i);
    }
    if (avg)
      for (int64_t i = 0; i < m; ++i) acc[i] = acc[i] / fn;
    if (t == DType::bf16) {
      for (int64_t i = 0; i < m; ++i) out[i] = f32_to_bf16_bits(acc[i]);
    } else {
      for (int64_t i = 0; i < m; ++i) out[i] = f32_to_f16_bits(acc[i]);
    }
    for (int k = 0; k < ndst; ++k)
      std::memcpy(static_cast<uint16_t*>(dst[k]) + b, out, static_cast<size_t>(m) * 2);
  }
}

}  // namespace

void reduce_rank_order(const void* const* src, int n, void* const* dst, int ndst, int64_t len,
                       DType t, ReduceOp op, bool stream) {
  if (len <= 0) return;
  const bool avg = op == ReduceOp::avg;
  if (t != DType::f32) {
    reduce_half(src, n, dst, ndst, len, t, avg);
    return;
  }
  const auto* s = reinterpret_cast<const float* const*>(src);
  auto* d = reinterpret_cast<float* const*>(dst);
#if SL_CPU_SIMD_DISPATCH
  if (cpu_simd() != CpuSimd::baseline) {
    reduce_f32_avx(s, n, d, ndst, len, avg, stream);
    return;
  }
#endif
  reduce_f32_sse(s, n, d, ndst, len, avg, stream);
}

}  // namespace shardlab
