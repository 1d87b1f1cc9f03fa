// CudaDevice's GEMMs on cuBLAS. cuBLAS is column-major; a row-major matrix X with row stride ld is
// the column-major X^T with the same ld, so the row-major C = op(A) op(B) is computed as the
// column-major C^T = op(B)^T op(A)^T: swap the operands and M with N, keep the transposes.
#include "core/device/cuda/cuda_device.hpp"

namespace shardlab {

namespace {

cublasOperation_t op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

cudaDataType cuda_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    default: return CUDA_R_16F;
  }
}

}  // namespace

void CudaDevice::gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                      const float* B, int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  CudaDeviceGuard guard(ordinal_);
  CUBLAS_CHECK(
      cublasSgemm(cublas_, op(tb), op(ta), N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc));
}

void CudaDevice::gemm_batched(bool ta, bool tb, int M, int N, int K, float alpha, const float* A,
                              int lda, int64_t sa, const float* B, int ldb, int64_t sb, float beta,
                              float* C, int ldc, int64_t sc, int batch) {
  if (M <= 0 || N <= 0 || batch <= 0) return;
  CudaDeviceGuard guard(ordinal_);
  CUBLAS_CHECK(cublasSgemmStridedBatched(cublas_, op(tb), op(ta), N, M, K, &alpha, B, ldb, sb, A,
                                         lda, sa, &beta, C, ldc, sc, batch));
}

void CudaDevice::gemm_ex(bool ta, bool tb, int M, int N, int K, float alpha, const void* A, int lda,
                         const void* B, int ldb, DType ab, float beta, void* C, int ldc, DType c) {
  check_gemm_ex_dtypes(ab, c);
  if (M <= 0 || N <= 0) return;
  CudaDeviceGuard guard(ordinal_);
  CUBLAS_CHECK(cublasGemmEx(cublas_, op(tb), op(ta), N, M, K, &alpha, B, cuda_type(ab), ldb, A,
                            cuda_type(ab), lda, &beta, C, cuda_type(c), ldc, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
}

void CudaDevice::gemm_ex_batched(bool ta, bool tb, int M, int N, int K, float alpha, const void* A,
                                 int lda, int64_t sa, const void* B, int ldb, int64_t sb, DType ab,
                                 float beta, void* C, int ldc, int64_t sc, DType c, int batch) {
  check_gemm_ex_dtypes(ab, c);
  if (M <= 0 || N <= 0 || batch <= 0) return;
  CudaDeviceGuard guard(ordinal_);
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      cublas_, op(tb), op(ta), N, M, K, &alpha, B, cuda_type(ab), ldb, sb, A, cuda_type(ab), lda,
      sa, &beta, C, cuda_type(c), ldc, sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

std::string CudaDevice::gemm_path(DType ab) const {
  return ab == DType::f32
             ? std::string("cuBLAS sgemm")
             : std::string("cuBLAS GemmEx, ") + dtype_name(ab) + " inputs, CUBLAS_COMPUTE_32F";
}

}  // namespace shardlab
