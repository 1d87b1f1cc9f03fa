// CUDA launchers of SwiGLU (core/kernels/swiglu.hpp): one thread per output element.
#include "core/kernels/cuda/launch.cuh"
#include "core/kernels/kernel_table.hpp"
#include "core/kernels/swiglu.hpp"

namespace shardlab {
namespace cuda {

namespace {

// Element k is column k % F of row k / F; the row's gate and up sit 2F apart from the next's.
__global__ void swiglu_forward_kernel(float* out, const float* gate_up, int64_t n, int F) {
  SL_GRID_STRIDE(k, n) {
    const int64_t g = (k / F) * 2 * F + k % F;
    out[k] = swiglu_forward_elem(gate_up[g], gate_up[g + F]);
  }
}

__global__ void swiglu_backward_kernel(float* dgate_up, const float* dout, const float* gate_up,
                                       int64_t n, int F) {
  SL_GRID_STRIDE(k, n) {
    const int64_t g = (k / F) * 2 * F + k % F;
    swiglu_backward_elem(dgate_up + g, dgate_up + g + F, gate_up[g], gate_up[g + F], dout[k]);
  }
}

void swiglu_forward(Device& dev, float* out, const float* gate_up, int N, int F) {
  const int64_t n = static_cast<int64_t>(N) * F;
  if (n <= 0) return;
  Launch l(dev);
  swiglu_forward_kernel<<<blocks_for(n), kThreads, 0, l.stream>>>(out, gate_up, n, F);
  CUDA_CHECK_LAUNCH();
}

void swiglu_backward(Device& dev, float* dgate_up, const float* dout, const float* gate_up, int N,
                     int F) {
  const int64_t n = static_cast<int64_t>(N) * F;
  if (n <= 0) return;
  Launch l(dev);
  swiglu_backward_kernel<<<blocks_for(n), kThreads, 0, l.stream>>>(dgate_up, dout, gate_up, n, F);
  CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace cuda

const SwiGluKernels kCudaSwiGlu = {cuda::swiglu_forward, cuda::swiglu_backward};

}  // namespace shardlab
