// CPU loops of the residual add, bias broadcast and bias gradient.
#include "core/kernels/residual.hpp"

namespace shardlab {

void residual_forward(Device& dev, float* out, const float* a, const float* b, int64_t n) {
#if SHARDLAB_WITH_CUDA
  if (dev.kind() == DeviceKind::cuda) return cuda::residual_forward(dev, out, a, b, n);
#endif
  (void)dev;
  for (int64_t i = 0; i < n; ++i) out[i] = residual_elem(a[i], b[i]);
}

void bias_broadcast(Device& dev, float* out, const float* bias, int N, int OC, bool accumulate) {
#if SHARDLAB_WITH_CUDA
  if (dev.kind() == DeviceKind::cuda) return cuda::bias_broadcast(dev, out, bias, N, OC, accumulate);
#endif
  (void)dev;
  for (int i = 0; i < N; ++i) {
    float* row = out + static_cast<int64_t>(i) * OC;
    if (accumulate)
      for (int o = 0; o < OC; ++o) row[o] = residual_elem(row[o], bias[o]);
    else
      for (int o = 0; o < OC; ++o) row[o] = bias[o];
  }
}

void bias_backward(Device& dev, float* dbias, const float* dout, int N, int OC) {
#if SHARDLAB_WITH_CUDA
  if (dev.kind() == DeviceKind::cuda) return cuda::bias_backward(dev, dbias, dout, N, OC);
#endif
  (void)dev;
  // Row by row rather than bias_grad_col's column walk: the same sums, read contiguously.
  for (int i = 0; i < N; ++i) {
    const float* row = dout + static_cast<int64_t>(i) * OC;
    for (int o = 0; o < OC; ++o) dbias[o] += row[o];
  }
}

}  // namespace shardlab
