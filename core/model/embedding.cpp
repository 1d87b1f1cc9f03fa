// Root unit, input side: token + position embedding, forward and backward.
#include "core/base/error.hpp"
#include "core/kernels/encoder.hpp"
#include "core/model/layers.hpp"
#include "core/model/params.hpp"

namespace shardlab {

void embedding_forward(Device& dev, const GPTConfig& cfg, float* x, const int* tokens,
                       const float* root_params, int B, int T) {
  SL_CHECK(T >= 1 && T <= cfg.max_seq_len, "embedding_forward: T ", T, " outside [1, max_seq_len ",
           cfg.max_seq_len, "]");
  auto r = root_views(cfg, root_params);
  encoder_forward(dev, x, tokens, r.wte, r.wpe, B, T, cfg.n_embd, cfg.vocab_size);
}

void embedding_backward(Device& dev, const GPTConfig& cfg, float* droot_params, const int* tokens,
                        const float* dx, int B, int T, GradWrite gw) {
  SL_CHECK(T >= 1 && T <= cfg.max_seq_len, "embedding_backward: T ", T, " outside [1, max_seq_len ",
           cfg.max_seq_len, "]");
  auto d = root_views(cfg, droot_params);
  // wpe's (max_seq_len, C) rows: zeroed, then the positions' sums added (rows past T stay 0).
  if (gw == GradWrite::overwrite)
    dev.fill_zero(d.wpe, static_cast<int64_t>(cfg.max_seq_len) * cfg.n_embd * 4);
  encoder_backward(dev, d.wte, d.wpe, dx, tokens, B, T, cfg.n_embd, cfg.vocab_size);
}

}  // namespace shardlab
