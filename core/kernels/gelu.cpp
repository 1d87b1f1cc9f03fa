// CPU loops of GELU (tanh approximation).
#include "core/kernels/gelu.hpp"

namespace shardlab {

void gelu_forward(Device& dev, float* out, const float* x, int64_t n) {
#if SHARDLAB_WITH_CUDA
  if (dev.kind() == DeviceKind::cuda) return cuda::gelu_forward(dev, out, x, n);
#endif
  (void)dev;
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_forward_elem(x[i]);
}

void gelu_backward(Device& dev, float* dx, const float* x, const float* dout, int64_t n) {
#if SHARDLAB_WITH_CUDA
  if (dev.kind() == DeviceKind::cuda) return cuda::gelu_backward(dev, dx, x, dout, n);
#endif
  (void)dev;
  for (int64_t i = 0; i < n; ++i) dx[i] = gelu_backward_elem(x[i], dout[i]);
}

}  // namespace shardlab
