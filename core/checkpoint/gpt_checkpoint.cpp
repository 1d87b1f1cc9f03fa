// GPTConfig to and from the JSON that checkpoints store.
#include "core/checkpoint/gpt_checkpoint.hpp"

#include <limits>

#include "core/base/error.hpp"
#include "core/base/json_get.hpp"

namespace shardlab {

nlohmann::json gpt_config_json(const GPTConfig& cfg) {
  return {{"vocab_size", cfg.vocab_size}, {"max_seq_len", cfg.max_seq_len},
          {"n_layer", cfg.n_layer},       {"n_head", cfg.n_head},
          {"n_embd", cfg.n_embd}};
}

GPTConfig gpt_config_from_json(const nlohmann::json& j, const std::string& where) {
  GPTConfig cfg;
  auto field = [&](const char* name, int& dst) {
    if (!j.is_object() || !j.contains(name) || !j.at(name).is_number_integer())
      SL_THROW(IoError, where, ": model_config.", name, " is missing or not an integer");
    // 1e10 is an integer to JSON but not an int: refuse it rather than truncate.
    dst = static_cast<int>(json_int(j, name, where + ": model_config", 1,
                                    std::numeric_limits<int>::max()));
  };
  field("vocab_size", cfg.vocab_size);
  field("max_seq_len", cfg.max_seq_len);
  field("n_layer", cfg.n_layer);
  field("n_head", cfg.n_head);
  field("n_embd", cfg.n_embd);
  return cfg;
}

}  // namespace shardlab
