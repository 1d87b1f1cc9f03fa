// The vector width of the CPU loops, chosen at run time. The build targets baseline x86-64 (SSE2,
// 4 floats per instruction) so that one binary runs anywhere; the kernels' hot loops (GELU,
// LayerNorm, the attention softmax, residual and bias) are compiled three times, for SSE2, AVX2 and
// AVX-512F, from the same source, and each call takes the widest the CPU has. The local backend's
// rank-order reduction (comm/reduce.cpp) follows the same level with its SSE2 and AVX loops.
//
// The levels give the same bits. The kernels are compiled with -ffp-contract=off, so AVX2 and
// AVX-512 round every operation as the baseline build (which has no FMA) does, and element-wise
// loops do the same IEEE operations in any width. Reductions (row sums, dot products, maxima)
// keep kCpuLanes = 16 partial results in a fixed order whatever the width, and combine them by a
// fixed tree: a row's sum is one value on every CPU, run to run.
//
// SHARDLAB_CPU_SIMD=baseline|avx2|avx512 picks the level for a process (to compare them in one
// binary); a level the CPU lacks, or another word, is an error naming the variable.
#pragma once

namespace shardlab {

enum class CpuSimd { baseline = 0, avx2 = 1, avx512 = 2 };

const char* cpu_simd_name(CpuSimd level);
// The widest level this CPU (and its OS) runs.
CpuSimd cpu_simd_supported();
// The level the kernels run at now: a ScopedCpuSimd's, else SHARDLAB_CPU_SIMD's, else the widest.
// Throws InvalidArgument for a bad SHARDLAB_CPU_SIMD.
CpuSimd cpu_simd();

// Runs the kernels at `level` while it lives (tests comparing the levels); throws InvalidArgument
// if the CPU lacks it. Not for concurrent use with kernels on other threads.
class ScopedCpuSimd {
 public:
  explicit ScopedCpuSimd(CpuSimd level);
  ~ScopedCpuSimd();
  ScopedCpuSimd(const ScopedCpuSimd&) = delete;
  ScopedCpuSimd& operator=(const ScopedCpuSimd&) = delete;

 private:
  int previous_;
};

// ---- for the kernel sources ----------------------------------------------------------------

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SL_CPU_SIMD_DISPATCH 1
#define SL_CPU_INLINE inline __attribute__((always_inline))
#else
#define SL_CPU_SIMD_DISPATCH 0
#define SL_CPU_INLINE inline
#endif

// SL_CPU_SIMD_KERNEL(name, (params), (args)), in an anonymous namespace, defines `void
// name(params)` that runs `name##_body(args)` (an SL_CPU_INLINE function defined before it)
// compiled for the level cpu_simd() returns. The body is inlined into each copy, which the compiler
// vectorises for that copy's instruction set.
#if SL_CPU_SIMD_DISPATCH
#define SL_CPU_SIMD_KERNEL(name, params, args)                                       \
  __attribute__((target("avx512f"))) void name##_avx512 params { name##_body args; } \
  __attribute__((target("avx2"))) void name##_avx2 params { name##_body args; }      \
  void name##_baseline params { name##_body args; }                                  \
  void name params {                                                                 \
    switch (cpu_simd()) {                                                            \
      case CpuSimd::avx512: return name##_avx512 args;                               \
      case CpuSimd::avx2: return name##_avx2 args;                                   \
      default: return name##_baseline args;                                          \
    }                                                                                \
  }
#else
#define SL_CPU_SIMD_KERNEL(name, params, args) \
  void name params { name##_body args; }
#endif

// Row reductions in kCpuLanes partial results: element i goes to lane i % kCpuLanes, each lane
// adds in index order, and the lanes are combined pairwise (l + 8, + 4, + 2, + 1). The same
// order at every vector width; short rows simply leave lanes at their start value.
inline constexpr int kCpuLanes = 16;

SL_CPU_INLINE float lanes_combine_sum(float* acc) {
  for (int w = kCpuLanes / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}

// sum over i < n of term(i).
template <class Term>
SL_CPU_INLINE float lanes_sum(int n, Term term) {
  float acc[kCpuLanes] = {};
  int i = 0;
  for (; i + kCpuLanes <= n; i += kCpuLanes)
    for (int l = 0; l < kCpuLanes; ++l) acc[l] += term(i + l);
  for (int l = 0; i + l < n; ++l) acc[l] += term(i + l);
  return lanes_combine_sum(acc);
}

// max over i < n (n >= 1) of x[i], as the loop `m = x[i] > m ? x[i] : m` from m = x[0]: exact,
// so the order does not change the value; a NaN is kept only where x[0] is one.
SL_CPU_INLINE float lanes_max(const float* x, int n) {
  float acc[kCpuLanes];
  for (int l = 0; l < kCpuLanes; ++l) acc[l] = x[0];
  int i = 0;
  for (; i + kCpuLanes <= n; i += kCpuLanes)
    for (int l = 0; l < kCpuLanes; ++l) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
  for (int l = 0; i + l < n; ++l) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
  for (int w = kCpuLanes / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] = acc[l + w] > acc[l] ? acc[l + w] : acc[l];
  return acc[0];
}

}  // namespace shardlab
