// LayerNorm over the last dimension (Ba, Kiros & Hinton 2016), eps 1e-5 as GPT-2:
//   out = (x - mean) * rstd * weight + bias,  rstd = 1 / sqrt(var + eps), var biased (1/C).
// Backward (derivation in docs/model.md), with n = (x - mean) * rstd and g = dout * weight:
//   dx = rstd * (g - mean(g) - n * mean(g * n)),  dweight += dout * n,  dbias += dout.
#pragma once

#include <math.h>  // sqrtf: the C name exists on host and device alike

#include "core/base/hd.hpp"
#include "core/device/device.hpp"

namespace shardlab {

inline constexpr float kLayerNormEps = 1e-5f;

// One row of C values; one thread per row on a GPU.
SL_HD void layernorm_forward_row(float* out, float* mean_out, float* rstd_out, const float* x,
                                 const float* weight, const float* bias, int C) {
  float m = 0.0f;
  for (int c = 0; c < C; ++c) m += x[c];
  m /= C;
  float var = 0.0f;  // two passes: no cancellation when |mean| >> std
  for (int c = 0; c < C; ++c) {
    float d = x[c] - m;
    var += d * d;
  }
  var /= C;
  float s = 1.0f / sqrtf(var + kLayerNormEps);
  for (int c = 0; c < C; ++c) out[c] = (x[c] - m) * s * weight[c] + bias[c];
  *mean_out = m;
  *rstd_out = s;
}

// dx += for one row (the row's own gradient only; weight and bias gradients are separate so rows
// can run in parallel).
SL_HD void layernorm_backward_row(float* dx, const float* dout, const float* x, const float* weight,
                                  float mean, float rstd, int C) {
  float g_mean = 0.0f, gn_mean = 0.0f;
  for (int c = 0; c < C; ++c) {
    float n = (x[c] - mean) * rstd;
    float g = dout[c] * weight[c];
    g_mean += g;
    gn_mean += g * n;
  }
  g_mean /= C;
  gn_mean /= C;
  for (int c = 0; c < C; ++c) {
    float n = (x[c] - mean) * rstd;
    float g = dout[c] * weight[c];
    dx[c] += rstd * (g - g_mean - n * gn_mean);
  }
}

// dweight, dbias += one row's contribution (rows must run serially).
SL_HD void layernorm_param_grad_row(float* dweight, float* dbias, const float* dout, const float* x,
                                    float mean, float rstd, int C) {
  for (int c = 0; c < C; ++c) {
    dweight[c] += dout[c] * (x[c] - mean) * rstd;
    dbias[c] += dout[c];
  }
}

// dweight[c], dbias[c] += the sum over all N rows of column c: one thread per column on a GPU.
SL_HD void layernorm_param_grad_col(float* dweight, float* dbias, const float* dout, const float* x,
                                    const float* mean, const float* rstd, int N, int C, int c) {
  float dw = 0.0f, db = 0.0f;
  for (int i = 0; i < N; ++i) {
    long long k = static_cast<long long>(i) * C + c;
    dw += dout[k] * (x[k] - mean[i]) * rstd[i];
    db += dout[k];
  }
  dweight[c] += dw;
  dbias[c] += db;
}

void layernorm_forward(Device& dev, float* out /* (N, C) */, float* mean /* (N) */,
                       float* rstd /* (N) */, const float* x /* (N, C) */,
                       const float* weight /* (C) */, const float* bias /* (C) */, int N, int C);
// dx, dweight, dbias: all +=.
void layernorm_backward(Device& dev, float* dx /* (N, C) */, float* dweight /* (C) */,
                        float* dbias /* (C) */, const float* dout /* (N, C) */,
                        const float* x /* (N, C) */, const float* weight /* (C) */,
                        const float* mean /* (N) */, const float* rstd /* (N) */, int N, int C);

// This family's entry in a device's kernel table (kernel_table.hpp).
struct LayerNormKernels {
  void (*forward)(Device& dev, float* out, float* mean, float* rstd, const float* x,
                  const float* weight, const float* bias, int N, int C);
  void (*backward)(Device& dev, float* dx, float* dweight, float* dbias, const float* dout,
                   const float* x, const float* weight, const float* mean, const float* rstd, int N,
                   int C);
};

}  // namespace shardlab
