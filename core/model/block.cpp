// Transformer block forward and backward (pre-LayerNorm, GPT-2):
//   r = x + c_proj(attn(c_attn(ln_1(x)))),  y = r + mlp.c_proj(gelu(mlp.c_fc(ln_2(r))))
#include "core/base/error.hpp"
#include "core/kernels/attention.hpp"
#include "core/kernels/gelu.hpp"
#include "core/kernels/layernorm.hpp"
#include "core/kernels/linear.hpp"
#include "core/model/flash_shape.hpp"
#include "core/model/layers.hpp"
#include "core/model/params.hpp"

namespace shardlab {

namespace {
// Under GradWrite::overwrite, a LayerNorm's (C) weight and bias gradients start from zero: its
// backward only adds (C values, against the (C, 4C) weights the GEMMs write).
void start_layernorm_grads(Device& dev, GradWrite gw, float* dweight, float* dbias, int C) {
  if (gw == GradWrite::accumulate) return;
  dev.fill_zero(dweight, static_cast<int64_t>(C) * 4);
  dev.fill_zero(dbias, static_cast<int64_t>(C) * 4);
}

void check_acts(const BlockActivations& acts, int B, int T, const char* fn) {
  SL_CHECK(acts.allocated(), fn, ": block activations are not allocated");
  SL_CHECK(acts.B() == B && acts.T() == T, fn, ": activations are for B ", acts.B(), " T ",
           acts.T(), ", called with B ", B, " T ", T);
}

bool flash(const BlockActivations& acts) {
  return acts.kernels().attention == AttentionKernel::flash;
}
}  // namespace

void block_attn_forward(Device& dev, const GPTConfig& cfg, BlockActivations& acts, const float* x,
                        const float* attn_params, int B, int T) {
  check_acts(acts, B, T, "block_attn_forward");
  const int N = B * T, C = cfg.n_embd;
  const int64_t nc_bytes = static_cast<int64_t>(N) * C * 4;
  auto p = block_views(cfg, attn_params, static_cast<const float*>(nullptr));
  layernorm_forward(dev, acts.ln1, acts.ln1_mean, acts.ln1_rstd, x, p.ln1_w, p.ln1_b, N, C);
  linear_forward(dev, acts.qkv, acts.ln1, p.qkv_w, p.qkv_b, N, C, 3 * C);
  if (flash(acts)) {  // q, k and v: the three thirds of each packed qkv row (ld 3C)
    const int64_t ld = 3 * C;
    flash_attention_forward(dev, flash_shape(cfg, B, T), RowsOut{acts.atty, C}, acts.lse,
                            RowsIn{acts.qkv, ld}, RowsIn{acts.qkv + C, ld},
                            RowsIn{acts.qkv + 2 * C, ld});
  } else {
    attention_forward(dev, acts.atty, acts.att, acts.qkv, B, T, C, cfg.n_head);
  }
  dev.copy(acts.res2, x, nc_bytes);  // the residual, then c_proj accumulated on top
  linear_forward(dev, acts.res2, acts.atty, p.attproj_w, p.attproj_b, N, C, C, true);
}

void block_mlp_forward(Device& dev, const GPTConfig& cfg, float* y, BlockActivations& acts,
                       const float* mlp_params, int B, int T) {
  check_acts(acts, B, T, "block_mlp_forward");
  const int N = B * T, C = cfg.n_embd;
  const int64_t nc_bytes = static_cast<int64_t>(N) * C * 4;
  auto p = block_views(cfg, static_cast<const float*>(nullptr), mlp_params);
  layernorm_forward(dev, acts.ln2, acts.ln2_mean, acts.ln2_rstd, acts.res2, p.ln2_w, p.ln2_b, N, C);
  linear_forward(dev, acts.fch, acts.ln2, p.fc_w, p.fc_b, N, C, 4 * C);
  gelu_forward(dev, acts.fch_gelu, acts.fch, static_cast<int64_t>(N) * 4 * C);
  dev.copy(y, acts.res2, nc_bytes);
  linear_forward(dev, y, acts.fch_gelu, p.fcproj_w, p.fcproj_b, N, 4 * C, C, true);
}

void block_forward(Device& dev, const GPTConfig& cfg, float* y, BlockActivations& acts,
                   const float* x, const float* block_params, int B, int T) {
  check_acts(acts, B, T, "block_forward");
  block_attn_forward(dev, cfg, acts, x, block_params, B, T);
  block_mlp_forward(dev, cfg, y, acts, block_params + block_attn_numel(cfg), B, T);
}

void block_mlp_backward(Device& dev, const GPTConfig& cfg, float* dx, float* dmlp_params,
                        const float* dy, const BlockActivations& acts, const float* mlp_params,
                        int B, int T, GradWrite gw) {
  check_acts(acts, B, T, "block_mlp_backward");
  const int N = B * T, C = cfg.n_embd;
  const int64_t nc = static_cast<int64_t>(N) * C;
  auto p = block_views(cfg, static_cast<const float*>(nullptr), mlp_params);
  auto d = block_views(cfg, static_cast<float*>(nullptr), dmlp_params);
  // Scratch: wide (N, 4C) holds dfch, narrow (N, C) dln2.
  Buffer wide_buf = dev.alloc(nc * 4 * 4, MemCategory::workspace);
  Buffer narrow_buf = dev.alloc(nc * 4, MemCategory::workspace);
  float* wide = wide_buf.f32();
  float* narrow = narrow_buf.f32();
  // Every read of dy happens before dx (which may alias it) is written.
  const bool acc = gw == GradWrite::accumulate;
  linear_backward(dev, wide, d.fcproj_w, d.fcproj_b, dy, acts.fch_gelu, p.fcproj_w, N, 4 * C, C,
                  acc);
  gelu_backward(dev, wide, acts.fch, wide, nc * 4);
  linear_backward(dev, narrow, d.fc_w, d.fc_b, wide, acts.ln2, p.fc_w, N, C, 4 * C, acc);
  if (dx != dy) dev.copy(dx, dy, nc * 4);  // residual path
  start_layernorm_grads(dev, gw, d.ln2_w, d.ln2_b, C);
  layernorm_backward(dev, dx, d.ln2_w, d.ln2_b, narrow, acts.res2, p.ln2_w, acts.ln2_mean,
                     acts.ln2_rstd, N, C);
}

void block_attn_backward(Device& dev, const GPTConfig& cfg, float* dx, float* dattn_params,
                         const BlockActivations& acts, const float* x, const float* attn_params,
                         int B, int T, GradWrite gw) {
  check_acts(acts, B, T, "block_attn_backward");
  const int N = B * T, C = cfg.n_embd;
  const int64_t nc = static_cast<int64_t>(N) * C;
  auto p = block_views(cfg, attn_params, static_cast<const float*>(nullptr));
  auto d = block_views(cfg, dattn_params, static_cast<float*>(nullptr));
  // Scratch: wide (N, 4C) holds dqkv, narrow (N, C) datty, then dln1.
  Buffer wide_buf = dev.alloc(nc * 4 * 4, MemCategory::workspace);
  Buffer narrow_buf = dev.alloc(nc * 4, MemCategory::workspace);
  float* wide = wide_buf.f32();
  float* narrow = narrow_buf.f32();
  // dx holds dL/dr on entry
  const bool acc = gw == GradWrite::accumulate;
  linear_backward(dev, narrow, d.attproj_w, d.attproj_b, dx, acts.atty, p.attproj_w, N, C, C, acc);
  if (flash(acts)) {  // dqkv packed as qkv is: dq | dk | dv in each row of 3C
    const int64_t ld = 3 * C;
    flash_attention_backward(dev, flash_shape(cfg, B, T), RowsOut{wide, ld}, RowsOut{wide + C, ld},
                             RowsOut{wide + 2 * C, ld}, RowsIn{narrow, C}, RowsIn{acts.qkv, ld},
                             RowsIn{acts.qkv + C, ld}, RowsIn{acts.qkv + 2 * C, ld},
                             RowsIn{acts.atty, C}, acts.lse);
  } else {
    attention_backward(dev, wide, narrow, acts.qkv, acts.att, B, T, C, cfg.n_head);
  }
  linear_backward(dev, narrow, d.qkv_w, d.qkv_b, wide, acts.ln1, p.qkv_w, N, C, 3 * C, acc);
  start_layernorm_grads(dev, gw, d.ln1_w, d.ln1_b, C);
  layernorm_backward(dev, dx, d.ln1_w, d.ln1_b, narrow, x, p.ln1_w, acts.ln1_mean, acts.ln1_rstd, N,
                     C);
}

void block_backward(Device& dev, const GPTConfig& cfg, float* dx, float* dblock_params,
                    const float* dy, const BlockActivations& acts, const float* x,
                    const float* block_params, int B, int T, GradWrite gw) {
  check_acts(acts, B, T, "block_backward");
  const int64_t a = block_attn_numel(cfg);
  block_mlp_backward(dev, cfg, dx, dblock_params + a, dy, acts, block_params + a, B, T, gw);
  block_attn_backward(dev, cfg, dx, dblock_params, acts, x, block_params, B, T, gw);
}

}  // namespace shardlab
