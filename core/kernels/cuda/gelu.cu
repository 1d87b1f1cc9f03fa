// CUDA launchers of GELU (core/kernels/gelu.hpp): one thread per element.
#include "core/kernels/cuda/launch.cuh"
#include "core/kernels/gelu.hpp"
#include "core/kernels/kernel_table.hpp"

namespace shardlab {
namespace cuda {

namespace {

__global__ void gelu_forward_kernel(float* out, const float* x, int64_t n) {
  SL_GRID_STRIDE(i, n) out[i] = gelu_forward_elem(x[i]);
}

// dx may alias dout: each thread reads its element before writing it.
__global__ void gelu_backward_kernel(float* dx, const float* x, const float* dout, int64_t n) {
  SL_GRID_STRIDE(i, n) dx[i] = gelu_backward_elem(x[i], dout[i]);
}

void gelu_forward(Device& dev, float* out, const float* x, int64_t n) {
  if (n <= 0) return;
  Launch l(dev);
  gelu_forward_kernel<<<blocks_for(n), kThreads, 0, l.stream>>>(out, x, n);
  CUDA_CHECK_LAUNCH();
}

void gelu_backward(Device& dev, float* dx, const float* x, const float* dout, int64_t n) {
  if (n <= 0) return;
  Launch l(dev);
  gelu_backward_kernel<<<blocks_for(n), kThreads, 0, l.stream>>>(dx, x, dout, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace cuda

const GeluKernels kCudaGelu = {cuda::gelu_forward, cuda::gelu_backward};

}  // namespace shardlab
