// CPU loops of the optimizer updates.
#include "core/kernels/optim.hpp"

#include <cmath>

#include "core/base/error.hpp"

namespace shardlab {

void adamw_update(Device& dev, float* param, const float* grad, float* m, float* v, int64_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
  SL_CHECK(t >= 1, "adamw_update: step t ", t, " must start at 1");
  // Bias corrections in double: 1 - beta2^t is tiny for small t and beta2 near 1.
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), t));
  const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta2), t));
#if SHARDLAB_WITH_CUDA
  if (dev.kind() == DeviceKind::cuda)
    return cuda::adamw_update(dev, param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, bc1, bc2);
#endif
  (void)dev;
  for (int64_t i = 0; i < n; ++i)
    adamw_elem(param[i], grad[i], m[i], v[i], lr, beta1, beta2, eps, weight_decay, bc1, bc2);
}

void sgd_update(Device& dev, float* param, const float* grad, float* momentum_buf, int64_t n,
                float lr, float momentum, float weight_decay) {
  SL_CHECK(momentum == 0.0f || momentum_buf != nullptr,
           "sgd_update: momentum ", momentum, " needs a momentum buffer");
#if SHARDLAB_WITH_CUDA
  if (dev.kind() == DeviceKind::cuda)
    return cuda::sgd_update(dev, param, grad, momentum_buf, n, lr, momentum, weight_decay);
#endif
  (void)dev;
  if (momentum_buf) {
    for (int64_t i = 0; i < n; ++i)
      sgd_elem(param[i], grad[i], momentum_buf[i], lr, momentum, weight_decay);
  } else {
    for (int64_t i = 0; i < n; ++i) sgd_plain_elem(param[i], grad[i], lr, weight_decay);
  }
}

}  // namespace shardlab
