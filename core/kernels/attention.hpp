// Causal multi-head self-attention on a packed qkv tensor (B, T, 3C): q | k | v, head h at
// columns [h*hs, (h+1)*hs) of each third, hs = C / NH. Per head (Vaswani et al. 2017):
//   S = scale * Q K^T (scale = 1/sqrt(hs)),  P = causal_softmax(S),  out = P V.
// Grouped-query attention (Ainslie et al. 2023) has fewer K/V heads than query heads: NKV divides
// NH, qkv rows are (NH + 2 NKV) hs wide (q | k | v), and query head h reads K/V head h / (NH/NKV).
// NKV = NH is multi-head attention (the same calls, bit for bit), NKV = 1 multi-query. The K/V
// broadcast is an index map, not a copy: the products run once per member g of a group, as one
// batch of NKV heads with query and score strides G = NH/NKV heads apart; backward sums a K/V
// head's gradient over its group by accumulating those products (beta 1) in the order g = 0..G-1.
// QK^T, PV and their backward products go through Device::gemm_batched (batches of NH heads,
// strided views into qkv, no permute copies); only the softmax is a kernel of its own.
// Causal blocks: the products run per block of query rows (and, for dK and dV, of key rows) and
// skip the blocks above the diagonal, where P and dS are 0: with blocks of T/4, 6 of 16 blocks.
// The block size is the device's (AttentionKernels::causal_block); 0 runs whole sequences.
// Softmax backward, per row: dS = P * (dP - sum_j P_j dP_j) (derivation in docs/model.md).
#pragma once

#include <cstdint>

#include "core/base/hd.hpp"
#include "core/device/device.hpp"
#include "core/kernels/fastmath.hpp"

namespace shardlab {

// In place on one row of T scores for query position t: entries [0, t] become the softmax of the
// (already scaled) scores, entries (t, T) become 0 (the causal mask).
SL_HD void attention_softmax_row(float* row /* (T) */, int t, int T) {
  float mx = row[0];
  for (int j = 1; j <= t; ++j) mx = row[j] > mx ? row[j] : mx;
  float sum = 0.0f;
  for (int j = 0; j <= t; ++j) {
    row[j] = exp_nonpos_approx(row[j] - mx);
    sum += row[j];
  }
  float inv = 1.0f / sum;
  for (int j = 0; j <= t; ++j) row[j] *= inv;
  for (int j = t + 1; j < T; ++j) row[j] = 0.0f;
}

// dS = P * (dP - <P, dP>) for one row; dpre may alias datt. Masked entries get 0.
SL_HD void attention_softmax_backward_row(float* dpre /* (T) */, const float* att /* (T) */,
                                          const float* datt /* (T) */, int t, int T) {
  float dot = 0.0f;
  for (int j = 0; j <= t; ++j) dot += att[j] * datt[j];
  for (int j = 0; j <= t; ++j) dpre[j] = att[j] * (datt[j] - dot);
  for (int j = t + 1; j < T; ++j) dpre[j] = 0.0f;
}

// Row r of the (BH, T, T) tensor is query position r % T.
void attention_softmax_forward(Device& dev, float* att /* (BH, T, T) scores in, probs out */,
                               int BH, int T);
void attention_softmax_backward(Device& dev, float* dpre /* (BH, T, T) */,
                                const float* att /* (BH, T, T) */,
                                const float* datt /* (BH, T, T) */, int BH, int T);

// Positions per causal block of the products on dev for sequences of T: `block` if positive, else
// the device's; T (one block per sequence) where that is 0 or at least T.
int attention_causal_block(const Device& dev, int T, int block = 0);

// The shapes of one attention call: NH query heads, NKV K/V heads (dividing NH), hs per head.
struct AttentionDims {
  int B = 0, T = 0;
  int n_head = 0;     // NH
  int n_kv_head = 0;  // NKV
  int head_dim = 0;   // hs
  int group() const { return n_head / n_kv_head; }
  int64_t q_cols() const { return static_cast<int64_t>(n_head) * head_dim; }      // out's width
  int64_t kv_cols() const { return static_cast<int64_t>(n_kv_head) * head_dim; }  // k's, v's
  int64_t qkv_cols() const { return q_cols() + 2 * kv_cols(); }                   // a qkv row
  // Multi-head attention over C = NH * hs, as GPT-2's.
  static AttentionDims mha(int B, int T, int C, int NH) { return {B, T, NH, NH, C / NH}; }
};

// Composites over gemm_batched and the softmax kernels: run on any device as they are.
// block: as attention_causal_block's. Throws InvalidArgument when NKV does not divide NH.
void attention_forward(Device& dev, float* out /* (B, T, NH hs) */, float* att /* (B, NH, T, T) */,
                       const float* qkv /* (B, T, qkv_cols) */, const AttentionDims& d,
                       int block = 0);
// dqkv overwritten. Scratch: one (NH, T, T) buffer under MemCategory::workspace.
void attention_backward(Device& dev, float* dqkv /* (B, T, qkv_cols) */,
                        const float* dout /* (B, T, NH hs) */,
                        const float* qkv /* (B, T, qkv_cols) */,
                        const float* att /* (B, NH, T, T) */, const AttentionDims& d,
                        int block = 0);
// Multi-head attention on (B, T, 3C) as GPT-2's block calls it.
inline void attention_forward(Device& dev, float* out /* (B, T, C) */,
                              float* att /* (B, NH, T, T) */, const float* qkv /* (B, T, 3C) */,
                              int B, int T, int C, int NH, int block = 0) {
  attention_forward(dev, out, att, qkv, AttentionDims::mha(B, T, C, NH), block);
}
inline void attention_backward(Device& dev, float* dqkv /* (B, T, 3C) */,
                               const float* dout /* (B, T, C) */, const float* qkv /* (B, T, 3C) */,
                               const float* att /* (B, NH, T, T) */, int B, int T, int C, int NH,
                               int block = 0) {
  attention_backward(dev, dqkv, dout, qkv, att, AttentionDims::mha(B, T, C, NH), block);
}

// This family's entry in a device's kernel table (kernel_table.hpp): the softmax rows; the
// products are Device::gemm_batched.
struct AttentionKernels {
  void (*softmax_forward)(Device& dev, float* att, int BH, int T);
  void (*softmax_backward)(Device& dev, float* dpre, const float* att, const float* datt, int BH,
                           int T);
  // Positions per causal block of the products on this device; 0: whole sequences, one call per
  // sequence and product (a GPU's choice: fewer, larger launches). The meta device answers what
  // its cluster spec says (`attention_causal_block`), so a simulated CPU runs the CPU's schedule.
  int (*causal_block)(const Device& dev);
};

// The CPU's causal block: at T = 128 the six products skip 6 of 16 blocks (attention.cpp).
// `shardlab calibrate` writes it into the specs it makes.
inline constexpr int kCpuAttentionCausalBlock = 32;

}  // namespace shardlab
