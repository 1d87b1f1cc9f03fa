// Root unit, output side: final LayerNorm, tied LM head (logits = ln_f(x) @ wte^T), softmax and
// cross-entropy; and their backward.
#include "core/base/error.hpp"
#include "core/kernels/crossentropy.hpp"
#include "core/kernels/layernorm.hpp"
#include "core/model/layers.hpp"
#include "core/model/params.hpp"

namespace shardlab {

float head_forward(Device& dev, const GPTConfig& cfg, HeadActivations& acts, const float* x,
                   const int* targets, const float* root_params, int B, int T) {
  SL_CHECK(acts.allocated() && acts.B() == B && acts.T() == T,
           "head_forward: activations are not allocated for B ", B, " T ", T);
  const int N = B * T, C = cfg.n_embd, V = cfg.vocab_size;
  auto r = root_views(cfg, root_params);
  layernorm_forward(dev, acts.lnf, acts.lnf_mean, acts.lnf_rstd, x, r.lnf_w, r.lnf_b, N, C);
  // logits (N, V) = lnf (N, C) @ wte^T, written straight into probs and normalised in place
  dev.gemm(false, true, N, V, C, 1.0f, acts.lnf, C, r.wte, C, 0.0f, acts.probs, V);
  crossentropy_forward(dev, acts.probs, acts.losses, targets, N, V);
  return targets ? mean_loss(dev, acts.losses, N) : 0.0f;
}

void head_backward(Device& dev, const GPTConfig& cfg, float* dx, float* droot_params,
                   const HeadActivations& acts, const float* x, const int* targets,
                   const float* root_params, int B, int T, float loss_scale, GradWrite gw) {
  SL_CHECK(acts.allocated() && acts.B() == B && acts.T() == T,
           "head_backward: activations are not allocated for B ", B, " T ", T);
  SL_CHECK(targets != nullptr, "head_backward: needs targets");
  const int N = B * T, C = cfg.n_embd, V = cfg.vocab_size;
  auto r = root_views(cfg, root_params);
  auto d = root_views(cfg, droot_params);
  Buffer dlogits_buf = dev.alloc(static_cast<int64_t>(N) * V * 4, MemCategory::workspace);
  Buffer dlnf_buf = dev.alloc(static_cast<int64_t>(N) * C * 4, MemCategory::workspace);
  float* dlogits = dlogits_buf.f32();
  float* dlnf = dlnf_buf.f32();

  // d(loss_scale * mean over N positions) / dlogits = loss_scale / N * (p - onehot)
  crossentropy_backward(dev, dlogits, acts.probs, targets, loss_scale / static_cast<float>(N), N,
                        V);
  // tied head: dwte (V, C) += dlogits^T (V, N) @ lnf (N, C); written first under overwrite
  const bool acc = gw == GradWrite::accumulate;
  dev.gemm(true, false, V, C, N, 1.0f, dlogits, V, acts.lnf, C, acc ? 1.0f : 0.0f, d.wte, C);
  // dlnf (N, C) = dlogits (N, V) @ wte (V, C)
  dev.gemm(false, false, N, C, V, 1.0f, dlogits, V, r.wte, C, 0.0f, dlnf, C);
  dev.fill_zero(dx, static_cast<int64_t>(N) * C * 4);
  if (!acc) {  // (C) values: zeroed, then LayerNorm's backward adds
    dev.fill_zero(d.lnf_w, static_cast<int64_t>(C) * 4);
    dev.fill_zero(d.lnf_b, static_cast<int64_t>(C) * 4);
  }
  layernorm_backward(dev, dx, d.lnf_w, d.lnf_b, dlnf, x, r.lnf_w, acts.lnf_mean, acts.lnf_rstd, N,
                     C);
}

}  // namespace shardlab
