// CUDA launchers of the causal attention softmax (core/kernels/attention.hpp): one thread per
// (head, query) row of T scores. The QK^T and PV products are gemm_batched calls on cuBLAS.
#include "core/kernels/attention.hpp"
#include "core/kernels/cuda/launch.cuh"
#include "core/kernels/kernel_table.hpp"

namespace shardlab {
namespace cuda {

namespace {

__global__ void softmax_forward_kernel(float* att, int64_t rows, int T) {
  SL_GRID_STRIDE(r, rows) attention_softmax_row(att + r * T, static_cast<int>(r % T), T);
}

__global__ void softmax_backward_kernel(float* dpre, const float* att, const float* datt,
                                        int64_t rows, int T) {
  SL_GRID_STRIDE(r, rows) {
    const int64_t off = r * T;
    attention_softmax_backward_row(dpre + off, att + off, datt + off, static_cast<int>(r % T), T);
  }
}

void attention_softmax_forward(Device& dev, float* att, int BH, int T) {
  const int64_t rows = static_cast<int64_t>(BH) * T;
  if (rows <= 0) return;
  Launch l(dev);
  softmax_forward_kernel<<<blocks_for(rows), kThreads, 0, l.stream>>>(att, rows, T);
  CUDA_CHECK_LAUNCH();
}

void attention_softmax_backward(Device& dev, float* dpre, const float* att, const float* datt,
                                int BH, int T) {
  const int64_t rows = static_cast<int64_t>(BH) * T;
  if (rows <= 0) return;
  Launch l(dev);
  softmax_backward_kernel<<<blocks_for(rows), kThreads, 0, l.stream>>>(dpre, att, datt, rows, T);
  CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace cuda

const AttentionKernels kCudaAttention = {cuda::attention_softmax_forward,
                                         cuda::attention_softmax_backward,
                                         [](const Device&) { return 0; }};

}  // namespace shardlab
