// The optimizer updates on any device through its kernel table, and the CPU loops.
#include "core/kernels/optim.hpp"

#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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

bool exponent_all_ones(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return (u & 0x7f800000u) == 0x7f800000u;
}

// One pass: per element the same operations, in the same order, as adamw_elem after a
// scale_array by grad_scale (none when it is 1), so every bit agrees with the separate steps.
// SSE2 computes four elements at once with the same correctly rounded IEEE operations (no fused
// multiply-add), then the scalar loop takes the tail.
NonFinite adamw_checked(Device&, float* __restrict param, const float* __restrict grad,
                        float* __restrict m, float* __restrict v, int64_t n, float grad_scale,
                        float lr, float beta1, float beta2, float eps, float weight_decay,
                        float bc1, float bc2) {
  const bool scale = grad_scale != 1.0f;
  int64_t i = 0;
  NonFinite f;
#if defined(__SSE2__)
  const __m128 b1 = _mm_set1_ps(beta1), b2 = _mm_set1_ps(beta2);
  const __m128 omb1 = _mm_set1_ps(1.0f - beta1), omb2 = _mm_set1_ps(1.0f - beta2);
  const __m128 c1 = _mm_set1_ps(bc1), c2 = _mm_set1_ps(bc2), ep = _mm_set1_ps(eps);
  const __m128 lrv = _mm_set1_ps(lr), wd = _mm_set1_ps(weight_decay), gs = _mm_set1_ps(grad_scale);
  const __m128i expo = _mm_set1_epi32(0x7f800000);
  __m128i bad_g = _mm_setzero_si128(), bad_p = _mm_setzero_si128();
  for (; i + 4 <= n; i += 4) {
    __m128 g = _mm_loadu_ps(grad + i);
    bad_g = _mm_or_si128(bad_g, _mm_cmpeq_epi32(_mm_and_si128(_mm_castps_si128(g), expo), expo));
    if (scale) g = _mm_mul_ps(g, gs);
    const __m128 mm = _mm_add_ps(_mm_mul_ps(b1, _mm_loadu_ps(m + i)), _mm_mul_ps(omb1, g));
    const __m128 vv =
        _mm_add_ps(_mm_mul_ps(b2, _mm_loadu_ps(v + i)), _mm_mul_ps(_mm_mul_ps(omb2, g), g));
    _mm_storeu_ps(m + i, mm);
    _mm_storeu_ps(v + i, vv);
    const __m128 m_hat = _mm_div_ps(mm, c1);
    const __m128 v_hat = _mm_div_ps(vv, c2);
    __m128 p = _mm_loadu_ps(param + i);
    const __m128 upd =
        _mm_add_ps(_mm_div_ps(m_hat, _mm_add_ps(_mm_sqrt_ps(v_hat), ep)), _mm_mul_ps(wd, p));
    p = _mm_sub_ps(p, _mm_mul_ps(lrv, upd));
    _mm_storeu_ps(param + i, p);
    bad_p = _mm_or_si128(bad_p, _mm_cmpeq_epi32(_mm_and_si128(_mm_castps_si128(p), expo), expo));
  }
  f.grad = _mm_movemask_epi8(bad_g) != 0;
  f.param = _mm_movemask_epi8(bad_p) != 0;
#endif
  for (; i < n; ++i) {
    float g = grad[i];
    f.grad = f.grad || exponent_all_ones(g);
    if (scale) g *= grad_scale;
    adamw_elem(param[i], g, m[i], v[i], lr, beta1, beta2, eps, weight_decay, bc1, bc2);
    f.param = f.param || exponent_all_ones(param[i]);
  }
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
