// The optimizer updates on any device through its kernel table, and the CPU loops.
#include "core/kernels/optim.hpp"

#include <cmath>

#include "core/base/error.hpp"
#include "core/kernels/kernel_table.hpp"

namespace shardlab {

void adamw_update(Device& dev, float* param, const float* grad, float* m, float* v, int64_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
  SL_CHECK(t >= 1, "adamw_update: step t ", t, " must start at 1");
  // Bias corrections in double: 1 - beta2^t is tiny for small t and beta2 near 1.
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), t));
  const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta2), t));
  kernel_table(dev).optim->adamw(dev, param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay,
                                 bc1, bc2);
}

void sgd_update(Device& dev, float* param, const float* grad, float* momentum_buf, int64_t n,
                float lr, float momentum, float weight_decay) {
  SL_CHECK(momentum == 0.0f || momentum_buf != nullptr, "sgd_update: momentum ", momentum,
           " needs a momentum buffer");
  kernel_table(dev).optim->sgd(dev, param, grad, momentum_buf, n, lr, momentum, weight_decay);
}

// ---- CPU --------------------------------------------------------------------------------------

namespace cpu {
namespace {

void adamw(Device&, float* param, const float* grad, float* m, float* v, int64_t n, float lr,
           float beta1, float beta2, float eps, float weight_decay, float bc1, float bc2) {
  for (int64_t i = 0; i < n; ++i)
    adamw_elem(param[i], grad[i], m[i], v[i], lr, beta1, beta2, eps, weight_decay, bc1, bc2);
}

void sgd(Device&, float* param, const float* grad, float* momentum_buf, int64_t n, float lr,
         float momentum, float weight_decay) {
  if (momentum_buf) {
    for (int64_t i = 0; i < n; ++i)
      sgd_elem(param[i], grad[i], momentum_buf[i], lr, momentum, weight_decay);
  } else {
    for (int64_t i = 0; i < n; ++i) sgd_plain_elem(param[i], grad[i], lr, weight_decay);
  }
}

}  // namespace
}  // namespace cpu

const OptimKernels kCpuOptim = {cpu::adamw, cpu::sgd};
}  // namespace shardlab
