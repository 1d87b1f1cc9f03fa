// Token + position embedding (GPT-2's encoder): out[b,t,:] = wte[token[b,t],:] + wpe[t,:].
// Without a position table (wpe null: Llama, whose positions are rotary, kernels/rope.hpp) it is
// the token rows alone: out[b,t,:] = wte[token[b,t],:].
#pragma once

#include "core/base/hd.hpp"
#include "core/device/device.hpp"

namespace shardlab {

// One (b, t) row; wte and wpe are the full tables.
SL_HD void encoder_forward_row(float* out /* (C) */, const float* wte /* (V, C) */,
                               const float* wpe /* (maxT, C) */, int token, int t, int C) {
  const float* we = wte + static_cast<long long>(token) * C;
  if (!wpe) {
    for (int c = 0; c < C; ++c) out[c] = we[c];
    return;
  }
  const float* pe = wpe + static_cast<long long>(t) * C;
  for (int c = 0; c < C; ++c) out[c] = we[c] + pe[c];
}

// Scatter-add one row's gradient into the tables (+=). Rows sharing a token (or a position) add
// into the same row: run serially, or use atomics when rows run in parallel.
SL_HD void encoder_backward_row(float* dwte /* (V, C) */, float* dwpe /* (maxT, C) */,
                                const float* dout /* (C) */, int token, int t, int C) {
  float* dwe = dwte + static_cast<long long>(token) * C;
  for (int c = 0; c < C; ++c) dwe[c] += dout[c];
  if (!dwpe) return;
  float* dpe = dwpe + static_cast<long long>(t) * C;
  for (int c = 0; c < C; ++c) dpe[c] += dout[c];
}

// tokens (B, T) in [0, V): the CPU path throws InvalidArgument naming the position otherwise.
// wpe (forward) and dwpe (backward) may be null: no position table.
void encoder_forward(Device& dev, float* out /* (B, T, C) */, const int* tokens /* (B, T) */,
                     const float* wte /* (V, C) */, const float* wpe /* (maxT, C) */, int B, int T,
                     int C, int V);
// dwte, dwpe: +=.
void encoder_backward(Device& dev, float* dwte /* (V, C) */, float* dwpe /* (maxT, C) */,
                      const float* dout /* (B, T, C) */, const int* tokens /* (B, T) */, int B,
                      int T, int C, int V);

// This family's entry in a device's kernel table (kernel_table.hpp).
struct EncoderKernels {
  void (*forward)(Device& dev, float* out, const int* tokens, const float* wte, const float* wpe,
                  int B, int T, int C, int V);
  void (*backward)(Device& dev, float* dwte, float* dwpe, const float* dout, const int* tokens,
                   int B, int T, int C, int V);
};

}  // namespace shardlab
