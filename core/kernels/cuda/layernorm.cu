// CUDA launchers of LayerNorm (core/kernels/layernorm.hpp): one thread per row for the row math,
// one thread per column for the weight and bias gradients (a sum over rows, no atomics).
#include "core/kernels/cuda/launch.cuh"
#include "core/kernels/kernel_table.hpp"
#include "core/kernels/layernorm.hpp"

namespace shardlab {
namespace cuda {

namespace {

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* x,
                                         const float* weight, const float* bias, int N, int C) {
  SL_GRID_STRIDE(r, N) {
    const int64_t off = r * C;
    layernorm_forward_row(out + off, mean + r, rstd + r, x + off, weight, bias, C);
  }
}

__global__ void layernorm_backward_dx_kernel(float* dx, const float* dout, const float* x,
                                             const float* weight, const float* mean,
                                             const float* rstd, int N, int C) {
  SL_GRID_STRIDE(r, N) {
    const int64_t off = r * C;
    layernorm_backward_row(dx + off, dout + off, x + off, weight, mean[r], rstd[r], C);
  }
}

__global__ void layernorm_param_grad_kernel(float* dweight, float* dbias, const float* dout,
                                            const float* x, const float* mean, const float* rstd,
                                            int N, int C) {
  SL_GRID_STRIDE(c, C)
    layernorm_param_grad_col(dweight, dbias, dout, x, mean, rstd, N, C, static_cast<int>(c));
}

void layernorm_forward(Device& dev, float* out, float* mean, float* rstd, const float* x,
                       const float* weight, const float* bias, int N, int C) {
  if (N <= 0 || C <= 0) return;
  Launch l(dev);
  layernorm_forward_kernel<<<blocks_for(N), kThreads, 0, l.stream>>>(out, mean, rstd, x, weight,
                                                                     bias, N, C);
  CUDA_CHECK_LAUNCH();
}

void layernorm_backward(Device& dev, float* dx, float* dweight, float* dbias, const float* dout,
                        const float* x, const float* weight, const float* mean, const float* rstd,
                        int N, int C) {
  if (N <= 0 || C <= 0) return;
  Launch l(dev);
  layernorm_backward_dx_kernel<<<blocks_for(N), kThreads, 0, l.stream>>>(dx, dout, x, weight, mean,
                                                                         rstd, N, C);
  CUDA_CHECK_LAUNCH();
  layernorm_param_grad_kernel<<<blocks_for(C), kThreads, 0, l.stream>>>(dweight, dbias, dout, x,
                                                                        mean, rstd, N, C);
  CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace cuda

const LayerNormKernels kCudaLayerNorm = {cuda::layernorm_forward, cuda::layernorm_backward};

}  // namespace shardlab
