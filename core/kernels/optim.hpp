// Optimizer update kernels on flat fp32 arrays (a rank's shard): AdamW and SGD with momentum.
// The per-element math is SL_HD, shared by the CPU loop and the CUDA kernel; core/optim wraps
// these in optimizer classes.
#pragma once

#include <math.h>  // sqrtf: the C name exists on host and device alike

#include <cstdint>

#include "core/base/hd.hpp"
#include "core/device/device.hpp"

namespace shardlab {

// AdamW (Loshchilov & Hutter), as PyTorch's torch.optim.AdamW:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr * ( (m / bc1) / (sqrt(v / bc2) + eps) + wd * p )   with bc1 = 1 - b1^t, bc2 = 1 - b2^t
// Weight decay is decoupled: it acts on p directly, not through m and v.
SL_HD void adamw_elem(float& p, float g, float& m, float& v, float lr, float beta1, float beta2,
                      float eps, float weight_decay, float bc1, float bc2) {
  m = beta1 * m + (1.0f - beta1) * g;
  v = beta2 * v + (1.0f - beta2) * g * g;
  float m_hat = m / bc1;
  float v_hat = v / bc2;
  p -= lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * p);
}

// SGD with momentum, as torch.optim.SGD (dampening 0, not Nesterov):
//   g' = g + wd p;  buf = momentum buf + g';  p -= lr buf   (buf starts at 0, so step 1 buf = g')
SL_HD void sgd_elem(float& p, float g, float& buf, float lr, float momentum, float weight_decay) {
  float d = g + weight_decay * p;
  buf = momentum * buf + d;
  p -= lr * buf;
}
SL_HD void sgd_plain_elem(float& p, float g, float lr, float weight_decay) {
  p -= lr * (g + weight_decay * p);
}

// t is the step number, starting at 1 (bias correction 1 - beta^t). m and v start at zero.
void adamw_update(Device& dev, float* param, const float* grad, float* m, float* v, int64_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int t);

// momentum_buf may be null when momentum == 0 (plain SGD).
void sgd_update(Device& dev, float* param, const float* grad, float* momentum_buf, int64_t n,
                float lr, float momentum, float weight_decay);

// What adamw_checked found: a gradient that was NaN or Inf, a parameter left NaN or Inf.
struct NonFinite {
  bool grad = false;
  bool param = false;
};

// The engine's whole optimizer step on a shard in one pass over p, g, m and v: each gradient is
// checked finite, scaled by `grad_scale` (clipping's coefficient; 1 leaves it as it is), and
// applied with adamw_elem; each updated parameter is checked finite. The parameters, m and v come
// out bit-identical to all_finite(g), scale_array(g, grad_scale), adamw_update and
// all_finite(p) in turn, and `grad` is left unscaled. Where a gradient is not finite the update
// still runs over the whole shard (a separate check would have stopped before it): the caller
// ends the run on any flag. Returns false, doing nothing, on a device without the fused kernel.
bool adamw_checked(Device& dev, float* param, const float* grad, float* m, float* v, int64_t n,
                   float grad_scale, float lr, float beta1, float beta2, float eps,
                   float weight_decay, int t, NonFinite* found);

// This family's entry in a device's kernel table (kernel_table.hpp). AdamW gets the
// bias corrections bc1 = 1 - beta1^t, bc2 = 1 - beta2^t, computed once on the host by adamw_update.
// adamw_checked may be null (a device without the fused pass: the caller runs the steps apart).
struct OptimKernels {
  void (*adamw)(Device& dev, float* param, const float* grad, float* m, float* v, int64_t n,
                float lr, float beta1, float beta2, float eps, float weight_decay, float bc1,
                float bc2);
  void (*sgd)(Device& dev, float* param, const float* grad, float* momentum_buf, int64_t n,
              float lr, float momentum, float weight_decay);
  NonFinite (*adamw_checked)(Device& dev, float* param, const float* grad, float* m, float* v,
                             int64_t n, float grad_scale, float lr, float beta1, float beta2,
                             float eps, float weight_decay, float bc1, float bc2);
};

}  // namespace shardlab
