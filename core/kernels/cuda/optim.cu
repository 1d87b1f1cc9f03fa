// CUDA launchers of the optimizer updates (core/kernels/optim.hpp): one thread per element of the
// rank's flat shard, the same adamw_elem / sgd_elem as the CPU loop.
#include "core/kernels/cuda/launch.cuh"
#include "core/kernels/kernel_table.hpp"
#include "core/kernels/optim.hpp"

namespace shardlab {
namespace cuda {

namespace {

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n,
                             float lr, float beta1, float beta2, float eps, float weight_decay,
                             float bc1, float bc2) {
  SL_GRID_STRIDE(i, n)
    adamw_elem(param[i], grad[i], m[i], v[i], lr, beta1, beta2, eps, weight_decay, bc1, bc2);
}

__global__ void sgd_kernel(float* param, const float* grad, float* momentum_buf, int64_t n,
                           float lr, float momentum, float weight_decay) {
  SL_GRID_STRIDE(i, n) {
    if (momentum_buf)
      sgd_elem(param[i], grad[i], momentum_buf[i], lr, momentum, weight_decay);
    else
      sgd_plain_elem(param[i], grad[i], lr, weight_decay);
  }
}

void adamw_update(Device& dev, float* param, const float* grad, float* m, float* v, int64_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, float bc1,
                  float bc2) {
  if (n <= 0) return;
  Launch l(dev);
  adamw_kernel<<<blocks_for(n), kThreads, 0, l.stream>>>(param, grad, m, v, n, lr, beta1, beta2,
                                                         eps, weight_decay, bc1, bc2);
  CUDA_CHECK_LAUNCH();
}

void sgd_update(Device& dev, float* param, const float* grad, float* momentum_buf, int64_t n,
                float lr, float momentum, float weight_decay) {
  if (n <= 0) return;
  Launch l(dev);
  sgd_kernel<<<blocks_for(n), kThreads, 0, l.stream>>>(param, grad, momentum_buf, n, lr, momentum,
                                                       weight_decay);
  CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace cuda

const OptimKernels kCudaOptim = {cuda::adamw_update, cuda::sgd_update, nullptr};

}  // namespace shardlab
