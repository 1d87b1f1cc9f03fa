// RMSNorm over the last dimension (Zhang & Sennrich 2019), as Llama's (Hugging Face
// LlamaRMSNorm): no mean, no bias,
//   out = weight * (x * rstd),  rstd = 1 / sqrt(mean(x^2) + eps).
// Backward (derivation in docs/model.md), with n = x * rstd and g = dout * weight:
//   dx = rstd * (g - n * mean(g * n)),  dweight += dout * n.
// eps is the model's (config.json's rms_norm_eps: 1e-5 for Llama 2 and 3, 1e-6 for Qwen2).
#pragma once

#include <math.h>  // sqrtf: the C name exists on host and device alike

#include "core/base/hd.hpp"
#include "core/device/device.hpp"

namespace shardlab {

// One row of C values; one thread per row on a GPU.
SL_HD void rmsnorm_forward_row(float* out, float* rstd_out, const float* x, const float* weight,
                               int C, float eps) {
  float ss = 0.0f;
  for (int c = 0; c < C; ++c) ss += x[c] * x[c];
  float s = 1.0f / sqrtf(ss / C + eps);
  for (int c = 0; c < C; ++c) out[c] = weight[c] * (x[c] * s);
  *rstd_out = s;
}

// dx += for one row (weight gradients are separate so rows can run in parallel).
SL_HD void rmsnorm_backward_row(float* dx, const float* dout, const float* x, const float* weight,
                                float rstd, int C) {
  float gn_mean = 0.0f;
  for (int c = 0; c < C; ++c) gn_mean += dout[c] * weight[c] * (x[c] * rstd);
  gn_mean /= C;
  for (int c = 0; c < C; ++c) {
    float n = x[c] * rstd;
    dx[c] += rstd * (dout[c] * weight[c] - n * gn_mean);
  }
}

// dweight[c] += the sum over all N rows of column c: one thread per column on a GPU.
SL_HD void rmsnorm_weight_grad_col(float* dweight, const float* dout, const float* x,
                                   const float* rstd, int N, int C, int c) {
  float dw = 0.0f;
  for (int i = 0; i < N; ++i) {
    long long k = static_cast<long long>(i) * C + c;
    dw += dout[k] * (x[k] * rstd[i]);
  }
  dweight[c] += dw;
}

void rmsnorm_forward(Device& dev, float* out /* (N, C) */, float* rstd /* (N) */,
                     const float* x /* (N, C) */, const float* weight /* (C) */, int N, int C,
                     float eps);
// dx, dweight: +=.
void rmsnorm_backward(Device& dev, float* dx /* (N, C) */, float* dweight /* (C) */,
                      const float* dout /* (N, C) */, const float* x /* (N, C) */,
                      const float* weight /* (C) */, const float* rstd /* (N) */, int N, int C);

// This family's entry in a device's kernel table (kernel_table.hpp).
struct RmsNormKernels {
  void (*forward)(Device& dev, float* out, float* rstd, const float* x, const float* weight, int N,
                  int C, float eps);
  void (*backward)(Device& dev, float* dx, float* dweight, const float* dout, const float* x,
                   const float* weight, const float* rstd, int N, int C);
};

}  // namespace shardlab
