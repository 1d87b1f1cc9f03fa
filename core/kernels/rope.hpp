// Rotary position embedding (Su et al. 2021, RoFormer) in Hugging Face's rotate-half layout, as
// Llama, Mistral and Qwen2 use it: a head of hs values is two halves x1 = x[0, hs/2),
// x2 = x[hs/2, hs), and pair i (x1[i], x2[i]) turns by the angle t * f_i at position t:
//   out1 = x1 cos - x2 sin,   out2 = x2 cos + x1 sin,   f_i = theta^(-2i / hs).
// (Meta's original checkpoints pair adjacent values (2i, 2i+1) instead; Hugging Face's conversion
// permutes q_proj and k_proj rows so that rotate-half gives the same model.)
// A rotation is linear and orthogonal, so backward is the rotation by -angle and needs no saved
// input:  dx1 = d1 cos + d2 sin,   dx2 = d2 cos - d1 sin.
// Angles come from a (T, hs) table, cos in its first half and sin in its second, computed in fp32
// as transformers does (inv_freq, then t * inv_freq), so the two agree to the last bits of cos.
#pragma once

#include <math.h>  // powf, cosf, sinf: the C names exist on host and device alike

#include <cstdint>

#include "core/base/hd.hpp"
#include "core/device/device.hpp"

namespace shardlab {

// How inv_freq is made: transformers' rope types "default" and "llama3" (Llama 3.1's long-context
// rescaling of the low frequencies). Others are refused where configs are read.
enum class RopeScaling { none, llama3 };

struct RopeParams {
  float theta = 10000.0f;  // config.json's rope_theta
  RopeScaling scaling = RopeScaling::none;
  // llama3 only (config.json's rope_scaling):
  float factor = 8.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  float original_max_position_embeddings = 8192.0f;

  bool operator==(const RopeParams& o) const {
    return theta == o.theta && scaling == o.scaling &&
           (scaling == RopeScaling::none ||
            (factor == o.factor && low_freq_factor == o.low_freq_factor &&
             high_freq_factor == o.high_freq_factor &&
             original_max_position_embeddings == o.original_max_position_embeddings));
  }
};

inline constexpr float kTwoPi = 6.28318530717958647692f;

// f_i for i < hs/2, in transformers' fp32 arithmetic: 1 / theta^(2i / hs), then for llama3 the
// wavelengths 2 pi / f above original / low_freq_factor divided by `factor`, those below
// original / high_freq_factor kept, and the ones between interpolated smoothly.
SL_HD float rope_inv_freq(int i, int hs, const RopeParams& p) {
  float f = 1.0f / powf(p.theta, static_cast<float>(2 * i) / static_cast<float>(hs));
  if (p.scaling == RopeScaling::llama3) {
    const float low_wavelen = p.original_max_position_embeddings / p.low_freq_factor;
    const float high_wavelen = p.original_max_position_embeddings / p.high_freq_factor;
    const float wavelen = kTwoPi / f;
    if (wavelen > low_wavelen) {
      f = f / p.factor;
    } else if (!(wavelen < high_wavelen)) {
      const float smooth = (p.original_max_position_embeddings / wavelen - p.low_freq_factor) /
                           (p.high_freq_factor - p.low_freq_factor);
      f = (1.0f - smooth) * f / p.factor + smooth * f;
    }
  }
  return f;
}

// Row t of the table: cos(t f_i) at [i], sin(t f_i) at [hs/2 + i].
SL_HD void rope_table_row(float* row /* (hs) */, int t, int hs, const RopeParams& p) {
  const int h = hs / 2;
  for (int i = 0; i < h; ++i) {
    const float angle = static_cast<float>(t) * rope_inv_freq(i, hs, p);
    row[i] = cosf(angle);
    row[h + i] = sinf(angle);
  }
}

// One head of hs values at the position whose table row is cs, in place.
SL_HD void rope_forward_head(float* x /* (hs) */, const float* cs /* (hs) */, int hs) {
  const int h = hs / 2;
  for (int i = 0; i < h; ++i) {
    const float x1 = x[i], x2 = x[h + i], c = cs[i], s = cs[h + i];
    x[i] = x1 * c - x2 * s;
    x[h + i] = x2 * c + x1 * s;
  }
}

// The transpose (inverse) rotation of a head's gradient, in place.
SL_HD void rope_backward_head(float* dx /* (hs) */, const float* cs /* (hs) */, int hs) {
  const int h = hs / 2;
  for (int i = 0; i < h; ++i) {
    const float d1 = dx[i], d2 = dx[h + i], c = cs[i], s = cs[h + i];
    dx[i] = d1 * c + d2 * s;
    dx[h + i] = d2 * c - d1 * s;
  }
}

// The (T, hs) cos | sin table of positions [0, T). hs even.
void rope_table(Device& dev, float* cos_sin /* (T, hs) */, int T, int hs, const RopeParams& p);

// In place on B * T rows of `ld` floats (row b*T + t is position t): the n_heads heads of hs at
// columns [0, n_heads * hs) of each row turn; the rest of the row is left alone (with q | k | v
// rows, n_heads = n_head + n_kv_heads turns q and k, not v).
void rope_forward(Device& dev, float* x /* (B, T, ld) */, const float* cos_sin /* (T, hs) */, int B,
                  int T, int n_heads, int hs, int64_t ld);
// The gradient of rope_forward, in place on dx laid out as x.
void rope_backward(Device& dev, float* dx /* (B, T, ld) */, const float* cos_sin /* (T, hs) */,
                   int B, int T, int n_heads, int hs, int64_t ld);

// This family's entry in a device's kernel table (kernel_table.hpp).
struct RopeKernels {
  void (*table)(Device& dev, float* cos_sin, int T, int hs, const RopeParams& p);
  void (*forward)(Device& dev, float* x, const float* cos_sin, int B, int T, int n_heads, int hs,
                  int64_t ld);
  void (*backward)(Device& dev, float* dx, const float* cos_sin, int B, int T, int n_heads, int hs,
                   int64_t ld);
};

}  // namespace shardlab
