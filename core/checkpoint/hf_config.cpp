// Hugging Face config.json <-> GPTConfig.
#include "core/checkpoint/hf_config.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/base/error.hpp"
#include "core/base/file_io.hpp"
#include "core/base/json_get.hpp"
#include "core/checkpoint/index.hpp"

namespace shardlab {

namespace {

using json = nlohmann::json;

constexpr int64_t kIntMax = std::numeric_limits<int>::max();

// The shortest decimal that reads back as x (1e-05 for 1e-5f, not 9.99999974737875e-06), as a
// double for the JSON writer, which prints doubles that way.
double decimal(float x) {
  char buf[32];
  for (int p = 1; p < 9; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, static_cast<double>(x));
    const double d = std::strtod(buf, nullptr);
    if (static_cast<float>(d) == x) return d;
  }
  return static_cast<double>(x);
}

bool present(const json& j, const char* key) { return j.contains(key) && !j.at(key).is_null(); }

// A positive int the shape cannot do without.
int required_int(const json& j, const char* key, const std::string& where) {
  return static_cast<int>(json_int(j, key, where, 1, kIntMax));
}

// A positive int transformers defaults when absent or null.
int optional_int(const json& j, const char* key, const std::string& where, int fallback) {
  return present(j, key) ? required_int(j, key, where) : fallback;
}

double optional_number(const json& j, const char* key, const std::string& where, double fallback) {
  if (!present(j, key)) return fallback;
  const json& v = j.at(key);
  if (!v.is_number())
    SL_THROW(IoError, where, ": field '", key, "' must be a number, not ", v.dump());
  const double x = v.get<double>();
  if (!std::isfinite(x) || x <= 0)
    SL_THROW(InvalidArgument, where, ": field '", key, "' = ", v.dump(), " must be positive");
  return x;
}

double required_number(const json& j, const char* key, const std::string& where) {
  if (!present(j, key)) SL_THROW(IoError, where, ": field '", key, "' is missing");
  return optional_number(j, key, where, 0);
}

bool optional_bool(const json& j, const char* key, const std::string& where, bool fallback) {
  if (!present(j, key)) return fallback;
  const json& v = j.at(key);
  if (!v.is_boolean())
    SL_THROW(IoError, where, ": field '", key, "' must be true or false, not ", v.dump());
  return v.get<bool>();
}

std::string optional_string(const json& j, const char* key, const std::string& where,
                            const std::string& fallback) {
  return present(j, key) ? json_string(j, key, where) : fallback;
}

GPTConfig read_gpt2(const json& j, const std::string& where) {
  GPTConfig c;
  c.vocab_size = required_int(j, "vocab_size", where);
  c.max_seq_len = present(j, "n_positions") || !present(j, "n_ctx")
                      ? required_int(j, "n_positions", where)
                      : required_int(j, "n_ctx", where);
  c.n_layer = required_int(j, "n_layer", where);
  c.n_head = required_int(j, "n_head", where);
  c.n_embd = required_int(j, "n_embd", where);
  if (c.n_embd % c.n_head != 0)
    SL_THROW(InvalidArgument, where, ": field 'n_head' = ", c.n_head,
             " does not divide field 'n_embd' = ", c.n_embd);
  if (present(j, "n_inner") && required_int(j, "n_inner", where) != 4 * c.n_embd)
    SL_THROW(InvalidArgument, where, ": field 'n_inner' = ", j.at("n_inner").dump(),
             ": this program's GPT-2 MLP is 4 * n_embd = ", 4 * c.n_embd, " wide (or null)");
  const std::string act = optional_string(j, "activation_function", where, "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    SL_THROW(InvalidArgument, where, ": field 'activation_function' = \"", act,
             "\": this program's GPT-2 uses GELU's tanh form (gelu_new)");
  const double eps = optional_number(j, "layer_norm_epsilon", where, 1e-5);
  if (static_cast<float>(eps) != 1e-5f)
    SL_THROW(InvalidArgument, where, ": field 'layer_norm_epsilon' = ", eps,
             ": this program's GPT-2 LayerNorm uses 1e-05");
  if (!optional_bool(j, "tie_word_embeddings", where, true))
    SL_THROW(InvalidArgument, where,
             ": field 'tie_word_embeddings' = false: this program's GPT-2 head is tied to wte");
  if (!optional_bool(j, "scale_attn_weights", where, true) ||
      optional_bool(j, "scale_attn_by_inverse_layer_idx", where, false))
    SL_THROW(InvalidArgument, where,
             ": fields 'scale_attn_weights' / 'scale_attn_by_inverse_layer_idx': this program's "
             "GPT-2 scales scores by 1/sqrt(head_dim) only");
  return c;
}

// rope_parameters (transformers 5) or rope_theta + rope_scaling (the published configs).
void read_rope(const json& j, const std::string& where, GPTConfig& c) {
  const bool v5 = present(j, "rope_parameters");
  const char* key = v5 ? "rope_parameters" : "rope_scaling";
  const std::string field = std::string(key) + ".";
  json params = json::object();
  if (present(j, key)) {
    params = j.at(key);
    if (!params.is_object())
      SL_THROW(IoError, where, ": field '", key, "' must be an object, not ", params.dump());
  }
  c.rope_theta =
      static_cast<float>(v5 ? optional_number(params, "rope_theta", where + ": " + key, 10000.0)
                            : optional_number(j, "rope_theta", where, 10000.0));
  // Older configs name the type "type".
  const char* type_key = present(params, "rope_type") ? "rope_type" : "type";
  const std::string type = optional_string(params, type_key, where + ": " + key, "default");
  if (type == "default") return;
  if (type != "llama3")
    SL_THROW(InvalidArgument, where, ": field '", field, type_key, "' = \"", type,
             "\": this program builds rope types default and llama3");
  const std::string w = where + ": " + key;
  c.rope_llama3 = true;
  c.rope_factor = static_cast<float>(required_number(params, "factor", w));
  c.rope_low_freq_factor = static_cast<float>(required_number(params, "low_freq_factor", w));
  c.rope_high_freq_factor = static_cast<float>(required_number(params, "high_freq_factor", w));
  c.rope_original_max_pos = required_int(params, "original_max_position_embeddings", w);
  if (!(c.rope_high_freq_factor > c.rope_low_freq_factor))
    SL_THROW(InvalidArgument, where, ": field '", field,
             "high_freq_factor' = ", c.rope_high_freq_factor, " must be above '", field,
             "low_freq_factor' = ", c.rope_low_freq_factor);
}

GPTConfig read_llama_family(const json& j, const std::string& type, const std::string& where) {
  GPTConfig c;
  c.family = ModelFamily::llama;
  c.vocab_size = required_int(j, "vocab_size", where);
  c.n_embd = required_int(j, "hidden_size", where);
  c.ffn_dim = required_int(j, "intermediate_size", where);
  c.n_layer = required_int(j, "num_hidden_layers", where);
  c.n_head = required_int(j, "num_attention_heads", where);
  c.n_kv_head = optional_int(j, "num_key_value_heads", where, c.n_head);  // transformers' default
  if (c.n_head % c.n_kv_head != 0)
    SL_THROW(InvalidArgument, where, ": field 'num_key_value_heads' = ", c.n_kv_head,
             " does not divide field 'num_attention_heads' = ", c.n_head,
             " (each K/V head serves num_attention_heads / num_key_value_heads query heads)");
  if (present(j, "head_dim")) {
    const int hd = required_int(j, "head_dim", where);
    if (c.n_embd % c.n_head != 0 || hd != c.n_embd / c.n_head) c.head_dim_override = hd;
  } else if (c.n_embd % c.n_head != 0) {
    SL_THROW(InvalidArgument, where, ": field 'num_attention_heads' = ", c.n_head,
             " does not divide field 'hidden_size' = ", c.n_embd, " (and there is no head_dim)");
  }
  if (c.head_dim() % 2 != 0)
    SL_THROW(InvalidArgument, where, ": head_dim ", c.head_dim(),
             " must be even (rotary embeddings turn pairs of values)");
  // transformers' defaults per model type.
  const int default_max_pos = type == "llama" ? 2048 : type == "mistral" ? 4096 * 32 : 32768;
  c.max_seq_len = optional_int(j, "max_position_embeddings", where, default_max_pos);
  c.norm_eps = static_cast<float>(optional_number(j, "rms_norm_eps", where, 1e-6));
  c.tie_embeddings = optional_bool(j, "tie_word_embeddings", where, false);
  const std::string act = optional_string(j, "hidden_act", where, "silu");
  if (act != "silu")
    SL_THROW(InvalidArgument, where, ": field 'hidden_act' = \"", act,
             "\": this program's Llama MLP is SwiGLU (silu)");
  if (type == "llama") {
    c.qkv_bias = c.o_bias = optional_bool(j, "attention_bias", where, false);
    c.mlp_bias = optional_bool(j, "mlp_bias", where, false);
  } else if (type == "qwen2") {
    c.qkv_bias = true;  // Qwen2Attention: q/k/v_proj with bias, o_proj without
  }
  read_rope(j, where, c);
  // Sliding windows: Mistral's sliding_window; Qwen2's when use_sliding_window or layer_types say.
  bool sliding = false;
  if (type == "mistral") sliding = present(j, "sliding_window");
  if (type == "qwen2") {
    sliding = optional_bool(j, "use_sliding_window", where, false);
    if (present(j, "layer_types")) {
      const json& lt = j.at("layer_types");
      if (!lt.is_array())
        SL_THROW(IoError, where, ": field 'layer_types' must be an array, not ", lt.dump());
      for (const json& t : lt)
        if (t == "sliding_attention") sliding = true;
    }
  }
  if (sliding && present(j, "sliding_window")) {
    const int window = required_int(j, "sliding_window", where);
    if (window < c.max_seq_len) c.max_seq_len = window;
  }
  return c;
}

}  // namespace

std::string hf_model_types() { return "gpt2, llama, mistral, qwen2"; }

GPTConfig parse_hf_config(const std::string& text, const std::string& where) {
  const json j = parse_json_strict(text, where);
  if (!j.is_object()) SL_THROW(IoError, where, ": a config.json holds one JSON object");
  const std::string type = json_string(j, "model_type", where);
  GPTConfig c;
  if (type == "gpt2") {
    c = read_gpt2(j, where);
  } else if (type == "llama" || type == "mistral" || type == "qwen2") {
    c = read_llama_family(j, type, where);
  } else {
    SL_THROW(InvalidArgument, where, ": field 'model_type' = \"", type,
             "\" is not a model type this program builds (", hf_model_types(), ")");
  }
  try {
    c.validate();
  } catch (const InvalidArgument& e) {
    SL_THROW(InvalidArgument, where, ": ", e.what());
  }
  return c;
}

GPTConfig read_hf_config(const std::string& path) {
  const std::string file = is_directory(path) ? join_path(path, "config.json") : path;
  if (!path_exists(file)) SL_THROW(IoError, file, ": no such file");
  return parse_hf_config(read_text_file(file), file);
}

std::string hf_config_text(const GPTConfig& c) {
  c.validate();
  nlohmann::ordered_json j;
  if (!c.is_llama()) {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["model_type"] = "gpt2";
    j["vocab_size"] = c.vocab_size;
    j["n_positions"] = c.max_seq_len;
    j["n_embd"] = c.n_embd;
    j["n_layer"] = c.n_layer;
    j["n_head"] = c.n_head;
    j["n_inner"] = nullptr;
    j["activation_function"] = "gelu_new";
    j["layer_norm_epsilon"] = 1e-5;
    j["tie_word_embeddings"] = true;
    j["dtype"] = "float32";
    return j.dump(2) + "\n";
  }
  // Which Hugging Face class holds these biases: Llama's attention_bias covers q, k, v and o;
  // Qwen2 has q, k, v only.
  const bool qwen2 = c.qkv_bias && !c.o_bias && !c.mlp_bias;
  if (!qwen2 && c.qkv_bias != c.o_bias)
    SL_THROW(InvalidArgument, "config.json: q/k/v biases ", c.qkv_bias, " with o_proj bias ",
             c.o_bias, " and MLP biases ", c.mlp_bias, ": no Hugging Face model class has these");
  j["architectures"] = {qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
  j["model_type"] = qwen2 ? "qwen2" : "llama";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.n_embd;
  j["intermediate_size"] = c.ffn_dim;
  j["num_hidden_layers"] = c.n_layer;
  j["num_attention_heads"] = c.n_head;
  j["num_key_value_heads"] = c.n_kv_head;
  j["head_dim"] = c.head_dim();
  j["max_position_embeddings"] = c.max_seq_len;
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = decimal(c.norm_eps);
  j["tie_word_embeddings"] = c.tie_embeddings;
  if (!qwen2) {
    j["attention_bias"] = c.qkv_bias;
    j["mlp_bias"] = c.mlp_bias;
  } else {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
  }
  nlohmann::ordered_json rope;
  rope["rope_type"] = c.rope_llama3 ? "llama3" : "default";
  rope["rope_theta"] = decimal(c.rope_theta);
  if (c.rope_llama3) {
    rope["factor"] = decimal(c.rope_factor);
    rope["low_freq_factor"] = decimal(c.rope_low_freq_factor);
    rope["high_freq_factor"] = decimal(c.rope_high_freq_factor);
    rope["original_max_position_embeddings"] = c.rope_original_max_pos;
  }
  j["rope_theta"] = decimal(c.rope_theta);  // for transformers before 5
  j["rope_scaling"] = c.rope_llama3 ? rope : nlohmann::ordered_json(nullptr);
  j["rope_parameters"] = rope;
  j["dtype"] = "float32";
  return j.dump(2) + "\n";
}

}  // namespace shardlab
