// CUDA launchers of the rotary position embedding (core/kernels/rope.hpp): one thread per table
// row, one thread per (row, head) for the rotations.
#include "core/kernels/cuda/launch.cuh"
#include "core/kernels/kernel_table.hpp"
#include "core/kernels/rope.hpp"

namespace shardlab {
namespace cuda {

namespace {

__global__ void rope_table_kernel(float* cos_sin, int T, int hs, RopeParams p) {
  SL_GRID_STRIDE(t, T) rope_table_row(cos_sin + t * hs, static_cast<int>(t), hs, p);
}

// Item k is head k % n_heads of row k / n_heads; row r is position r % T.
__global__ void rope_forward_kernel(float* x, const float* cos_sin, int64_t items, int T,
                                    int n_heads, int hs, int64_t ld) {
  SL_GRID_STRIDE(k, items) {
    const int64_t r = k / n_heads;
    rope_forward_head(x + r * ld + (k % n_heads) * hs, cos_sin + (r % T) * hs, hs);
  }
}

__global__ void rope_backward_kernel(float* dx, const float* cos_sin, int64_t items, int T,
                                     int n_heads, int hs, int64_t ld) {
  SL_GRID_STRIDE(k, items) {
    const int64_t r = k / n_heads;
    rope_backward_head(dx + r * ld + (k % n_heads) * hs, cos_sin + (r % T) * hs, hs);
  }
}

void rope_table(Device& dev, float* cos_sin, int T, int hs, const RopeParams& p) {
  if (T <= 0) return;
  Launch l(dev);
  rope_table_kernel<<<blocks_for(T), kThreads, 0, l.stream>>>(cos_sin, T, hs, p);
  CUDA_CHECK_LAUNCH();
}

void rope_forward(Device& dev, float* x, const float* cos_sin, int B, int T, int n_heads, int hs,
                  int64_t ld) {
  const int64_t items = static_cast<int64_t>(B) * T * n_heads;
  if (items <= 0) return;
  Launch l(dev);
  rope_forward_kernel<<<blocks_for(items), kThreads, 0, l.stream>>>(x, cos_sin, items, T, n_heads,
                                                                    hs, ld);
  CUDA_CHECK_LAUNCH();
}

void rope_backward(Device& dev, float* dx, const float* cos_sin, int B, int T, int n_heads, int hs,
                   int64_t ld) {
  const int64_t items = static_cast<int64_t>(B) * T * n_heads;
  if (items <= 0) return;
  Launch l(dev);
  rope_backward_kernel<<<blocks_for(items), kThreads, 0, l.stream>>>(dx, cos_sin, items, T, n_heads,
                                                                     hs, ld);
  CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace cuda

const RopeKernels kCudaRope = {cuda::rope_table, cuda::rope_forward, cuda::rope_backward};

}  // namespace shardlab
