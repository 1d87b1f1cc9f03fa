// The model of a shape: GPT-2's stages (gpt2.hpp) or the Llama family's (llama.hpp), by
// GPTConfig::family. Whoever trains, plans or simulates a shape builds its model here, so a second
// family is one more case below and nothing else.
#pragma once

#include "core/model/config.hpp"
#include "core/model/model.hpp"

namespace shardlab {

// Validates cfg (InvalidArgument naming the field).
Model build_model(const GPTConfig& cfg, const KernelChoice& kernels = {});

}  // namespace shardlab
