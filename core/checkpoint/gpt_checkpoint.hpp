// Glue between the model's description (GPTConfig, UnitLayout) and the checkpoint layer: the
// config as index.json stores it, a unit's tensors, and the standard shard range of a rank.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/checkpoint/ckpt_shard.hpp"
#include "core/model/config.hpp"
#include "core/model/params.hpp"

namespace shardlab {

// {"vocab_size": 256, "max_seq_len": 64, "n_layer": 2, "n_head": 2, "n_embd": 64}
nlohmann::json gpt_config_json(const GPTConfig& cfg);

inline std::vector<CkptTensor> unit_tensors(const UnitLayout& layout) {
  return to_ckpt_tensors(layout.entries);
}

// Shard r of `group` over a padded buffer: [r * S, (r + 1) * S) with S = padded / group.
inline std::pair<int64_t, int64_t> shard_range(int64_t padded, int r, int group) {
  int64_t s = padded / group;
  return {r * s, (r + 1) * s};
}

}  // namespace shardlab
