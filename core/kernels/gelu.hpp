// GELU, tanh approximation as GPT-2 (Hendrycks & Gimpel 2016):
//   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// tanh is fastmath.hpp's: libm's tanhf is a scalar call and made GELU ~14% of a step. The clamped
// form, without the NaN select: both formulas multiply by x, so a NaN x gives NaN anyway (and a
// NaN dout a NaN dx), as the reference's tanh does.
#pragma once

#include <cstdint>

#include "core/base/hd.hpp"
#include "core/device/device.hpp"
#include "core/kernels/fastmath.hpp"

namespace shardlab {

inline constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
inline constexpr float kGeluCubic = 0.044715f;

SL_HD float gelu_forward_elem(float x) {
  float u = kGeluScale * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.0f + tanh_clamped(u));
}

// d(gelu)/dx * dout.
SL_HD float gelu_backward_elem(float x, float dout) {
  float u = kGeluScale * (x + kGeluCubic * x * x * x);
  float th = tanh_clamped(u);
  float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
  float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
  return grad * dout;
}

void gelu_forward(Device& dev, float* out /* (n) */, const float* x /* (n) */, int64_t n);
// dx = gelu'(x) * dout, overwritten; dx may alias dout.
void gelu_backward(Device& dev, float* dx /* (n) */, const float* x /* (n) */,
                   const float* dout /* (n) */, int64_t n);

// This family's entry in a device's kernel table (kernel_table.hpp).
struct GeluKernels {
  void (*forward)(Device& dev, float* out, const float* x, int64_t n);
  void (*backward)(Device& dev, float* dx, const float* x, const float* dout, int64_t n);
};

}  // namespace shardlab
