// Glue between the model's description (GPTConfig, UnitLayout) and the checkpoint layer: the
// config as index.json stores it (gpt_config_json and gpt_config_from_json, core/model/config.hpp)
// and a unit's tensors.
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

inline std::vector<CkptTensor> unit_tensors(const UnitLayout& layout) {
  return to_ckpt_tensors(layout.entries);
}

}  // namespace shardlab
