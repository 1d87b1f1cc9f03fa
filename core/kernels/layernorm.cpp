// CPU loops of LayerNorm: one row at a time through the shared row math.
#include "core/kernels/layernorm.hpp"

namespace shardlab {

void layernorm_forward(Device& dev, float* out, float* mean, float* rstd, const float* x,
                       const float* weight, const float* bias, int N, int C) {
#if SHARDLAB_WITH_CUDA
  if (dev.kind() == DeviceKind::cuda) return cuda::layernorm_forward(dev, out, mean, rstd, x, weight, bias, N, C);
#endif
  (void)dev;
  for (int i = 0; i < N; ++i) {
    int64_t r = static_cast<int64_t>(i) * C;
    layernorm_forward_row(out + r, mean + i, rstd + i, x + r, weight, bias, C);
  }
}

void layernorm_backward(Device& dev, float* dx, float* dweight, float* dbias, const float* dout,
                        const float* x, const float* weight, const float* mean, const float* rstd,
                        int N, int C) {
#if SHARDLAB_WITH_CUDA
  if (dev.kind() == DeviceKind::cuda) return cuda::layernorm_backward(dev, dx, dweight, dbias, dout, x, weight, mean, rstd, N, C);
#endif
  (void)dev;
  for (int i = 0; i < N; ++i) {
    int64_t r = static_cast<int64_t>(i) * C;
    layernorm_backward_row(dx + r, dout + r, x + r, weight, mean[i], rstd[i], C);
    layernorm_param_grad_row(dweight, dbias, dout + r, x + r, mean[i], rstd[i], C);
  }
}

}  // namespace shardlab
