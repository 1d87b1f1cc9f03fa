// Causal self-attention: forward/backward composed of gemm_batched calls on strided per-head
// views of qkv (see attention.hpp for the layout), in causal blocks, and the softmax kernels, which
// run on any device through its kernel table; then the softmax CPU loops.
#include "core/kernels/attention.hpp"

#include <cmath>

#include "core/base/cpu_simd.hpp"
#include "core/base/error.hpp"
#include "core/kernels/kernel_table.hpp"

namespace shardlab {

void attention_softmax_forward(Device& dev, float* att, int BH, int T) {
  kernel_table(dev).attention->softmax_forward(dev, att, BH, T);
}

void attention_softmax_backward(Device& dev, float* dpre, const float* att, const float* datt,
                                int BH, int T) {
  kernel_table(dev).attention->softmax_backward(dev, dpre, att, datt, BH, T);
}

int attention_causal_block(const Device& dev, int T, int block) {
  if (block <= 0) block = kernel_table(dev).attention->causal_block(dev);
  return block <= 0 || block > T ? T : block;
}

namespace {

// fn(begin, end) for each block of positions [0, T). Query block [r0, r1) needs keys [0, r1)
// only; key block [j0, j1) gets gradient from queries [j0, T) only. The blocks above the diagonal
// hold P = 0 and dS = 0 exactly, so skipping them leaves every sum with the same nonzero terms.
template <class Fn>
void for_each_block(int T, int block, Fn fn) {
  for (int b0 = 0; b0 < T; b0 += block) fn(b0, b0 + block < T ? b0 + block : T);
}

void check_dims(const AttentionDims& d, const char* fn) {
  SL_CHECK(d.n_head > 0 && d.n_kv_head > 0 && d.head_dim > 0, fn, ": heads ", d.n_head,
           ", K/V heads ", d.n_kv_head, ", head size ", d.head_dim, " must be positive");
  if (d.n_head % d.n_kv_head != 0)
    SL_THROW(InvalidArgument, fn, ": n_kv_heads ", d.n_kv_head, " does not divide n_head ",
             d.n_head);
}

}  // namespace

// Head h = j*G + g (K/V head j, member g of its group). For each g, one gemm_batched over the NKV
// K/V heads: Q and out step G*hs columns per batch entry, the scores G*T*T, K and V hs.
void attention_forward(Device& dev, float* out, float* att, const float* qkv,
                       const AttentionDims& d, int block) {
  check_dims(d, "attention_forward");
  const int B = d.B, T = d.T, hs = d.head_dim, NH = d.n_head, NKV = d.n_kv_head, G = d.group();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int64_t tt = static_cast<int64_t>(T) * T;
  const int64_t ld = d.qkv_cols();  // qkv's row stride
  const int64_t lo = d.q_cols();    // out's row stride
  const int64_t q_step = static_cast<int64_t>(G) * hs, s_step = G * tt;
  block = attention_causal_block(dev, T, block);
  for (int b = 0; b < B; ++b) {
    const float* q = qkv + b * T * ld;  // head h at q + h*hs, rows ld apart
    const float* k = q + lo;            // K/V head j at k + j*hs
    float* att_b = att + b * NH * tt;
    // S_h[r0:r1, 0:r1] (T, T) = scale * Q_h[r0:r1] (T, hs) @ K_j[0:r1]^T; the rest of the row is
    // the softmax's to zero.
    for (int g = 0; g < G; ++g)
      for_each_block(T, block, [&](int r0, int r1) {
        dev.gemm_batched(false, true, r1 - r0, r1, hs, scale, q + g * hs + r0 * ld, ld, q_step, k,
                         ld, hs, 0.0f, att_b + g * tt + r0 * T, T, s_step, NKV);
      });
  }
  attention_softmax_forward(dev, att, B * NH, T);
  for (int b = 0; b < B; ++b) {
    const float* v = qkv + b * T * ld + lo + d.kv_cols();
    const float* att_b = att + b * NH * tt;
    float* out_b = out + static_cast<int64_t>(b) * T * lo;
    // out_h[r0:r1] (T, hs) = P_h[r0:r1, 0:r1] @ V_j[0:r1], into columns [h*hs, (h+1)*hs) of out
    for (int g = 0; g < G; ++g)
      for_each_block(T, block, [&](int r0, int r1) {
        dev.gemm_batched(false, false, r1 - r0, hs, r1, 1.0f, att_b + g * tt + r0 * T, T, s_step, v,
                         ld, hs, 0.0f, out_b + g * hs + static_cast<int64_t>(r0) * lo, lo, q_step,
                         NKV);
      });
  }
}

void attention_backward(Device& dev, float* dqkv, const float* dout, const float* qkv,
                        const float* att, const AttentionDims& d, int block) {
  check_dims(d, "attention_backward");
  const int B = d.B, T = d.T, hs = d.head_dim, NH = d.n_head, NKV = d.n_kv_head, G = d.group();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int64_t tt = static_cast<int64_t>(T) * T;
  const int64_t ld = d.qkv_cols();
  const int64_t lo = d.q_cols();
  const int64_t q_step = static_cast<int64_t>(G) * hs, s_step = G * tt;
  block = attention_causal_block(dev, T, block);
  Buffer scratch = dev.alloc(NH * tt * 4, MemCategory::workspace);
  float* datt = scratch.f32();  // (NH, T, T): dP, then dS in place
  for (int b = 0; b < B; ++b) {
    const int64_t off = b * T * ld;
    const float* q = qkv + off;
    const float* k = q + lo;
    const float* v = k + d.kv_cols();
    float* dq = dqkv + off;
    float* dk = dq + lo;
    float* dv = dk + d.kv_cols();
    const float* dout_b = dout + static_cast<int64_t>(b) * T * lo;
    const float* att_b = att + b * NH * tt;
    for (int g = 0; g < G; ++g)
      for_each_block(T, block, [&](int r0, int r1) {
        // dP_h[r0:r1, 0:r1] = dout_h[r0:r1] (T, hs) @ V_j[0:r1]^T; the softmax reads no further
        dev.gemm_batched(false, true, r1 - r0, r1, hs, 1.0f,
                         dout_b + g * hs + static_cast<int64_t>(r0) * lo, lo, q_step, v, ld, hs,
                         0.0f, datt + g * tt + r0 * T, T, s_step, NKV);
      });
    for (int g = 0; g < G; ++g)
      for_each_block(T, block, [&](int j0, int j1) {
        // dV_j[j0:j1] (T, hs) (+)= P_h[j0:T, j0:j1]^T @ dout_h[j0:T], summed over the group
        dev.gemm_batched(true, false, j1 - j0, hs, T - j0, 1.0f, att_b + g * tt + j0 * T + j0, T,
                         s_step, dout_b + g * hs + static_cast<int64_t>(j0) * lo, lo, q_step,
                         g == 0 ? 0.0f : 1.0f, dv + j0 * ld, ld, hs, NKV);
      });
    attention_softmax_backward(dev, datt, att_b, datt, NH, T);
    // S = scale Q K^T:  dQ_h = scale dS_h @ K_j,  dK_j = sum over the group of scale dS_h^T @ Q_h
    for (int g = 0; g < G; ++g)
      for_each_block(T, block, [&](int r0, int r1) {
        dev.gemm_batched(false, false, r1 - r0, hs, r1, scale, datt + g * tt + r0 * T, T, s_step, k,
                         ld, hs, 0.0f, dq + g * hs + r0 * ld, ld, q_step, NKV);
      });
    for (int g = 0; g < G; ++g)
      for_each_block(T, block, [&](int j0, int j1) {
        dev.gemm_batched(true, false, j1 - j0, hs, T - j0, scale, datt + g * tt + j0 * T + j0, T,
                         s_step, q + g * hs + j0 * ld, ld, q_step, g == 0 ? 0.0f : 1.0f,
                         dk + j0 * ld, ld, hs, NKV);
      });
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

// Blocks of 32 positions: at T = 128 the six products skip 6 of 16 blocks. With OpenBLAS, blocks
// of 16, 32 and 64 run the small preset's step GEMMs within a millisecond of each other and 2 to
// 5 ms (of ~105) faster than whole sequences; 32 takes half the calls of 16 (bench_model's
// BM_StepGemms, docs/bench/perf-notes.md).
const AttentionKernels kCpuAttention = {cpu::softmax_forward, cpu::softmax_backward,
                                        [](const Device&) { return kCpuAttentionCausalBlock; }};
}  // namespace shardlab
