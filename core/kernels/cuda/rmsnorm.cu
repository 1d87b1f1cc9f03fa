// CUDA launchers of RMSNorm (core/kernels/rmsnorm.hpp): one thread per row for the row math, one
// thread per column for the weight gradient (a sum over rows, no atomics).
#include "core/kernels/cuda/launch.cuh"
#include "core/kernels/kernel_table.hpp"
#include "core/kernels/rmsnorm.hpp"

namespace shardlab {
namespace cuda {

namespace {

__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* x, const float* weight,
                                       int N, int C, float eps) {
  SL_GRID_STRIDE(r, N) {
    const int64_t off = r * C;
    rmsnorm_forward_row(out + off, rstd + r, x + off, weight, C, eps);
  }
}

__global__ void rmsnorm_backward_dx_kernel(float* dx, const float* dout, const float* x,
                                           const float* weight, const float* rstd, int N, int C) {
  SL_GRID_STRIDE(r, N) {
    const int64_t off = r * C;
    rmsnorm_backward_row(dx + off, dout + off, x + off, weight, rstd[r], C);
  }
}

__global__ void rmsnorm_weight_grad_kernel(float* dweight, const float* dout, const float* x,
                                           const float* rstd, int N, int C) {
  SL_GRID_STRIDE(c, C) rmsnorm_weight_grad_col(dweight, dout, x, rstd, N, C, static_cast<int>(c));
}

void rmsnorm_forward(Device& dev, float* out, float* rstd, const float* x, const float* weight,
                     int N, int C, float eps) {
  if (N <= 0 || C <= 0) return;
  Launch l(dev);
  rmsnorm_forward_kernel<<<blocks_for(N), kThreads, 0, l.stream>>>(out, rstd, x, weight, N, C, eps);
  CUDA_CHECK_LAUNCH();
}

void rmsnorm_backward(Device& dev, float* dx, float* dweight, const float* dout, const float* x,
                      const float* weight, const float* rstd, int N, int C) {
  if (N <= 0 || C <= 0) return;
  Launch l(dev);
  rmsnorm_backward_dx_kernel<<<blocks_for(N), kThreads, 0, l.stream>>>(dx, dout, x, weight, rstd, N,
                                                                       C);
  CUDA_CHECK_LAUNCH();
  rmsnorm_weight_grad_kernel<<<blocks_for(C), kThreads, 0, l.stream>>>(dweight, dout, x, rstd, N,
                                                                       C);
  CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace cuda

const RmsNormKernels kCudaRmsNorm = {cuda::rmsnorm_forward, cuda::rmsnorm_backward};

}  // namespace shardlab
