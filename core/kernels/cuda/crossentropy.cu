// CUDA launchers of softmax + cross-entropy (core/kernels/crossentropy.hpp): one thread per row
// of V logits. A target outside [0, V) cannot throw on the GPU: its loss becomes NaN (and its
// gradient row NaN), which the trainer's loss check reports.
#include "core/kernels/crossentropy.hpp"
#include "core/kernels/cuda/launch.cuh"
#include "core/kernels/kernel_table.hpp"

namespace shardlab {
namespace cuda {

namespace {

__global__ void crossentropy_forward_kernel(float* probs, float* losses, const int* targets, int N,
                                            int V) {
  SL_GRID_STRIDE(r, N) {
    float* row = probs + r * V;
    if (!targets) {
      crossentropy_forward_row(row, -1, V);
      continue;
    }
    const int target = targets[r];
    const bool valid = target >= 0 && target < V;
    const float loss = crossentropy_forward_row(row, valid ? target : -1, V);
    losses[r] = valid ? loss : __int_as_float(0x7fc00000);  // quiet NaN
  }
}

__global__ void crossentropy_backward_kernel(float* dlogits, const float* probs, const int* targets,
                                             float dloss, int N, int V) {
  SL_GRID_STRIDE(r, N) {
    const int64_t off = r * V;
    const int target = targets[r];
    if (target >= 0 && target < V) {
      crossentropy_backward_row(dlogits + off, probs + off, target, dloss, V);
    } else {
      for (int i = 0; i < V; ++i) dlogits[off + i] = __int_as_float(0x7fc00000);
    }
  }
}

void crossentropy_forward(Device& dev, float* probs, float* losses, const int* targets, int N,
                          int V) {
  if (N <= 0 || V <= 0) return;
  Launch l(dev);
  crossentropy_forward_kernel<<<blocks_for(N), kThreads, 0, l.stream>>>(probs, losses, targets, N,
                                                                        V);
  CUDA_CHECK_LAUNCH();
}

void crossentropy_backward(Device& dev, float* dlogits, const float* probs, const int* targets,
                           float dloss, int N, int V) {
  if (N <= 0 || V <= 0) return;
  Launch l(dev);
  crossentropy_backward_kernel<<<blocks_for(N), kThreads, 0, l.stream>>>(dlogits, probs, targets,
                                                                         dloss, N, V);
  CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace cuda

const CrossEntropyKernels kCudaCrossEntropy = {cuda::crossentropy_forward,
                                               cuda::crossentropy_backward};

}  // namespace shardlab
