// The flash attention kernel's shape (core/kernels/flash_attention.hpp) for a model's attention:
// NH query heads and kv_heads() key/value heads of head_dim() (GPT-2: NKV = NH, hs = C / NH).
// For the layers' sources only: it includes a kernels header, which the model layer links
// privately.
#pragma once

#include "core/kernels/flash_attention.hpp"
#include "core/model/config.hpp"

namespace shardlab {

inline FlashShape flash_shape(const GPTConfig& cfg, int B, int T) {
  FlashShape s;
  s.B = B;
  s.T = T;
  s.NH = cfg.n_head;
  s.NKV = cfg.kv_heads();
  s.hs = cfg.head_dim();
  return s;
}

}  // namespace shardlab
