// Causal self-attention: forward/backward composed of gemm_batched calls on strided per-head
// views of qkv (see attention.hpp for the layout) and the softmax kernels, which run on any device
// through its kernel table; then the softmax CPU loops.
#include "core/kernels/attention.hpp"

#include <cmath>

#include "core/base/cpu_simd.hpp"
#include "core/kernels/kernel_table.hpp"

namespace shardlab {

void attention_softmax_forward(Device& dev, float* att, int BH, int T) {
  kernel_table(dev).attention->softmax_forward(dev, att, BH, T);
}

void attention_softmax_backward(Device& dev, float* dpre, const float* att, const float* datt,
                                int BH, int T) {
  kernel_table(dev).attention->softmax_backward(dev, dpre, att, datt, BH, T);
}

void attention_forward(Device& dev, float* out, float* att, const float* qkv, int B, int T, int C,
                       int NH) {
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int64_t tt = static_cast<int64_t>(T) * T;
  for (int b = 0; b < B; ++b) {
    const float* q =
        qkv + static_cast<int64_t>(b) * T * 3 * C;  // head h at q + h*hs, rows 3C apart
    const float* k = q + C;
    float* att_b = att + b * NH * tt;
    // S_h (T, T) = scale * Q_h (T, hs) @ K_h^T
    dev.gemm_batched(false, true, T, T, hs, scale, q, 3 * C, hs, k, 3 * C, hs, 0.0f, att_b, T, tt,
                     NH);
  }
  attention_softmax_forward(dev, att, B * NH, T);
  for (int b = 0; b < B; ++b) {
    const float* v = qkv + static_cast<int64_t>(b) * T * 3 * C + 2 * C;
    // out_h (T, hs) = P_h (T, T) @ V_h (T, hs), written into columns [h*hs, (h+1)*hs) of out
    dev.gemm_batched(false, false, T, hs, T, 1.0f, att + b * NH * tt, T, tt, v, 3 * C, hs, 0.0f,
                     out + static_cast<int64_t>(b) * T * C, C, hs, NH);
  }
}

void attention_backward(Device& dev, float* dqkv, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int64_t tt = static_cast<int64_t>(T) * T;
  Buffer scratch = dev.alloc(NH * tt * 4, MemCategory::workspace);
  float* datt = scratch.f32();  // (NH, T, T): dP, then dS in place
  for (int b = 0; b < B; ++b) {
    const int64_t off = static_cast<int64_t>(b) * T * 3 * C;
    const float* q = qkv + off;
    const float* k = q + C;
    const float* v = q + 2 * C;
    float* dq = dqkv + off;
    float* dk = dq + C;
    float* dv = dq + 2 * C;
    const float* dout_b = dout + static_cast<int64_t>(b) * T * C;
    const float* att_b = att + b * NH * tt;
    // dP_h (T, T) = dout_h (T, hs) @ V_h^T
    dev.gemm_batched(false, true, T, T, hs, 1.0f, dout_b, C, hs, v, 3 * C, hs, 0.0f, datt, T, tt,
                     NH);
    // dV_h (T, hs) = P_h^T @ dout_h
    dev.gemm_batched(true, false, T, hs, T, 1.0f, att_b, T, tt, dout_b, C, hs, 0.0f, dv, 3 * C, hs,
                     NH);
    attention_softmax_backward(dev, datt, att_b, datt, NH, T);
    // S = scale Q K^T:  dQ_h = scale dS_h @ K_h,  dK_h = scale dS_h^T @ Q_h
    dev.gemm_batched(false, false, T, hs, T, scale, datt, T, tt, k, 3 * C, hs, 0.0f, dq, 3 * C, hs,
                     NH);
    dev.gemm_batched(true, false, T, hs, T, scale, datt, T, tt, q, 3 * C, hs, 0.0f, dk, 3 * C, hs,
                     NH);
  }
}

// ---- CPU --------------------------------------------------------------------------------------
// attention.hpp's row math with the max, sum and dot in kCpuLanes lanes (cpu_simd.hpp), at the
// CPU's vector width: the same bits at every width, run to run. (A GPU thread runs the
// sequential row functions.)

namespace cpu {
namespace {

// Row r of the (BH, T, T) tensor is query position r % T.
SL_CPU_INLINE void softmax_forward_rows_body(float* att, int BH, int T) {
  for (int64_t r = 0; r < static_cast<int64_t>(BH) * T; ++r) {
    float* row = att + r * T;
    const int n = static_cast<int>(r % T) + 1;  // entries [0, t]
    const float mx = lanes_max(row, n);
    for (int j = 0; j < n; ++j) row[j] = exp_nonpos_approx(row[j] - mx);
    const float inv = 1.0f / lanes_sum(n, [row](int j) { return row[j]; });
    for (int j = 0; j < n; ++j) row[j] *= inv;
    for (int j = n; j < T; ++j) row[j] = 0.0f;
  }
}
SL_CPU_SIMD_KERNEL(softmax_forward_rows, (float* att, int BH, int T), (att, BH, T))

// dpre may alias datt: the dot is taken first.
SL_CPU_INLINE void softmax_backward_rows_body(float* dpre, const float* att, const float* datt,
                                              int BH, int T) {
  for (int64_t r = 0; r < static_cast<int64_t>(BH) * T; ++r) {
    const float* p = att + r * T;
    const float* dp = datt + r * T;
    float* ds = dpre + r * T;
    const int n = static_cast<int>(r % T) + 1;
    const float dot = lanes_sum(n, [p, dp](int j) { return p[j] * dp[j]; });
    for (int j = 0; j < n; ++j) ds[j] = p[j] * (dp[j] - dot);
    for (int j = n; j < T; ++j) ds[j] = 0.0f;
  }
}
SL_CPU_SIMD_KERNEL(softmax_backward_rows,
                   (float* dpre, const float* att, const float* datt, int BH, int T),
                   (dpre, att, datt, BH, T))

void softmax_forward(Device&, float* att, int BH, int T) { softmax_forward_rows(att, BH, T); }

void softmax_backward(Device&, float* dpre, const float* att, const float* datt, int BH, int T) {
  softmax_backward_rows(dpre, att, datt, BH, T);
}

}  // namespace
}  // namespace cpu

const AttentionKernels kCpuAttention = {cpu::softmax_forward, cpu::softmax_backward};
}  // namespace shardlab
