// The Llama family's layers: embedding, attention half (RMSNorm, q/k/v projections, RoPE,
// grouped-query attention, o_proj), MLP half (RMSNorm, gate/up projections, SwiGLU, down_proj) and
// the head (RMSNorm, logits, cross-entropy), forward and backward.
#include "core/model/llama_layers.hpp"

#include "core/base/error.hpp"
#include "core/kernels/attention.hpp"
#include "core/kernels/crossentropy.hpp"
#include "core/kernels/encoder.hpp"
#include "core/kernels/linear.hpp"
#include "core/kernels/rmsnorm.hpp"
#include "core/kernels/rope.hpp"
#include "core/kernels/swiglu.hpp"
#include "core/model/flash_shape.hpp"

namespace shardlab {

int64_t llama_attn_numel(const GPTConfig& cfg) {
  const int64_t C = cfg.n_embd, q = llama_q_cols(cfg), qkv = llama_qkv_cols(cfg);
  return C + qkv * C + (cfg.qkv_bias ? qkv : 0) + C * q + (cfg.o_bias ? C : 0);
}

int64_t llama_mlp_numel(const GPTConfig& cfg) {
  const int64_t C = cfg.n_embd, F = cfg.ffn_dim;
  return C + 3 * F * C + (cfg.mlp_bias ? 2 * F + C : 0);
}

// ---- saved tensors ------------------------------------------------------------------------------

namespace {

// Hands out consecutive views of p, or nulls when p is null.
struct Carver {
  float* p;
  float* take(int64_t n) {
    float* r = p;
    if (p) p += n;
    return r;
  }
};

int64_t rows(int B, int T) { return static_cast<int64_t>(B) * T; }

void check_batch(const char* what, int B, int T) {
  SL_CHECK(B > 0 && T > 0, what, ": B ", B, " and T ", T, " must be positive");
}

template <class Acts>
void check_acts(const Acts& a, int B, int T, const char* fn) {
  SL_CHECK(a.allocated(), fn, ": activations are not allocated");
  SL_CHECK(a.B() == B && a.T() == T, fn, ": activations are for B ", a.B(), " T ", a.T(),
           ", called with B ", B, " T ", T);
}

}  // namespace

LlamaAttnActivations::LlamaAttnActivations(Device& dev, const GPTConfig& cfg, int B, int T,
                                           const KernelChoice& kernels)
    : LlamaSaved(dev, cfg, B, T), kernels_(kernels) {
  check_batch("LlamaAttnActivations", B, T);
  allocate();
}

namespace {
// Floats of the attention kernel's own saved tensor: naive's probabilities (B, NH, T, T), or
// flash's logsumexp (B, NH, T).
int64_t attention_saved_floats(const GPTConfig& cfg, const KernelChoice& k, int B, int T) {
  const int64_t per_row = k.attention == AttentionKernel::flash ? 1 : T;
  return rows(B, cfg.n_head) * T * per_row;
}
}  // namespace

int64_t LlamaAttnActivations::bytes_for(const GPTConfig& cfg, int B, int T,
                                        const KernelChoice& kernels) {
  const int64_t N = rows(B, T);
  return 4 * (N * (cfg.n_embd + 1 + llama_qkv_cols(cfg) + llama_q_cols(cfg)) +
              attention_saved_floats(cfg, kernels, B, T));
}

void LlamaAttnActivations::carve(float* p) {
  const int64_t N = rows(B_, T_);
  const bool flash = kernels_.attention == AttentionKernel::flash;
  Carver c{p};
  ln = c.take(N * cfg_.n_embd);
  rstd = c.take(N);
  qkv = c.take(N * llama_qkv_cols(cfg_));
  float* kernel_saved = c.take(attention_saved_floats(cfg_, kernels_, B_, T_));
  att = flash ? nullptr : kernel_saved;
  lse = flash ? kernel_saved : nullptr;
  atty = c.take(N * llama_q_cols(cfg_));
}

LlamaMlpActivations::LlamaMlpActivations(Device& dev, const GPTConfig& cfg, int B, int T)
    : LlamaSaved(dev, cfg, B, T) {
  check_batch("LlamaMlpActivations", B, T);
  allocate();
}

int64_t LlamaMlpActivations::bytes_for(const GPTConfig& cfg, int B, int T) {
  return 4 * rows(B, T) * (cfg.n_embd + 1 + 3 * static_cast<int64_t>(cfg.ffn_dim));
}

void LlamaMlpActivations::carve(float* p) {
  const int64_t N = rows(B_, T_), F = cfg_.ffn_dim;
  Carver c{p};
  ln = c.take(N * cfg_.n_embd);
  rstd = c.take(N);
  gate_up = c.take(N * 2 * F);
  h = c.take(N * F);
}

LlamaHeadActivations::LlamaHeadActivations(Device& dev, const GPTConfig& cfg, int B, int T)
    : LlamaSaved(dev, cfg, B, T) {
  check_batch("LlamaHeadActivations", B, T);
  allocate();
}

int64_t LlamaHeadActivations::bytes_for(const GPTConfig& cfg, int B, int T) {
  return 4 * rows(B, T) * (cfg.n_embd + 2 + static_cast<int64_t>(cfg.vocab_size));
}

void LlamaHeadActivations::carve(float* p) {
  const int64_t N = rows(B_, T_);
  Carver c{p};
  ln = c.take(N * cfg_.n_embd);
  rstd = c.take(N);
  probs = c.take(N * cfg_.vocab_size);
  losses = c.take(N);
}

// ---- layers -------------------------------------------------------------------------------------

void llama_rope_table(Device& dev, const GPTConfig& cfg, float* cos_sin, int T) {
  RopeParams p;
  p.theta = cfg.rope_theta;
  if (cfg.rope_llama3) {
    p.scaling = RopeScaling::llama3;
    p.factor = cfg.rope_factor;
    p.low_freq_factor = cfg.rope_low_freq_factor;
    p.high_freq_factor = cfg.rope_high_freq_factor;
    p.original_max_position_embeddings = static_cast<float>(cfg.rope_original_max_pos);
  }
  rope_table(dev, cos_sin, T, cfg.head_dim(), p);
}

void llama_embedding_forward(Device& dev, const GPTConfig& cfg, float* x, const int* tokens,
                             const float* embed, int B, int T) {
  SL_CHECK(T >= 1 && T <= cfg.max_seq_len, "llama embedding: T ", T, " outside [1, max_seq_len ",
           cfg.max_seq_len, "]");
  encoder_forward(dev, x, tokens, embed, nullptr, B, T, cfg.n_embd, cfg.vocab_size);
}

void llama_embedding_backward(Device& dev, const GPTConfig& cfg, float* dembed, const int* tokens,
                              const float* dx, int B, int T, GradWrite gw) {
  if (gw == GradWrite::overwrite)
    dev.fill_zero(dembed, static_cast<int64_t>(cfg.vocab_size) * cfg.n_embd * 4);
  encoder_backward(dev, dembed, nullptr, dx, tokens, B, T, cfg.n_embd, cfg.vocab_size);
}

namespace {

AttentionDims dims(const GPTConfig& cfg, int B, int T) {
  return {B, T, cfg.n_head, cfg.kv_heads(), cfg.head_dim()};
}

bool flash(const LlamaAttnActivations& acts) {
  return acts.kernels().attention == AttentionKernel::flash;
}

// q, k and v as flash_attention.hpp reads them: the three column ranges of each packed row.
struct QkvRows {
  int64_t ld, k, v;  // row stride, and where k and v start in a row
};
QkvRows qkv_rows(const GPTConfig& cfg) {
  return {llama_qkv_cols(cfg), llama_q_cols(cfg), llama_q_cols(cfg) + llama_kv_cols(cfg)};
}

// An RMSNorm's (C) weight gradient starts from zero under GradWrite::overwrite (its backward only
// adds).
void start_norm_grad(Device& dev, GradWrite gw, float* dweight, int C) {
  if (gw == GradWrite::overwrite) dev.fill_zero(dweight, static_cast<int64_t>(C) * 4);
}

}  // namespace

void llama_attn_forward(Device& dev, const GPTConfig& cfg, float* y, LlamaAttnActivations& acts,
                        const float* x, const float* params, const float* cos_sin, int B, int T) {
  check_acts(acts, B, T, "llama_attn_forward");
  const int N = B * T, C = cfg.n_embd;
  const int q = static_cast<int>(llama_q_cols(cfg)), qkv = static_cast<int>(llama_qkv_cols(cfg));
  const auto p = llama_attn_views(cfg, params);
  rmsnorm_forward(dev, acts.ln, acts.rstd, x, p.norm, N, C, cfg.norm_eps);
  linear_oi_forward(dev, acts.qkv, acts.ln, p.qkv_w, p.qkv_b, N, C, qkv);
  // q and k turn (NH + NKV heads at the front of each row); v does not.
  rope_forward(dev, acts.qkv, cos_sin, B, T, cfg.n_head + cfg.kv_heads(), cfg.head_dim(), qkv);
  if (flash(acts)) {
    const QkvRows r = qkv_rows(cfg);
    flash_attention_forward(dev, flash_shape(cfg, B, T), RowsOut{acts.atty, q}, acts.lse,
                            RowsIn{acts.qkv, r.ld}, RowsIn{acts.qkv + r.k, r.ld},
                            RowsIn{acts.qkv + r.v, r.ld});
  } else {
    attention_forward(dev, acts.atty, acts.att, acts.qkv, dims(cfg, B, T));
  }
  dev.copy(y, x, static_cast<int64_t>(N) * C * 4);  // the residual, then o_proj added on top
  linear_oi_forward(dev, y, acts.atty, p.o_w, p.o_b, N, q, C, /*accumulate=*/true);
}

void llama_attn_backward(Device& dev, const GPTConfig& cfg, float* dx, float* dparams,
                         const LlamaAttnActivations& acts, const float* x, const float* params,
                         const float* cos_sin, int B, int T, GradWrite gw) {
  check_acts(acts, B, T, "llama_attn_backward");
  const int N = B * T, C = cfg.n_embd;
  const int q = static_cast<int>(llama_q_cols(cfg)), qkv = static_cast<int>(llama_qkv_cols(cfg));
  const auto p = llama_attn_views(cfg, params);
  const auto d = llama_attn_views(cfg, dparams);
  const bool acc = gw == GradWrite::accumulate;
  // Scratch: dqkv (N, qkv), datty (N, q), dln (N, C).
  Buffer dqkv_buf = dev.alloc(static_cast<int64_t>(N) * qkv * 4, MemCategory::workspace);
  Buffer datty_buf = dev.alloc(static_cast<int64_t>(N) * q * 4, MemCategory::workspace);
  float* dqkv = dqkv_buf.f32();
  float* datty = datty_buf.f32();
  // dx holds dL/dy: the residual's gradient as it is, and o_proj's input.
  linear_oi_backward(dev, datty, d.o_w, d.o_b, dx, acts.atty, p.o_w, N, q, C, acc);
  if (flash(acts)) {
    const QkvRows r = qkv_rows(cfg);
    flash_attention_backward(dev, flash_shape(cfg, B, T), RowsOut{dqkv, r.ld},
                             RowsOut{dqkv + r.k, r.ld}, RowsOut{dqkv + r.v, r.ld}, RowsIn{datty, q},
                             RowsIn{acts.qkv, r.ld}, RowsIn{acts.qkv + r.k, r.ld},
                             RowsIn{acts.qkv + r.v, r.ld}, RowsIn{acts.atty, q}, acts.lse);
  } else {
    attention_backward(dev, dqkv, datty, acts.qkv, acts.att, dims(cfg, B, T));
  }
  rope_backward(dev, dqkv, cos_sin, B, T, cfg.n_head + cfg.kv_heads(), cfg.head_dim(), qkv);
  datty_buf.reset();
  Buffer dln_buf = dev.alloc(static_cast<int64_t>(N) * C * 4, MemCategory::workspace);
  linear_oi_backward(dev, dln_buf.f32(), d.qkv_w, d.qkv_b, dqkv, acts.ln, p.qkv_w, N, C, qkv, acc);
  start_norm_grad(dev, gw, d.norm, C);
  rmsnorm_backward(dev, dx, d.norm, dln_buf.f32(), x, p.norm, acts.rstd, N, C);
}

void llama_mlp_forward(Device& dev, const GPTConfig& cfg, float* y, LlamaMlpActivations& acts,
                       const float* x, const float* params, int B, int T) {
  check_acts(acts, B, T, "llama_mlp_forward");
  const int N = B * T, C = cfg.n_embd, F = cfg.ffn_dim;
  const auto p = llama_mlp_views(cfg, params);
  rmsnorm_forward(dev, acts.ln, acts.rstd, x, p.norm, N, C, cfg.norm_eps);
  linear_oi_forward(dev, acts.gate_up, acts.ln, p.gate_up_w, p.gate_up_b, N, C, 2 * F);
  swiglu_forward(dev, acts.h, acts.gate_up, N, F);
  dev.copy(y, x, static_cast<int64_t>(N) * C * 4);
  linear_oi_forward(dev, y, acts.h, p.down_w, p.down_b, N, F, C, /*accumulate=*/true);
}

void llama_mlp_backward(Device& dev, const GPTConfig& cfg, float* dx, float* dparams,
                        const LlamaMlpActivations& acts, const float* x, const float* params, int B,
                        int T, GradWrite gw) {
  check_acts(acts, B, T, "llama_mlp_backward");
  const int N = B * T, C = cfg.n_embd, F = cfg.ffn_dim;
  const auto p = llama_mlp_views(cfg, params);
  const auto d = llama_mlp_views(cfg, dparams);
  const bool acc = gw == GradWrite::accumulate;
  // Scratch: dh (N, F), dgate_up (N, 2F), dln (N, C).
  Buffer dh_buf = dev.alloc(static_cast<int64_t>(N) * F * 4, MemCategory::workspace);
  Buffer dgu_buf = dev.alloc(static_cast<int64_t>(N) * 2 * F * 4, MemCategory::workspace);
  linear_oi_backward(dev, dh_buf.f32(), d.down_w, d.down_b, dx, acts.h, p.down_w, N, F, C, acc);
  swiglu_backward(dev, dgu_buf.f32(), dh_buf.f32(), acts.gate_up, N, F);
  dh_buf.reset();
  Buffer dln_buf = dev.alloc(static_cast<int64_t>(N) * C * 4, MemCategory::workspace);
  linear_oi_backward(dev, dln_buf.f32(), d.gate_up_w, d.gate_up_b, dgu_buf.f32(), acts.ln,
                     p.gate_up_w, N, C, 2 * F, acc);
  start_norm_grad(dev, gw, d.norm, C);
  rmsnorm_backward(dev, dx, d.norm, dln_buf.f32(), x, p.norm, acts.rstd, N, C);
}

float llama_head_forward(Device& dev, const GPTConfig& cfg, LlamaHeadActivations& acts,
                         const float* x, const int* targets, const float* norm, const float* head,
                         int B, int T) {
  check_acts(acts, B, T, "llama_head_forward");
  const int N = B * T, C = cfg.n_embd, V = cfg.vocab_size;
  rmsnorm_forward(dev, acts.ln, acts.rstd, x, norm, N, C, cfg.norm_eps);
  // logits (N, V) = ln (N, C) @ head^T, straight into probs and normalised in place
  dev.gemm(false, true, N, V, C, 1.0f, acts.ln, C, head, C, 0.0f, acts.probs, V);
  crossentropy_forward(dev, acts.probs, acts.losses, targets, N, V);
  return targets ? mean_loss(dev, acts.losses, N) : 0.0f;
}

void llama_head_backward(Device& dev, const GPTConfig& cfg, float* dx, float* dnorm,
                         GradWrite norm_gw, float* dhead, GradWrite head_gw,
                         const LlamaHeadActivations& acts, const float* x, const int* targets,
                         const float* norm, const float* head, int B, int T, float loss_scale) {
  check_acts(acts, B, T, "llama_head_backward");
  SL_CHECK(targets != nullptr, "llama_head_backward: needs targets");
  const int N = B * T, C = cfg.n_embd, V = cfg.vocab_size;
  Buffer dlogits_buf = dev.alloc(static_cast<int64_t>(N) * V * 4, MemCategory::workspace);
  Buffer dln_buf = dev.alloc(static_cast<int64_t>(N) * C * 4, MemCategory::workspace);
  float* dlogits = dlogits_buf.f32();
  // d(loss_scale * mean over N positions) / dlogits = loss_scale / N * (p - onehot)
  crossentropy_backward(dev, dlogits, acts.probs, targets, loss_scale / static_cast<float>(N), N,
                        V);
  // dhead (V, C) (+)= dlogits^T (V, N) @ ln (N, C)
  dev.gemm(true, false, V, C, N, 1.0f, dlogits, V, acts.ln, C,
           head_gw == GradWrite::accumulate ? 1.0f : 0.0f, dhead, C);
  // dln (N, C) = dlogits (N, V) @ head (V, C)
  dev.gemm(false, false, N, C, V, 1.0f, dlogits, V, head, C, 0.0f, dln_buf.f32(), C);
  dev.fill_zero(dx, static_cast<int64_t>(N) * C * 4);
  start_norm_grad(dev, norm_gw, dnorm, C);
  rmsnorm_backward(dev, dx, dnorm, dln_buf.f32(), x, norm, acts.rstd, N, C);
}

}  // namespace shardlab
