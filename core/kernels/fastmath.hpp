// exp and tanh in plain arithmetic (no libm call, no float compare), so that CPU loops over them
// vectorise: libm's expf/tanhf are scalar calls, and under the default -ftrapping-math GCC will not
// if-convert float compares. Clamps are done on the float bits as integers instead.
// NaN in gives NaN out, as expf and tanhf do (a select on the bits too): a clamp alone would map
// NaN to a tiny finite value, and a diverged model would then show a uniform softmax and a
// finite loss instead of stopping.
// Accuracy: exp_nonpos_approx within 2 ulp of expf on [-87, 0]; tanh_approx within 2e-7 absolute.
// The same code runs in CUDA kernels, where it costs a few FMAs like the intrinsics would.
#pragma once

#include <cstdint>

#include "core/base/dtype.hpp"  // f32_bits, bits_f32
#include "core/base/hd.hpp"

namespace shardlab {

// e^y for y <= 0 (softmax arguments after subtracting the row max). Uses -|y|, and clamps at -87
// (e^-87 ~ 1.6e-38 is the last normal float region). Cephes expf: y = n ln2 + r, |r| <= ln2/2,
// e^r by a degree-6 polynomial, 2^n built in the exponent bits. The clamp also maps NaN to
// ~1.6e-38: only for callers whose own arithmetic carries a NaN input on (see exp_nonpos_approx).
SL_HD float exp_nonpos_clamped(float y) {
  int32_t a = static_cast<int32_t>(f32_bits(y) & 0x7fffffffu);  // |y|: positive floats sort as ints
  a = a > 0x42ae0000 ? 0x42ae0000 : a;                          // min(|y|, 87.0f)
  float x = -bits_f32(static_cast<uint32_t>(a));
  int n =
      -static_cast<int>(0.5f - x * 1.44269504088896341f);  // round(x log2 e), truncation is SIMD
  float nf = static_cast<float>(n);
  float r = x - nf * 0.693359375f + nf * 2.12194440e-4f;  // ln2 in two parts: nf * hi is exact
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * bits_f32(static_cast<uint32_t>(n + 127) << 23);
}

// A NaN where y is NaN (its bits above Inf's), else v: an integer compare and an OR (all bits set
// is a NaN), two vector instructions, so loops still vectorise and stay nearly as fast.
SL_HD float nan_or(float y, float v) {
  const uint32_t nan = 0u - static_cast<uint32_t>((f32_bits(y) & 0x7fffffffu) > 0x7f800000u);
  return bits_f32(f32_bits(v) | nan);
}

// e^y for y <= 0, NaN for NaN as expf; -Inf still gives the clamp's ~1.6e-38. The softmax needs
// this: with the clamp alone a NaN score becomes a tiny weight and the row a finite distribution.
SL_HD float exp_nonpos_approx(float y) { return nan_or(y, exp_nonpos_clamped(y)); }

// tanh(x) = sign(x) (1 - e) / (1 + e), e = e^{-2|x|} in (0, 1]: no overflow at either end.
// NaN in gives +-1 here; tanh_approx below returns the NaN.
SL_HD float tanh_clamped(float x) {
  float e = exp_nonpos_clamped(2.0f * x);
  float t = (1.0f - e) / (1.0f + e);
  return bits_f32(f32_bits(t) | (f32_bits(x) & 0x80000000u));
}
SL_HD float tanh_approx(float x) { return nan_or(x, tanh_clamped(x)); }

}  // namespace shardlab
