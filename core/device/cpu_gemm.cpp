// GEMMs with 16-bit inputs on the CPU (cpu_gemm.hpp): blocks widened to fp32, OpenBLAS sgemm.
#include "core/device/cpu_gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "core/base/error.hpp"
#include "core/device/device.hpp"

namespace shardlab {

// ---- what the CPU has ------------------------------------------------------------------------

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  // __builtin_cpu_supports("avx512bf16") needs GCC 13: CPUID leaf 7 subleaf 1, EAX bit 5, after
  // GCC's own check of AVX512F (which includes the OS saving the ZMM registers).
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__builtin_cpu_supports("avx512f")) return false;
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, 1, a, b, c, d);
  return (a >> 5) & 1u;
#else
  return false;
#endif
}

std::string cpu_gemm_path_name(DType ab) {
  if (ab == DType::f32) return "OpenBLAS sgemm";
  const std::string t = dtype_name(ab);
  const char* why = ab == DType::f16         ? "no f16 GEMM instructions on this CPU"
                    : !cpu_has_avx512_bf16() ? "this CPU has no AVX512_BF16"
                                             : "built without an AVX512_BF16 kernel";
  return t + " widened to fp32, OpenBLAS sgemm (" + why + ")";
}

// ---- widening --------------------------------------------------------------------------------

namespace {

void widen_bf16(float* dst, const uint16_t* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_f32(src[i]);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx,f16c"))) void widen_f16_f16c(float* dst, const uint16_t* src,
                                                        int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = f16_bits_to_f32(src[i]);
}
// CPUID leaf 1 (ECX: OSXSAVE bit 27, AVX 28, F16C 29) and XCR0's SSE and AVX state (bits 1, 2):
// read directly, since clang's __builtin_cpu_supports does not know "f16c".
bool have_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return false;
  const unsigned need = (1u << 27) | (1u << 28) | (1u << 29);
  if ((c & need) != need) return false;
  unsigned lo = 0, hi = 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 6u) == 6u;
}
#else
void widen_f16_f16c(float*, const uint16_t*, int64_t) {}
bool have_f16c() { return false; }
#endif

void widen_f16(float* dst, const uint16_t* src, int64_t n) {
  static const bool f16c = have_f16c();
  if (f16c) return widen_f16_f16c(dst, src, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_bits_to_f32(src[i]);
}

// rows x cols of a row-major matrix of type t at `src` (row stride ld, elements) into dst, rows
// `cols` apart.
void widen_block(float* dst, const void* src, DType t, int64_t ld, int rows, int cols) {
  const int64_t es = static_cast<int64_t>(dtype_size(t));
  for (int r = 0; r < rows; ++r) {
    const char* s = static_cast<const char*>(src) + r * ld * es;
    float* d = dst + static_cast<int64_t>(r) * cols;
    if (t == DType::f32)
      std::memcpy(d, s, static_cast<size_t>(cols) * 4);
    else
      widen_to_f32(d, s, t, cols);
  }
}

void narrow_block(void* dst, DType t, int64_t ld, const float* src, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const float* s = src + static_cast<int64_t>(r) * cols;
    uint16_t* d = static_cast<uint16_t*>(dst) + r * ld;
    if (t == DType::bf16)
      for (int j = 0; j < cols; ++j) d[j] = f32_to_bf16_bits(s[j]);
    else
      for (int j = 0; j < cols; ++j) d[j] = f32_to_f16_bits(s[j]);
  }
}

// Blocks: op(B) panels of kKc x kNc widened once each, op(A) blocks of kMc x kKc widened once per
// panel, one sgemm per pair (each packs its operands again, 1/(2 kMc) and 1/(2 kNc) of its
// arithmetic). At GPT-2's shapes on this project's host this ran within 2-6% of widening
// both operands whole before one sgemm, and 15% faster than panels of 1024 columns (which widen A
// more often); docs/model.md has the figures. Scratch: at most 4.3 MiB per thread (8.3 with a
// 16-bit C), the GEMM's own like OpenBLAS's packing buffers, not the engine's memory.
constexpr int kMc = 256, kNc = 4096, kKc = 256;

// The scratch of the widen path: one per thread (ranks are threads), grown once to its bound.
struct WidenScratch {
  std::vector<float> a, b, c;
};
WidenScratch& widen_scratch() {
  thread_local WidenScratch s;
  return s;
}

}  // namespace

void widen_to_f32(float* dst, const void* src, DType t, int64_t n) {
  if (t == DType::bf16)
    widen_bf16(dst, static_cast<const uint16_t*>(src), n);
  else if (t == DType::f16)
    widen_f16(dst, static_cast<const uint16_t*>(src), n);
  else
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
}

void cpu_gemm_ex(bool ta, bool tb, int M, int N, int K, float alpha, const void* A, int lda,
                 const void* B, int ldb, DType ab, float beta, void* C, int ldc, DType c) {
  check_gemm_ex_dtypes(ab, c);
  if (M <= 0 || N <= 0) return;
  const bool c32 = c == DType::f32;
  if (ab == DType::f32 && c32) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
                K, alpha, static_cast<const float*>(A), lda, static_cast<const float*>(B), ldb,
                beta, static_cast<float*>(C), ldc);
    return;
  }
  if (K <= 0 && c32) {  // C = beta C (0 where beta is 0, whatever C held), as sgemm does it
    for (int m = 0; m < M; ++m) {
      float* row = static_cast<float*>(C) + static_cast<int64_t>(m) * ldc;
      for (int j = 0; j < N; ++j) row[j] = beta == 0.0f ? 0.0f : beta * row[j];
    }
    return;
  }
  WidenScratch& s = widen_scratch();
  s.a.resize(static_cast<size_t>(kMc) * kKc);
  s.b.resize(static_cast<size_t>(kKc) * kNc);
  const int64_t ea = static_cast<int64_t>(dtype_size(ab));
  const char* a = static_cast<const char*>(A);
  const char* b = static_cast<const char*>(B);
  // op(A)[m0:m0+mc, k0:k0+kc] and op(B)[k0:k0+kc, n0:n0+nc] as stored (rows of A or A^T's
  // storage, of B or B^T's), widened into the scratch.
  auto widen_a = [&](int m0, int mc, int k0, int kc) {
    if (!ta)
      widen_block(s.a.data(), a + (static_cast<int64_t>(m0) * lda + k0) * ea, ab, lda, mc, kc);
    else
      widen_block(s.a.data(), a + (static_cast<int64_t>(k0) * lda + m0) * ea, ab, lda, kc, mc);
  };
  auto widen_b = [&](int k0, int kc, int n0, int nc) {
    if (!tb)
      widen_block(s.b.data(), b + (static_cast<int64_t>(k0) * ldb + n0) * ea, ab, ldb, kc, nc);
    else
      widen_block(s.b.data(), b + (static_cast<int64_t>(n0) * ldb + k0) * ea, ab, ldb, nc, kc);
  };
  auto sgemm = [&](int mc, int nc, int kc, float beta_, float* cb, int ldcb) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, mc,
                nc, kc, alpha, s.a.data(), ta ? mc : kc, s.b.data(), tb ? kc : nc, beta_, cb, ldcb);
  };
  if (c32) {  // C accumulates the panels in place: each B panel widened once
    float* c = static_cast<float*>(C);
    for (int n0 = 0; n0 < N; n0 += kNc) {
      const int nc = std::min(kNc, N - n0);
      for (int k0 = 0; k0 < K; k0 += kKc) {
        const int kc = std::min(kKc, K - k0);
        widen_b(k0, kc, n0, nc);
        for (int m0 = 0; m0 < M; m0 += kMc) {
          const int mc = std::min(kMc, M - m0);
          widen_a(m0, mc, k0, kc);
          sgemm(mc, nc, kc, k0 == 0 ? beta : 1.0f, c + static_cast<int64_t>(m0) * ldc + n0, ldc);
        }
      }
    }
    return;
  }
  // A 16-bit C: each (m, n) block summed in fp32 over all of K, then rounded once.
  s.c.resize(static_cast<size_t>(kMc) * kNc);
  for (int n0 = 0; n0 < N; n0 += kNc) {
    const int nc = std::min(kNc, N - n0);
    for (int m0 = 0; m0 < M; m0 += kMc) {
      const int mc = std::min(kMc, M - m0);
      void* cblock = static_cast<char*>(C) + (static_cast<int64_t>(m0) * ldc + n0) * 2;
      float* cb = s.c.data();
      if (beta != 0.0f) widen_block(cb, cblock, c, ldc, mc, nc);
      if (K <= 0)
        for (int64_t i = 0; i < static_cast<int64_t>(mc) * nc; ++i)
          cb[i] = beta == 0.0f ? 0.0f : beta * cb[i];
      for (int k0 = 0; k0 < K; k0 += kKc) {
        const int kc = std::min(kKc, K - k0);
        widen_a(m0, mc, k0, kc);
        widen_b(k0, kc, n0, nc);
        sgemm(mc, nc, kc, k0 == 0 ? beta : 1.0f, cb, nc);
      }
      narrow_block(cblock, c, ldc, cb, mc, nc);
    }
  }
}

}  // namespace shardlab
