// The optimizer updates on any device through its kernel table, and the CPU loops.
#include "core/kernels/optim.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/base/cpu_simd.hpp"
#include "core/base/error.hpp"
#include "core/kernels/kernel_table.hpp"

namespace shardlab {

namespace {
// Bias corrections in double: 1 - beta2^t is tiny for small t and beta2 near 1.
float bias_correction(float beta, int t) {
  return static_cast<float>(1.0 - std::pow(static_cast<double>(beta), t));
}
}  // namespace

void adamw_update(Device& dev, float* param, const float* grad, float* m, float* v, int64_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
  SL_CHECK(t >= 1, "adamw_update: step t ", t, " must start at 1");
  const float bc1 = bias_correction(beta1, t);
  const float bc2 = bias_correction(beta2, t);
  kernel_table(dev).optim->adamw(dev, param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay,
                                 bc1, bc2);
}

bool adamw_checked(Device& dev, float* param, const float* grad, float* m, float* v, int64_t n,
                   float grad_scale, float lr, float beta1, float beta2, float eps,
                   float weight_decay, int t, NonFinite* found) {
  SL_CHECK(t >= 1, "adamw_checked: step t ", t, " must start at 1");
  const OptimKernels& k = *kernel_table(dev).optim;
  if (!k.adamw_checked) return false;
  *found = k.adamw_checked(dev, param, grad, m, v, n, grad_scale, lr, beta1, beta2, eps,
                           weight_decay, bias_correction(beta1, t), bias_correction(beta2, t));
  return true;
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

// Inf or NaN: the exponent's bits all ones. An integer test, so that the loop below vectorises.
SL_CPU_INLINE uint32_t nonfinite_bit(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return (u & 0x7f800000u) == 0x7f800000u;
}

// One pass: per element the same operations, in the same order, as adamw_elem after a
// scale_array by grad_scale (none when it is 1), so every bit agrees with the separate steps.
// A plain loop, compiled at the CPU's vector width (cpu_simd.hpp): the sqrt and the three
// divisions are correctly rounded at every width, and no multiply-add is fused (-ffp-contract=off
// for this library). The divisions bound it more than memory, so the width pays: rank 0's
// optimizer span of `small` full_shard at N = 2 went from 1.9-2.5 ms with four-wide SSE2 to
// 1.5-1.9 at AVX-512 (docs/bench/perf-notes.md, "Fourth pass").
SL_CPU_INLINE void adamw_checked_loop_body(float* __restrict param, const float* __restrict grad,
                                           float* __restrict m, float* __restrict v, int64_t n,
                                           float grad_scale, float lr, float beta1, float beta2,
                                           float eps, float weight_decay, float bc1, float bc2,
                                           NonFinite* found) {
  const bool scale = grad_scale != 1.0f;
  uint32_t bad_g = 0, bad_p = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i];
    bad_g |= nonfinite_bit(g);
    adamw_elem(param[i], scale ? g * grad_scale : g, m[i], v[i], lr, beta1, beta2, eps,
               weight_decay, bc1, bc2);
    bad_p |= nonfinite_bit(param[i]);
  }
  found->grad = bad_g != 0;
  found->param = bad_p != 0;
}
SL_CPU_SIMD_KERNEL(adamw_checked_loop,
                   (float* param, const float* grad, float* m, float* v, int64_t n,
                    float grad_scale, float lr, float beta1, float beta2, float eps,
                    float weight_decay, float bc1, float bc2, NonFinite* found),
                   (param, grad, m, v, n, grad_scale, lr, beta1, beta2, eps, weight_decay, bc1, bc2,
                    found))

NonFinite adamw_checked(Device&, float* param, const float* grad, float* m, float* v, int64_t n,
                        float grad_scale, float lr, float beta1, float beta2, float eps,
                        float weight_decay, float bc1, float bc2) {
  NonFinite f;
  adamw_checked_loop(param, grad, m, v, n, grad_scale, lr, beta1, beta2, eps, weight_decay, bc1,
                     bc2, &f);
  return f;
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

const OptimKernels kCpuOptim = {cpu::adamw, cpu::sgd, cpu::adamw_checked};
}  // namespace shardlab
