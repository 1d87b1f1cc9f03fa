// GPTConfig as the JSON that checkpoints store.
#include "core/checkpoint/gpt_checkpoint.hpp"

#include <cmath>
#include <limits>

#include "core/base/error.hpp"
#include "core/base/json_get.hpp"

namespace shardlab {

nlohmann::json gpt_config_json(const GPTConfig& cfg) {
  nlohmann::json j = {{"vocab_size", cfg.vocab_size},
                      {"max_seq_len", cfg.max_seq_len},
                      {"n_layer", cfg.n_layer},
                      {"n_head", cfg.n_head},
                      {"n_embd", cfg.n_embd}};
  if (!cfg.is_llama()) return j;
  j["family"] = model_family_name(cfg.family);
  j["n_kv_head"] = cfg.n_kv_head;
  j["ffn_dim"] = cfg.ffn_dim;
  j["head_dim"] = cfg.head_dim();
  j["rope_theta"] = cfg.rope_theta;
  j["norm_eps"] = cfg.norm_eps;
  j["qkv_bias"] = cfg.qkv_bias;
  j["o_bias"] = cfg.o_bias;
  j["mlp_bias"] = cfg.mlp_bias;
  j["tie_embeddings"] = cfg.tie_embeddings;
  if (cfg.rope_llama3)
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", cfg.rope_factor},
                         {"low_freq_factor", cfg.rope_low_freq_factor},
                         {"high_freq_factor", cfg.rope_high_freq_factor},
                         {"original_max_position_embeddings", cfg.rope_original_max_pos}};
  return j;
}

namespace {

constexpr int64_t kIntMax = std::numeric_limits<int>::max();

int positive(const nlohmann::json& j, const char* key, const std::string& where) {
  return static_cast<int>(json_int(j, key, where, 1, kIntMax));
}

float number(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) SL_THROW(IoError, where, ": field '", key, "' is missing");
  const nlohmann::json& v = j.at(key);
  if (!v.is_number())
    SL_THROW(IoError, where, ": field '", key, "' must be a number, not ", v.dump());
  return v.get<float>();
}

bool flag(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) SL_THROW(IoError, where, ": field '", key, "' is missing");
  const nlohmann::json& v = j.at(key);
  if (!v.is_boolean()) SL_THROW(IoError, where, ": field '", key, "' must be true or false");
  return v.get<bool>();
}

}  // namespace

GPTConfig gpt_config_from_json(const nlohmann::json& j, const std::string& where) {
  GPTConfig c;
  c.vocab_size = positive(j, "vocab_size", where);
  c.max_seq_len = positive(j, "max_seq_len", where);
  c.n_layer = positive(j, "n_layer", where);
  c.n_head = positive(j, "n_head", where);
  c.n_embd = positive(j, "n_embd", where);
  const std::string family = j.contains("family") ? json_string(j, "family", where) : "gpt2";
  if (family == "llama") {
    c.family = ModelFamily::llama;
    c.n_kv_head = positive(j, "n_kv_head", where);
    c.ffn_dim = positive(j, "ffn_dim", where);
    const int hd = positive(j, "head_dim", where);
    if (c.n_embd % c.n_head != 0 || hd != c.n_embd / c.n_head) c.head_dim_override = hd;
    c.rope_theta = number(j, "rope_theta", where);
    c.norm_eps = number(j, "norm_eps", where);
    c.qkv_bias = flag(j, "qkv_bias", where);
    c.o_bias = flag(j, "o_bias", where);
    c.mlp_bias = flag(j, "mlp_bias", where);
    c.tie_embeddings = flag(j, "tie_embeddings", where);
    if (j.contains("rope_scaling")) {
      const nlohmann::json& r = j.at("rope_scaling");
      const std::string w = where + ": rope_scaling";
      c.rope_llama3 = true;
      c.rope_factor = number(r, "factor", w);
      c.rope_low_freq_factor = number(r, "low_freq_factor", w);
      c.rope_high_freq_factor = number(r, "high_freq_factor", w);
      c.rope_original_max_pos = positive(r, "original_max_position_embeddings", w);
    }
  } else if (family != "gpt2") {
    SL_THROW(IoError, where, ": field 'family' = \"", family, "\" (gpt2 or llama)");
  }
  try {
    c.validate();
  } catch (const InvalidArgument& e) {
    SL_THROW(IoError, where, ": ", e.what());
  }
  return c;
}

}  // namespace shardlab
