// CUDA launchers of the residual family (core/kernels/residual.hpp): residual add and bias
// broadcast one thread per element, the bias gradient one thread per column.
#include "core/kernels/cuda/launch.cuh"
#include "core/kernels/kernel_table.hpp"
#include "core/kernels/residual.hpp"

namespace shardlab {
namespace cuda {

namespace {

__global__ void residual_kernel(float* out, const float* a, const float* b, int64_t n) {
  SL_GRID_STRIDE(i, n) out[i] = residual_elem(a[i], b[i]);
}

__global__ void bias_broadcast_kernel(float* out, const float* bias, int64_t n, int OC,
                                      bool accumulate) {
  SL_GRID_STRIDE(i, n) {
    const float b = bias[i % OC];
    out[i] = accumulate ? residual_elem(out[i], b) : b;
  }
}

// Adjacent threads read adjacent columns of a row: coalesced.
__global__ void bias_backward_kernel(float* dbias, const float* dout, int N, int OC) {
  SL_GRID_STRIDE(o, OC) bias_grad_col(dbias, dout, N, OC, static_cast<int>(o));
}

void residual_forward(Device& dev, float* out, const float* a, const float* b, int64_t n) {
  if (n <= 0) return;
  Launch l(dev);
  residual_kernel<<<blocks_for(n), kThreads, 0, l.stream>>>(out, a, b, n);
  CUDA_CHECK_LAUNCH();
}

void bias_broadcast(Device& dev, float* out, const float* bias, int N, int OC, bool accumulate) {
  const int64_t n = static_cast<int64_t>(N) * OC;
  if (n <= 0) return;
  Launch l(dev);
  bias_broadcast_kernel<<<blocks_for(n), kThreads, 0, l.stream>>>(out, bias, n, OC, accumulate);
  CUDA_CHECK_LAUNCH();
}

void bias_backward(Device& dev, float* dbias, const float* dout, int N, int OC) {
  if (N <= 0 || OC <= 0) return;
  Launch l(dev);
  bias_backward_kernel<<<blocks_for(OC), kThreads, 0, l.stream>>>(dbias, dout, N, OC);
  CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace cuda

const ResidualKernels kCudaResidual = {cuda::residual_forward, cuda::bias_broadcast,
                                       cuda::bias_backward};

}  // namespace shardlab
