// Glue between the model's description (GPTConfig, UnitLayout) and the checkpoint layer: the
// config as index.json stores it, a unit's tensors, and the standard shard range of a rank.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/checkpoint/ckpt_shard.hpp"
#include "core/model/config.hpp"
#include "core/model/params.hpp"

namespace shardlab {

// {"vocab_size": 256, "max_seq_len": 64, "n_layer": 2, "n_head": 2, "n_embd": 64} for GPT-2 (the
// keys every checkpoint has); a Llama-family shape adds "family": "llama" and its own fields
// (n_kv_head, ffn_dim, head_dim, rope_theta, norm_eps, qkv_bias, o_bias, mlp_bias,
// tie_embeddings, and rope_scaling when it is llama3's).
nlohmann::json gpt_config_json(const GPTConfig& cfg);
// The inverse, for checkpoints read back (export); IoError naming `where` and the field when one
// is missing or mistyped. The result is validated.
GPTConfig gpt_config_from_json(const nlohmann::json& j, const std::string& where);

inline std::vector<CkptTensor> unit_tensors(const UnitLayout& layout) {
  return to_ckpt_tensors(layout.entries);
}

// Shard r of `group` over a padded buffer: [r * S, (r + 1) * S) with S = padded / group.
inline std::pair<int64_t, int64_t> shard_range(int64_t padded, int r, int group) {
  int64_t s = padded / group;
  return {r * s, (r + 1) * s};
}

}  // namespace shardlab
