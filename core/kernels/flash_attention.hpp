// Flash attention: causal softmax(scale Q K^T) V computed in tiles with an online softmax, so that
// the (T, T) scores and probabilities never exist in memory (Dao et al. 2022, "FlashAttention";
// the loop order of FlashAttention-2, Dao 2023). Forward saves one logsumexp per query row,
//   lse_t = log sum_{j <= t} exp(s_tj),   s_tj = scale q_t . k_j,
// and backward recomputes each tile's probabilities from it, p_tj = exp(s_tj - lse_t):
//   D_t = dO_t . O_t,  dV_j = sum_t p_tj dO_t,  dp_tj = dO_t . V_j,  ds_tj = p_tj (dp_tj - D_t),
//   dQ_t = scale sum_j ds_tj K_j,  dK_j = scale sum_t ds_tj Q_t
// (D_t = sum_j p_tj dp_tj, the softmax backward's dot, from O instead of from P: docs/model.md).
//
// Grouped-query attention: NKV key/value heads serve NH query heads (NKV divides NH), query head
// h reading key/value head h / (NH / NKV); NKV = NH is multi-head attention, NKV = 1 multi-query.
// The gradients of a key/value head sum over its group's query heads.
//
// Tensors are rows of heads: element d of head h at position (b, t) of a Rows tensor is
// data[(b T + t) ld + h hs + d], so GPT-2's packed qkv (B, T, 3C) is three Rows views with ld 3C
// and no copy, and separate q, k, v buffers (Llama's, after RoPE) are Rows with ld = heads * hs.
// q, k, v, out, dout, dq, dk, dv are all in the shape's dtype (f32, bf16 or f16: autocast's
// scaled_dot_product_attention takes and returns 16-bit tensors); every product, sum and the
// softmax run in fp32, and lse is fp32.
//
// On the CPU the tiles' products are Device::gemm calls (16-bit tiles widened to fp32 first) and
// the row work is attention.hpp's lanes arithmetic; the CUDA kernels run the SL_HD row functions
// below, one thread per row, which the CPU tests also run. The meta device charges the FLOPs and
// bytes of the fused kernel (flash_attention_flops, flash_attention_bytes).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/base/dtype.hpp"
#include "core/base/hd.hpp"
#include "core/device/device.hpp"
#include "core/kernels/fastmath.hpp"

namespace shardlab {

struct FlashShape {
  int B = 0, T = 0;  // sequences, positions
  int NH = 0;        // query heads
  int NKV = 0;       // key/value heads, dividing NH
  int hs = 0;        // head size
  DType dtype = DType::f32;
  float scale = 0.0f;  // of the scores; 0: 1/sqrt(hs)

  SL_HD int group() const { return NH / NKV; }
  float score_scale() const;
};

// A tensor of rows of heads (see above): row (b, t) starts at data + (b T + t) ld elements.
struct RowsIn {
  const void* data = nullptr;
  int64_t ld = 0;
};
struct RowsOut {
  void* data = nullptr;
  int64_t ld = 0;
};

// Throws InvalidArgument naming the field for a shape no kernel can run: non-positive sizes,
// NKV not dividing NH, hs above kFlashMaxHeadSize.
void check_flash_shape(const FlashShape& s);

// out overwritten; lse (B, NH, T) written. Scratch: flash_attention_workspace_bytes(s, false) of
// MemCategory::workspace, taken and returned inside the call.
void flash_attention_forward(Device& dev, const FlashShape& s, RowsOut out, float* lse, RowsIn q,
                             RowsIn k, RowsIn v);
// dq, dk, dv overwritten (they may be views into one packed buffer, never into q, k, v). out and
// lse are the forward's. Scratch: flash_attention_workspace_bytes(s, true).
void flash_attention_backward(Device& dev, const FlashShape& s, RowsOut dq, RowsOut dk, RowsOut dv,
                              RowsIn dout, RowsIn q, RowsIn k, RowsIn v, RowsIn out,
                              const float* lse);

// What the forward saves beyond its output: the logsumexp, 4 B NH T bytes. (Naive attention
// saves the probabilities, 4 B NH T^2.)
int64_t flash_attention_saved_bytes(const FlashShape& s);
// The scratch of one call, the same on every device so that a plan on the meta device equals a
// run's tracker peak. Forward: the CPU's tiles, O(1) in T. Backward: D (B NH T) and one key/value
// group's fp32 dQ accumulator (group T hs) besides the tiles, O(T). A GPU keeps its tiles in
// shared memory and uses D only; it takes the same bytes (under 1 MiB more at hs 128).
int64_t flash_attention_workspace_bytes(const FlashShape& s, bool backward);
// Multiply-adds times two over the causal pairs, B NH hs T (T + 1) / 2 pairs-by-dims: forward
// 2 products (Q K^T, P V), backward 5 (Q K^T again, dV, dP, dQ, dK).
double flash_attention_flops(const FlashShape& s, bool backward);
// Bytes a fused kernel must move at least: forward reads q, k, v and writes out and lse;
// backward reads q, k, v, out, dout, lse, writes dq, dk, dv and D, and reads D.
int64_t flash_attention_bytes(const FlashShape& s, bool backward);

// Tiles: kFlashBlockQ query rows against kFlashBlockK keys (the CPU's; a GPU's are its own).
inline constexpr int kFlashBlockQ = 64;
inline constexpr int kFlashBlockK = 128;
inline constexpr int kFlashMaxHeadSize = 256;

// ---- the row arithmetic, shared by the CUDA kernels and the CPU tests --------------------------

// One query row's online-softmax step over a tile of scores (Milakov and Gimelshein 2018):
// s[0, n) are the row's scores against the tile's keys it may see (n >= 1). With m, l the running
// max and sum, m' = max(m, max_j s_j): s_j becomes exp(s_j - m'), l becomes
// l exp(m - m') + sum_j exp(s_j - m'), m becomes m'. Returns exp(m - m'), the factor the row's
// output accumulator is scaled by before this tile's P V is added: 0 on the row's first tile
// (m = -inf, l = 0).
SL_HD float flash_softmax_tile_row(float* s, int n, float* m, float* l) {
  float mx = *m;
  for (int j = 0; j < n; ++j) mx = s[j] > mx ? s[j] : mx;
  float sum = 0.0f;
  for (int j = 0; j < n; ++j) {
    s[j] = exp_nonpos_approx(s[j] - mx);
    sum += s[j];
  }
  const float corr = *l == 0.0f ? 0.0f : exp_nonpos_approx(*m - mx);
  *l = *l * corr + sum;
  *m = mx;
  return corr;
}

// The forward of one query row against one tile of n keys (n >= 1): rows j of k and v at
// k + j ld, v + j ld (fp32); o (hs) the row's unnormalised output, m and l its running max and
// sum; s (n) scratch. The CUDA kernel's inner step, one thread per query row.
SL_HD void flash_forward_row_tile(float* o, float* m, float* l, float* s, const float* q,
                                  const float* k, const float* v, int64_t ld, int n, int hs,
                                  float scale) {
  for (int j = 0; j < n; ++j) {
    float dot = 0.0f;
    for (int d = 0; d < hs; ++d) dot += q[d] * k[j * ld + d];
    s[j] = scale * dot;
  }
  const float corr = flash_softmax_tile_row(s, n, m, l);
  for (int d = 0; d < hs; ++d) {
    float acc = o[d] * corr;
    for (int j = 0; j < n; ++j) acc += s[j] * v[j * ld + d];
    o[d] = acc;
  }
}

// The end of a row's forward: o /= l, and the row's logsumexp m + log l.
SL_HD float flash_forward_row_finish(float* o, float m, float l, int hs) {
  const float inv = 1.0f / l;
  for (int d = 0; d < hs; ++d) o[d] *= inv;
  return m + logf(l);
}

// The backward of one (query t, key j) pair on one thread: p = exp(s - lse_t), ds = p (dp - D_t).
// Adds p dO_t to dv_j and scale ds Q_t to dk_j (the key row's thread), or scale ds K_j to dq_t
// (the query row's thread): pass null for the accumulators a thread does not own.
SL_HD void flash_backward_pair(float* dq, float* dk, float* dv, const float* q, const float* k,
                               const float* v, const float* dout, float lse, float D, int hs,
                               float scale) {
  float dot = 0.0f, dp = 0.0f;
  for (int d = 0; d < hs; ++d) {
    dot += q[d] * k[d];
    dp += dout[d] * v[d];
  }
  const float p = exp_nonpos_approx(scale * dot - lse);
  const float ds = p * (dp - D);
  if (dv)
    for (int d = 0; d < hs; ++d) dv[d] += p * dout[d];
  if (dk)
    for (int d = 0; d < hs; ++d) dk[d] += scale * ds * q[d];
  if (dq)
    for (int d = 0; d < hs; ++d) dq[d] += scale * ds * k[d];
}

// ---- the family's entry in a device's kernel table (kernel_table.hpp) ------------------------

struct FlashAttentionKernels {
  // `workspace`: flash_attention_workspace_bytes(s, ...) bytes the public function took.
  void (*forward)(Device& dev, const FlashShape& s, RowsOut out, float* lse, RowsIn q, RowsIn k,
                  RowsIn v, void* workspace);
  void (*backward)(Device& dev, const FlashShape& s, RowsOut dq, RowsOut dk, RowsOut dv,
                   RowsIn dout, RowsIn q, RowsIn k, RowsIn v, RowsIn out, const float* lse,
                   void* workspace);
};

}  // namespace shardlab
