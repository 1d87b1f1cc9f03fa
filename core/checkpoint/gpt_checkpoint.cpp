// GPTConfig as the JSON that checkpoints store.
#include "core/checkpoint/gpt_checkpoint.hpp"

namespace shardlab {

nlohmann::json gpt_config_json(const GPTConfig& cfg) {
  return {{"vocab_size", cfg.vocab_size},
          {"max_seq_len", cfg.max_seq_len},
          {"n_layer", cfg.n_layer},
          {"n_head", cfg.n_head},
          {"n_embd", cfg.n_embd}};
}

}  // namespace shardlab
