// CpuDevice: host memory and OpenBLAS. The reference every other device is checked against.
#include "core/device/cpu_device.hpp"

#include <cblas.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace shardlab {

void CpuDevice::copy(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0 && dst != src) std::memmove(dst, src, static_cast<size_t>(bytes));
}

void CpuDevice::fill_zero(void* dst, int64_t bytes) {
  if (bytes > 0) std::memset(dst, 0, static_cast<size_t>(bytes));
}

void CpuDevice::gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                     const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void CpuDevice::gemm_batched(bool ta, bool tb, int M, int N, int K, float alpha, const float* A,
                             int lda, int64_t sa, const float* B, int ldb, int64_t sb, float beta,
                             float* C, int ldc, int64_t sc, int batch) {
  for (int i = 0; i < batch; ++i)
    gemm(ta, tb, M, N, K, alpha, A + i * sa, lda, B + i * sb, ldb, beta, C + i * sc, ldc);
}

void* CpuDevice::raw_alloc(int64_t bytes) {
  // 64-byte alignment: whole cache lines, and what AVX-512 loads like.
  size_t n = (static_cast<size_t>(bytes) + 63) & ~size_t{63};
  void* p = std::aligned_alloc(64, n);
  if (!p) SL_THROW(OutOfMemory, "host allocation of ", format_bytes(bytes), " failed");
  return p;
}

void CpuDevice::raw_free(void* p) { std::free(p); }

std::unique_ptr<Device> make_cpu_device(MemoryTracker& tracker) {
  return std::make_unique<CpuDevice>(tracker);
}

void set_blas_threads(int n) { openblas_set_num_threads(n); }

}  // namespace shardlab
