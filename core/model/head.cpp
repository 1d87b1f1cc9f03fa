// Root unit, output side: final LayerNorm, LM head (logits = ln_f(x) @ wout^T, wout = wte when
// tied), softmax and cross-entropy; and their backward.
#include "core/base/error.hpp"
#include "core/kernels/crossentropy.hpp"
#include "core/kernels/layernorm.hpp"
#include "core/model/layers.hpp"
#include "core/model/params.hpp"

namespace shardlab {

namespace {
HeadWeights root_head(const GPTConfig& cfg, const float* root_params) {
  auto r = root_views(cfg, root_params);
  return {r.lnf_w, r.wte};
}
}  // namespace

float head_forward(Device& dev, const GPTConfig& cfg, HeadActivations& acts, const float* x,
                   const int* targets, const HeadWeights& w, int B, int T) {
  SL_CHECK(acts.allocated() && acts.B() == B && acts.T() == T,
           "head_forward: activations are not allocated for B ", B, " T ", T);
  const int N = B * T, C = cfg.n_embd, V = cfg.vocab_size;
  layernorm_forward(dev, acts.lnf, acts.lnf_mean, acts.lnf_rstd, x, w.lnf, w.lnf + C, N, C);
  // logits (N, V) = lnf (N, C) @ wout^T, written straight into probs and normalised in place
  dev.gemm(false, true, N, V, C, 1.0f, acts.lnf, C, w.wout, C, 0.0f, acts.probs, V);
  crossentropy_forward(dev, acts.probs, acts.losses, targets, N, V);
  return targets ? mean_loss(dev, acts.losses, N) : 0.0f;
}

float head_forward(Device& dev, const GPTConfig& cfg, HeadActivations& acts, const float* x,
                   const int* targets, const float* root_params, int B, int T) {
  return head_forward(dev, cfg, acts, x, targets, root_head(cfg, root_params), B, T);
}

void head_backward(Device& dev, const GPTConfig& cfg, float* dx, const HeadGrads& g,
                   const HeadActivations& acts, const float* x, const int* targets,
                   const HeadWeights& w, int B, int T, float loss_scale) {
  SL_CHECK(acts.allocated() && acts.B() == B && acts.T() == T,
           "head_backward: activations are not allocated for B ", B, " T ", T);
  SL_CHECK(targets != nullptr, "head_backward: needs targets");
  const int N = B * T, C = cfg.n_embd, V = cfg.vocab_size;
  Buffer dlogits_buf = dev.alloc(static_cast<int64_t>(N) * V * 4, MemCategory::workspace);
  Buffer dlnf_buf = dev.alloc(static_cast<int64_t>(N) * C * 4, MemCategory::workspace);
  float* dlogits = dlogits_buf.f32();
  float* dlnf = dlnf_buf.f32();

  // d(loss_scale * mean over N positions) / dlogits = loss_scale / N * (p - onehot)
  crossentropy_backward(dev, dlogits, acts.probs, targets, loss_scale / static_cast<float>(N), N,
                        V);
  // dwout (V, C) += dlogits^T (V, N) @ lnf (N, C); written under overwrite
  const float wout_beta = g.wout_write == GradWrite::accumulate ? 1.0f : 0.0f;
  dev.gemm(true, false, V, C, N, 1.0f, dlogits, V, acts.lnf, C, wout_beta, g.wout, C);
  // dlnf (N, C) = dlogits (N, V) @ wout (V, C)
  dev.gemm(false, false, N, C, V, 1.0f, dlogits, V, w.wout, C, 0.0f, dlnf, C);
  dev.fill_zero(dx, static_cast<int64_t>(N) * C * 4);
  if (g.lnf_write == GradWrite::overwrite) {  // (C) values: zeroed, then LayerNorm's backward adds
    dev.fill_zero(g.lnf, static_cast<int64_t>(C) * 4);
    dev.fill_zero(g.lnf + C, static_cast<int64_t>(C) * 4);
  }
  layernorm_backward(dev, dx, g.lnf, g.lnf + C, dlnf, x, w.lnf, acts.lnf_mean, acts.lnf_rstd, N, C);
}

void head_backward(Device& dev, const GPTConfig& cfg, float* dx, float* droot_params,
                   const HeadActivations& acts, const float* x, const int* targets,
                   const float* root_params, int B, int T, float loss_scale, GradWrite gw) {
  auto d = root_views(cfg, droot_params);
  head_backward(dev, cfg, dx, HeadGrads{d.lnf_w, d.wte, gw, gw}, acts, x, targets,
                root_head(cfg, root_params), B, T, loss_scale);
}

}  // namespace shardlab
