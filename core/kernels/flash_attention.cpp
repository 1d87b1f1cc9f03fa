// Flash attention: the public functions (checks, the workspace, the formulas), then the CPU
// implementation: tiles of kFlashBlockQ queries against kFlashBlockK keys, their products on
// Device::gemm, the row work in attention.hpp's lanes arithmetic (cpu_simd.hpp: the same bits at
// every vector width).
#include "core/kernels/flash_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/base/cpu_simd.hpp"
#include "core/base/error.hpp"
#include "core/device/cpu_gemm.hpp"
#include "core/kernels/kernel_table.hpp"

namespace shardlab {

float FlashShape::score_scale() const {
  return scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(hs));
}

void check_flash_shape(const FlashShape& s) {
  SL_CHECK(s.B > 0 && s.T > 0, "flash attention: B ", s.B, " and T ", s.T, " must be positive");
  SL_CHECK(s.NH > 0 && s.NKV > 0 && s.NH % s.NKV == 0, "flash attention: n_kv_heads ", s.NKV,
           " must be positive and divide n_head ", s.NH);
  SL_CHECK(s.hs > 0 && s.hs <= kFlashMaxHeadSize, "flash attention: head size ", s.hs,
           " must be in [1, ", kFlashMaxHeadSize, "]");
}

namespace {

int block_q(const FlashShape& s) { return std::min(kFlashBlockQ, s.T); }
int block_k(const FlashShape& s) { return std::min(kFlashBlockK, s.T); }

// The tiles of one call, in floats (the layout is each entry's own).
int64_t tile_floats(const FlashShape& s, bool backward) {
  const int64_t br = block_q(s), bc = block_k(s), hs = s.hs;
  const bool wide = s.dtype != DType::f32;  // 16-bit tiles are widened to fp32 first
  if (!backward) return br * bc + br * hs + 2 * br + (wide ? (br + 2 * bc) * hs : 0);
  return 2 * br * bc + 2 * bc * hs + (wide ? 2 * (br + bc) * hs : 0);
}

int64_t causal_pairs(const FlashShape& s) { return static_cast<int64_t>(s.T) * (s.T + 1) / 2; }

void check_rows(const char* fn, const char* name, const void* p, int64_t ld, int heads,
                const FlashShape& s) {
  SL_CHECK(p != nullptr, fn, ": ", name, " is null");
  SL_CHECK(ld >= static_cast<int64_t>(heads) * s.hs, fn, ": ", name, "'s row stride ", ld,
           " is below its ", heads, " heads x head size ", s.hs);
}

}  // namespace

int64_t flash_attention_saved_bytes(const FlashShape& s) {
  return 4 * static_cast<int64_t>(s.B) * s.NH * s.T;
}

int64_t flash_attention_workspace_bytes(const FlashShape& s, bool backward) {
  int64_t floats = tile_floats(s, backward);
  if (backward)
    floats += static_cast<int64_t>(s.B) * s.NH * s.T +       // D
              static_cast<int64_t>(s.group()) * s.T * s.hs;  // dQ of one group
  return 4 * floats;
}

double flash_attention_flops(const FlashShape& s, bool backward) {
  return (backward ? 10.0 : 4.0) * s.B * s.NH * static_cast<double>(s.hs) * causal_pairs(s);
}

int64_t flash_attention_bytes(const FlashShape& s, bool backward) {
  const int64_t es = static_cast<int64_t>(dtype_size(s.dtype));
  const int64_t rows = static_cast<int64_t>(s.B) * s.T * s.hs;
  const int64_t lse = 4 * static_cast<int64_t>(s.B) * s.NH * s.T;
  if (!backward) return es * rows * (2 * s.NH + 2 * s.NKV) + lse;
  return es * rows * (4 * s.NH + 4 * s.NKV) + 3 * lse;
}

void flash_attention_forward(Device& dev, const FlashShape& s, RowsOut out, float* lse, RowsIn q,
                             RowsIn k, RowsIn v) {
  check_flash_shape(s);
  const char* fn = "flash_attention_forward";
  check_rows(fn, "q", q.data, q.ld, s.NH, s);
  check_rows(fn, "k", k.data, k.ld, s.NKV, s);
  check_rows(fn, "v", v.data, v.ld, s.NKV, s);
  check_rows(fn, "out", out.data, out.ld, s.NH, s);
  SL_CHECK(lse != nullptr, fn, ": lse is null");
  Buffer ws = dev.alloc(flash_attention_workspace_bytes(s, false), MemCategory::workspace);
  kernel_table(dev).flash_attention->forward(dev, s, out, lse, q, k, v, ws.data());
}

void flash_attention_backward(Device& dev, const FlashShape& s, RowsOut dq, RowsOut dk, RowsOut dv,
                              RowsIn dout, RowsIn q, RowsIn k, RowsIn v, RowsIn out,
                              const float* lse) {
  check_flash_shape(s);
  const char* fn = "flash_attention_backward";
  check_rows(fn, "q", q.data, q.ld, s.NH, s);
  check_rows(fn, "k", k.data, k.ld, s.NKV, s);
  check_rows(fn, "v", v.data, v.ld, s.NKV, s);
  check_rows(fn, "out", out.data, out.ld, s.NH, s);
  check_rows(fn, "dout", dout.data, dout.ld, s.NH, s);
  check_rows(fn, "dq", dq.data, dq.ld, s.NH, s);
  check_rows(fn, "dk", dk.data, dk.ld, s.NKV, s);
  check_rows(fn, "dv", dv.data, dv.ld, s.NKV, s);
  SL_CHECK(lse != nullptr, fn, ": lse is null");
  Buffer ws = dev.alloc(flash_attention_workspace_bytes(s, true), MemCategory::workspace);
  kernel_table(dev).flash_attention->backward(dev, s, dq, dk, dv, dout, q, k, v, out, lse,
                                              ws.data());
}

// ---- CPU --------------------------------------------------------------------------------------

namespace cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The online-softmax step of `br` query rows r0 + i on a tile of scores S (row stride ldS)
// against keys [c0, c0 + bc): row i sees the keys up to its own position, n of them; its scores
// become P = exp(s - m'), the rest of the row 0, and its output accumulator o (hs per row) is
// scaled by exp(m - m') (flash_softmax_tile_row, with the max and sum in lanes).
SL_CPU_INLINE void forward_rows_body(float* S, int ldS, int br, int bc, int r0, int c0, float* m,
                                     float* l, float* o, int hs) {
  for (int i = 0; i < br; ++i) {
    float* row = S + static_cast<int64_t>(i) * ldS;
    const int n = std::min(bc, r0 + i - c0 + 1);
    if (n <= 0) {  // no key of this tile is visible to the row: P 0, accumulator unchanged
      for (int j = 0; j < bc; ++j) row[j] = 0.0f;
      continue;
    }
    const float tile_max = lanes_max(row, n);
    const float mx = tile_max > m[i] ? tile_max : m[i];
    for (int j = 0; j < n; ++j) row[j] = exp_nonpos_approx(row[j] - mx);
    const float sum = lanes_sum(n, [row](int j) { return row[j]; });
    for (int j = n; j < bc; ++j) row[j] = 0.0f;
    const float corr = l[i] == 0.0f ? 0.0f : exp_nonpos_approx(m[i] - mx);
    l[i] = l[i] * corr + sum;
    m[i] = mx;
    float* oi = o + static_cast<int64_t>(i) * hs;
    for (int d = 0; d < hs; ++d) oi[d] *= corr;
  }
}
SL_CPU_SIMD_KERNEL(forward_rows,
                   (float* S, int ldS, int br, int bc, int r0, int c0, float* m, float* l, float* o,
                    int hs),
                   (S, ldS, br, bc, r0, c0, m, l, o, hs))

// Backward, probabilities of a tile: P = exp(S - lse_t) where key c0 + j <= t = r0 + i, else 0.
SL_CPU_INLINE void backward_probs_body(float* S, int ldS, int br, int bc, int r0, int c0,
                                       const float* lse) {
  for (int i = 0; i < br; ++i) {
    float* row = S + static_cast<int64_t>(i) * ldS;
    const int n = std::max(0, std::min(bc, r0 + i - c0 + 1));
    const float li = lse[i];
    for (int j = 0; j < n; ++j) row[j] = exp_nonpos_approx(row[j] - li);
    for (int j = n; j < bc; ++j) row[j] = 0.0f;
  }
}
SL_CPU_SIMD_KERNEL(backward_probs,
                   (float* S, int ldS, int br, int bc, int r0, int c0, const float* lse),
                   (S, ldS, br, bc, r0, c0, lse))

// dS = P (dP - D_t), in place of dP; 0 where P is.
SL_CPU_INLINE void backward_dscores_body(float* dP, const float* P, int ldS, int br, int bc,
                                         const float* D) {
  for (int i = 0; i < br; ++i) {
    float* dp = dP + static_cast<int64_t>(i) * ldS;
    const float* p = P + static_cast<int64_t>(i) * ldS;
    const float di = D[i];
    for (int j = 0; j < bc; ++j) dp[j] = p[j] * (dp[j] - di);
  }
}
SL_CPU_SIMD_KERNEL(backward_dscores,
                   (float* dP, const float* P, int ldS, int br, int bc, const float* D),
                   (dP, P, ldS, br, bc, D))

// D_t = dO_t . O_t for `rows` rows of hs (row strides ldo, ldout), in lanes.
SL_CPU_INLINE void row_dots_body(float* D, const float* dout, int64_t ldd, const float* out,
                                 int64_t ldo, int rows, int hs) {
  for (int i = 0; i < rows; ++i) {
    const float* a = dout + i * ldd;
    const float* b = out + i * ldo;
    D[i] = lanes_sum(hs, [a, b](int d) { return a[d] * b[d]; });
  }
}
SL_CPU_SIMD_KERNEL(row_dots,
                   (float* D, const float* dout, int64_t ldd, const float* out, int64_t ldo,
                    int rows, int hs),
                   (D, dout, ldd, out, ldo, rows, hs))

// A tile of `rows` rows of head h from positions (b, t0 ...) of x: a pointer to fp32 rows and
// their stride, straight into x when it is fp32, else widened into `scratch` (hs apart).
struct Tile {
  const float* p;
  int64_t ld;
};
Tile load_tile(RowsIn x, DType t, const FlashShape& s, int b, int t0, int rows, int h,
               float* scratch) {
  const int64_t es = static_cast<int64_t>(dtype_size(t));
  const int64_t row0 = static_cast<int64_t>(b) * s.T + t0;
  const char* base =
      static_cast<const char*>(x.data) + (row0 * x.ld + static_cast<int64_t>(h) * s.hs) * es;
  if (t == DType::f32) return {reinterpret_cast<const float*>(base), x.ld};
  for (int i = 0; i < rows; ++i)
    widen_to_f32(scratch + static_cast<int64_t>(i) * s.hs, base + i * x.ld * es, t, s.hs);
  return {scratch, s.hs};
}

// rows x hs fp32 values (stride hs), times `mul`, into head h of positions (b, t0 ...) of y.
void store_rows(RowsOut y, const FlashShape& s, int b, int t0, int rows, int h, const float* src,
                float mul = 1.0f) {
  const int64_t es = static_cast<int64_t>(dtype_size(s.dtype));
  const int64_t row0 = static_cast<int64_t>(b) * s.T + t0;
  for (int i = 0; i < rows; ++i) {
    char* dst =
        static_cast<char*>(y.data) + ((row0 + i) * y.ld + static_cast<int64_t>(h) * s.hs) * es;
    const float* r = src + static_cast<int64_t>(i) * s.hs;
    for (int d = 0; d < s.hs; ++d) store_from_f32(dst, static_cast<size_t>(d), s.dtype, r[d] * mul);
  }
}

void forward(Device& dev, const FlashShape& s, RowsOut out, float* lse, RowsIn q, RowsIn k,
             RowsIn v, void* workspace) {
  const int Br = block_q(s), Bc = block_k(s), hs = s.hs, T = s.T;
  const float scale = s.score_scale();
  float* S = static_cast<float*>(workspace);     // (Br, Bc) scores, then probabilities
  float* o = S + static_cast<int64_t>(Br) * Bc;  // (Br, hs) unnormalised output
  float* m = o + static_cast<int64_t>(Br) * hs;  // (Br) running max
  float* l = m + Br;                             // (Br) running sum
  float* qw = l + Br;                            // widened tiles (16-bit inputs only)
  float* kw = qw + static_cast<int64_t>(Br) * hs;
  float* vw = kw + static_cast<int64_t>(Bc) * hs;
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h) {
      const int g = h / s.group();
      float* lse_bh = lse + (static_cast<int64_t>(b) * s.NH + h) * T;
      for (int r0 = 0; r0 < T; r0 += Br) {
        const int br = std::min(Br, T - r0), r1 = r0 + br;
        const Tile Q = load_tile(q, s.dtype, s, b, r0, br, h, qw);
        std::fill(m, m + br, kNegInf);
        std::fill(l, l + br, 0.0f);
        std::fill(o, o + static_cast<int64_t>(br) * hs, 0.0f);
        for (int c0 = 0; c0 < r1; c0 += Bc) {  // keys at or past r1 are hidden from every row
          const int bc = std::min(Bc, r1 - c0);
          const Tile K = load_tile(k, s.dtype, s, b, c0, bc, g, kw);
          const Tile V = load_tile(v, s.dtype, s, b, c0, bc, g, vw);
          // S (br, bc) = scale Q K^T
          dev.gemm(false, true, br, bc, hs, scale, Q.p, static_cast<int>(Q.ld), K.p,
                   static_cast<int>(K.ld), 0.0f, S, Bc);
          forward_rows(S, Bc, br, bc, r0, c0, m, l, o, hs);
          // o (br, hs) += P V
          dev.gemm(false, false, br, hs, bc, 1.0f, S, Bc, V.p, static_cast<int>(V.ld), 1.0f, o, hs);
        }
        for (int i = 0; i < br; ++i) {
          store_rows(out, s, b, r0 + i, 1, h, o + static_cast<int64_t>(i) * hs, 1.0f / l[i]);
          lse_bh[r0 + i] = m[i] + std::log(l[i]);
        }
      }
    }
}

void backward(Device& dev, const FlashShape& s, RowsOut dq, RowsOut dk, RowsOut dv, RowsIn dout,
              RowsIn q, RowsIn k, RowsIn v, RowsIn out, const float* lse, void* workspace) {
  const int Br = block_q(s), Bc = block_k(s), hs = s.hs, T = s.T, G = s.group();
  const float scale = s.score_scale();
  float* D = static_cast<float*>(workspace);                // (B, NH, T)
  float* dqacc = D + static_cast<int64_t>(s.B) * s.NH * T;  // (G, T, hs)
  float* P = dqacc + static_cast<int64_t>(G) * T * hs;      // (Br, Bc)
  float* dP = P + static_cast<int64_t>(Br) * Bc;            // (Br, Bc), then dS
  float* dkacc = dP + static_cast<int64_t>(Br) * Bc;        // (Bc, hs)
  float* dvacc = dkacc + static_cast<int64_t>(Bc) * hs;     // (Bc, hs)
  float* qw = dvacc + static_cast<int64_t>(Bc) * hs;        // widened tiles
  float* dow = qw + static_cast<int64_t>(Br) * hs;
  float* kw = dow + static_cast<int64_t>(Br) * hs;
  float* vw = kw + static_cast<int64_t>(Bc) * hs;
  // D_t = dO_t . O_t, in blocks of Br rows
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int r0 = 0; r0 < T; r0 += Br) {
        const int br = std::min(Br, T - r0);
        const Tile dO = load_tile(dout, s.dtype, s, b, r0, br, h, dow);
        const Tile O = load_tile(out, s.dtype, s, b, r0, br, h, qw);
        row_dots(D + (static_cast<int64_t>(b) * s.NH + h) * T + r0, dO.p, dO.ld, O.p, O.ld, br, hs);
      }
  for (int b = 0; b < s.B; ++b)
    for (int g = 0; g < s.NKV; ++g) {
      std::fill(dqacc, dqacc + static_cast<int64_t>(G) * T * hs, 0.0f);
      for (int c0 = 0; c0 < T; c0 += Bc) {
        const int bc = std::min(Bc, T - c0);
        const Tile K = load_tile(k, s.dtype, s, b, c0, bc, g, kw);
        const Tile V = load_tile(v, s.dtype, s, b, c0, bc, g, vw);
        std::fill(dkacc, dkacc + static_cast<int64_t>(bc) * hs, 0.0f);
        std::fill(dvacc, dvacc + static_cast<int64_t>(bc) * hs, 0.0f);
        for (int hh = 0; hh < G; ++hh) {
          const int h = g * G + hh;
          const int64_t bh = (static_cast<int64_t>(b) * s.NH + h) * T;
          // Queries from the block holding c0 on: earlier ones see none of these keys.
          for (int r0 = c0 / Br * Br; r0 < T; r0 += Br) {
            const int br = std::min(Br, T - r0);
            const Tile Q = load_tile(q, s.dtype, s, b, r0, br, h, qw);
            const Tile dO = load_tile(dout, s.dtype, s, b, r0, br, h, dow);
            const int qld = static_cast<int>(Q.ld), dold = static_cast<int>(dO.ld);
            // P (br, bc) = exp(scale Q K^T - lse)
            dev.gemm(false, true, br, bc, hs, scale, Q.p, qld, K.p, static_cast<int>(K.ld), 0.0f, P,
                     Bc);
            backward_probs(P, Bc, br, bc, r0, c0, lse + bh + r0);
            // dV (bc, hs) += P^T dO
            dev.gemm(true, false, bc, hs, br, 1.0f, P, Bc, dO.p, dold, 1.0f, dvacc, hs);
            // dP (br, bc) = dO V^T, then dS = P (dP - D)
            dev.gemm(false, true, br, bc, hs, 1.0f, dO.p, dold, V.p, static_cast<int>(V.ld), 0.0f,
                     dP, Bc);
            backward_dscores(dP, P, Bc, br, bc, D + bh + r0);
            // dQ (br, hs) += scale dS K;  dK (bc, hs) += scale dS^T Q
            dev.gemm(false, false, br, hs, bc, scale, dP, Bc, K.p, static_cast<int>(K.ld), 1.0f,
                     dqacc + (static_cast<int64_t>(hh) * T + r0) * hs, hs);
            dev.gemm(true, false, bc, hs, br, scale, dP, Bc, Q.p, qld, 1.0f, dkacc, hs);
          }
        }
        store_rows(dk, s, b, c0, bc, g, dkacc);
        store_rows(dv, s, b, c0, bc, g, dvacc);
      }
      for (int hh = 0; hh < G; ++hh)
        store_rows(dq, s, b, 0, T, g * G + hh, dqacc + static_cast<int64_t>(hh) * T * hs);
    }
}

}  // namespace
}  // namespace cpu

const FlashAttentionKernels kCpuFlashAttention = {cpu::forward, cpu::backward};

}  // namespace shardlab
