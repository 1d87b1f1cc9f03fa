// The abort path of CUDA_CHECK / CUBLAS_CHECK, and the current-device guard.
#include "core/device/cuda/cuda_check.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/base/error.hpp"

namespace shardlab {

namespace detail {

void cuda_abort(const char* api, const char* call, const char* what, const char* file, int line) {
  std::string msg = rank_prefix() + api + " error: " + call + " failed: " + what + " (" +
                    short_file(file) + ":" + std::to_string(line) + ")";
  std::fprintf(stderr, "shardlab: %s\n", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

void cuda_check_result(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) return;
  std::string what = std::string(cudaGetErrorString(e)) + " (" + cudaGetErrorName(e) + ", " +
                     std::to_string(static_cast<int>(e)) + ")";
  cuda_abort("CUDA", call, what.c_str(), file, line);
}

const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

void cublas_check_result(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  cuda_abort("cuBLAS", call, cublas_status_name(s), file, line);
}

}  // namespace detail

CudaDeviceGuard::CudaDeviceGuard(int ordinal) : ordinal_(ordinal) {
  CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != ordinal_) CUDA_CHECK(cudaSetDevice(ordinal_));
}

CudaDeviceGuard::~CudaDeviceGuard() {
  if (previous_ >= 0 && previous_ != ordinal_) cudaSetDevice(previous_);
}

}  // namespace shardlab
