// SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"), the MLP activation of Llama, Mistral
// and Qwen2: down_proj(silu(gate_proj(x)) * up_proj(x)). This family is the product in the middle,
// on one (N, 2F) tensor holding gate | up per row (gate_proj and up_proj are one GEMM):
//   out = silu(g) * u,   silu(g) = g * sigmoid(g).
// Backward, with s = sigmoid(g):
//   dg = dout * u * s * (1 + g (1 - s)),   du = dout * silu(g).
// sigmoid is fastmath.hpp's exp in plain arithmetic (no libm call), so the loops vectorise; NaN
// in gives NaN out.
#pragma once

#include <cstdint>

#include "core/base/dtype.hpp"  // f32_bits, bits_f32
#include "core/base/hd.hpp"
#include "core/device/device.hpp"
#include "core/kernels/fastmath.hpp"

namespace shardlab {

// 1 / (1 + e^-x) without overflow at either end: with e = e^-|x| in (0, 1], 1 / (1 + e) for
// x >= 0 and e / (1 + e) for x < 0, the choice made on the sign bit (no float compare, so a loop
// of it vectorises).
SL_HD float sigmoid_approx(float x) {
  const float e = exp_nonpos_approx(x);  // e^-|x|: the function takes -|x| itself; NaN stays NaN
  const float r = 1.0f / (1.0f + e);
  const uint32_t neg = 0u - (f32_bits(x) >> 31);  // all ones where x's sign bit is set
  return bits_f32((f32_bits(r) & ~neg) | (f32_bits(e * r) & neg));
}

SL_HD float swiglu_forward_elem(float g, float u) { return g * sigmoid_approx(g) * u; }

// d/dg and d/du of silu(g) * u, times dout.
SL_HD void swiglu_backward_elem(float* dg, float* du, float g, float u, float dout) {
  const float s = sigmoid_approx(g);
  const float silu = g * s;
  *dg = dout * u * (s * (1.0f + g * (1.0f - s)));
  *du = dout * silu;
}

// Row i of gate_up is gate (F) then up (F).
void swiglu_forward(Device& dev, float* out /* (N, F) */, const float* gate_up /* (N, 2F) */, int N,
                    int F);
// dgate_up overwritten (gate's gradient then up's, per row).
void swiglu_backward(Device& dev, float* dgate_up /* (N, 2F) */, const float* dout /* (N, F) */,
                     const float* gate_up /* (N, 2F) */, int N, int F);

// This family's entry in a device's kernel table (kernel_table.hpp).
struct SwiGluKernels {
  void (*forward)(Device& dev, float* out, const float* gate_up, int N, int F);
  void (*backward)(Device& dev, float* dgate_up, const float* dout, const float* gate_up, int N,
                   int F);
};

}  // namespace shardlab
