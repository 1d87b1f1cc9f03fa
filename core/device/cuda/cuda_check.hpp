// CUDA_CHECK and CUBLAS_CHECK: an unrecoverable CUDA runtime or cuBLAS failure aborts the process
// with the failing call's text, the error's name, file:line and the rank of the calling thread.
// Recoverable conditions (no device, out of memory) are tested for explicitly and thrown instead.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace shardlab::detail {

// Prints "rank R: CUDA error: <call> failed: <what> (file:line)" to stderr and aborts.
[[noreturn]] void cuda_abort(const char* api, const char* call, const char* what, const char* file,
                             int line);
void cuda_check_result(cudaError_t e, const char* call, const char* file, int line);
void cublas_check_result(cublasStatus_t s, const char* call, const char* file, int line);
const char* cublas_status_name(cublasStatus_t s);

}  // namespace shardlab::detail

namespace shardlab {

// Makes `ordinal` the calling thread's current GPU for a scope and restores the previous one:
// a rank's calls may come from any thread, and CUDA's current device is per thread.
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int ordinal);
  ~CudaDeviceGuard();
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = -1;
  int ordinal_;
};

}  // namespace shardlab

#define CUDA_CHECK(call) ::shardlab::detail::cuda_check_result((call), #call, __FILE__, __LINE__)
#define CUBLAS_CHECK(call) \
  ::shardlab::detail::cublas_check_result((call), #call, __FILE__, __LINE__)
// After a kernel launch: catches bad launch configurations at the launch site, not later.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
