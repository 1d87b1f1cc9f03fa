// GPTConfig: presets, validation, the parameter count and the JSON of the shape.
#include "core/model/config.hpp"

#include <cmath>
#include <limits>
#include <sstream>

#include "core/base/error.hpp"
#include "core/base/json_get.hpp"

namespace shardlab {

namespace {
struct Preset {
  const char* name;
  GPTConfig cfg;
};

GPTConfig llama(int V, int T, int L, int NH, int NKV, int C, int F, float theta, float eps,
                bool tie) {
  GPTConfig c{V, T, L, NH, C};
  c.family = ModelFamily::llama;
  c.n_kv_head = NKV;
  c.ffn_dim = F;
  c.rope_theta = theta;
  c.norm_eps = eps;
  c.tie_embeddings = tie;
  return c;
}

GPTConfig with_qkv_bias(GPTConfig c) {
  c.qkv_bias = true;
  return c;
}

// GPT-2: {vocab_size, max_seq_len, n_layer, n_head, n_embd}.
// Llama family: llama(V, maxT, L, NH, NKV, C, F, rope_theta, rms_norm_eps, tied), the published
// shapes from each model's config.json on the Hugging Face hub (vocab_size,
// max_position_embeddings, num_hidden_layers, num_attention_heads, num_key_value_heads,
// hidden_size, intermediate_size, rope_theta, rms_norm_eps, tie_word_embeddings).
const Preset kPresets[] = {
    {"tiny", {256, 64, 2, 2, 64}},
    {"small", {256, 256, 4, 4, 256}},
    {"medium", {256, 512, 8, 8, 512}},
    {"gpt2", {50257, 1024, 12, 12, 768}},
    // For the simulator (docs/simulate.md): GPT-2 XL's shape (1.56B), and a 7B-class GPT with
    // LLaMA-7B's widths (L 32, C 4096, 32 heads, T 2048, V 32000) on this project's block (GELU MLP
    // of 4C, biases): 6.59B parameters. llama2-7b is the real model.
    {"gpt2-xl", {50257, 1024, 48, 25, 1600}},
    {"7b", {32000, 2048, 32, 32, 4096}},
    // Small Llama shapes that train in seconds on a CPU: GQA with 2 query heads per K/V head, an
    // untied head, F about 8C/3 rounded up to a multiple of 16 (Llama's rule, with 256).
    {"llama-tiny", llama(256, 64, 2, 4, 2, 64, 176, 10000.0f, 1e-5f, false)},
    {"llama-small", llama(256, 256, 4, 8, 2, 256, 688, 10000.0f, 1e-5f, false)},
    // meta-llama/Llama-2-7b-hf: multi-head attention (NKV = NH).
    {"llama2-7b", llama(32000, 4096, 32, 32, 32, 4096, 11008, 10000.0f, 1e-5f, false)},
    // meta-llama/Meta-Llama-3-8B and -70B.
    {"llama3-8b", llama(128256, 8192, 32, 32, 8, 4096, 14336, 500000.0f, 1e-5f, false)},
    {"llama3-70b", llama(128256, 8192, 80, 64, 8, 8192, 28672, 500000.0f, 1e-5f, false)},
    // mistralai/Mistral-7B-v0.3 (no sliding window; v0.1's 4096-token window only limits T).
    {"mistral-7b", llama(32768, 32768, 32, 32, 8, 4096, 14336, 1000000.0f, 1e-5f, false)},
    // Qwen/Qwen2-7B-Instruct: q/k/v biases, RMSNorm eps 1e-6.
    {"qwen2-7b",
     with_qkv_bias(llama(152064, 32768, 28, 28, 4, 3584, 18944, 1000000.0f, 1e-6f, false))},
};

std::string with_commas(int64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}
}  // namespace

GPTConfig GPTConfig::preset(const std::string& name) {
  for (const Preset& p : kPresets)
    if (name == p.name) return p.cfg;
  std::string known;
  for (const Preset& p : kPresets) known += std::string(known.empty() ? "" : ", ") + p.name;
  SL_THROW(InvalidArgument, "GPTConfig: unknown preset '", name, "' (known: ", known, ")");
}

std::vector<std::string> GPTConfig::preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  return names;
}

const char* model_family_name(ModelFamily f) {
  switch (f) {
    case ModelFamily::gpt2: return "gpt2";
    case ModelFamily::llama: return "llama";
  }
  return "?";
}

void GPTConfig::validate() const {
  const std::pair<const char*, int> positive[] = {{"vocab_size", vocab_size},
                                                  {"max_seq_len", max_seq_len},
                                                  {"n_layer", n_layer},
                                                  {"n_head", n_head},
                                                  {"n_embd", n_embd}};
  for (const auto& [field, value] : positive)
    if (value <= 0)
      SL_THROW(InvalidArgument, "GPTConfig: ", field, " ", value, " must be positive");
  if (!is_llama()) {
    if (n_embd % n_head != 0)
      SL_THROW(InvalidArgument, "GPTConfig: n_head ", n_head, " does not divide n_embd ", n_embd);
  } else {
    if (n_kv_head <= 0)
      SL_THROW(InvalidArgument, "GPTConfig: n_kv_head ", n_kv_head, " must be positive");
    if (n_head % n_kv_head != 0)
      SL_THROW(InvalidArgument, "GPTConfig: n_kv_head ", n_kv_head, " does not divide n_head ",
               n_head, " (each K/V head serves n_head / n_kv_head query heads)");
    if (ffn_dim <= 0)
      SL_THROW(InvalidArgument, "GPTConfig: ffn_dim ", ffn_dim, " must be positive");
    if (head_dim_override < 0)
      SL_THROW(InvalidArgument, "GPTConfig: head_dim ", head_dim_override, " must be positive");
    if (head_dim_override == 0 && n_embd % n_head != 0)
      SL_THROW(InvalidArgument, "GPTConfig: n_head ", n_head, " does not divide n_embd ", n_embd,
               " (and no head_dim is given)");
    if (head_dim() % 2 != 0)
      SL_THROW(InvalidArgument, "GPTConfig: head_dim ", head_dim(),
               " must be even (rotary embeddings turn pairs of values)");
    if (!(rope_theta > 0.0f) || !std::isfinite(rope_theta))
      SL_THROW(InvalidArgument, "GPTConfig: rope_theta ", rope_theta, " must be positive");
    if (!(norm_eps > 0.0f) || !std::isfinite(norm_eps))
      SL_THROW(InvalidArgument, "GPTConfig: norm_eps ", norm_eps, " must be positive");
    if (rope_llama3) {
      if (!(rope_factor > 0.0f) || !(rope_low_freq_factor > 0.0f) ||
          !(rope_high_freq_factor > rope_low_freq_factor) || rope_original_max_pos <= 0)
        SL_THROW(InvalidArgument, "GPTConfig: rope_scaling (llama3): factor ", rope_factor,
                 ", low_freq_factor ", rope_low_freq_factor, ", high_freq_factor ",
                 rope_high_freq_factor, ", original_max_position_embeddings ",
                 rope_original_max_pos,
                 ": each must be positive and high_freq_factor above low_freq_factor");
    }
  }
  // num_params() counts in int64: with n_embd near 2^31, 12 C^2 alone overflows it. The count in
  // long double first; 2^56 parameters (256 PiB as fp32) is far beyond any machine, and keeps
  // every byte count derived from it (x 16 for params, grads and Adam's m and v) inside int64.
  const long double C = n_embd;
  long double params = 0;
  if (!is_llama()) {
    params = static_cast<long double>(vocab_size) * C + static_cast<long double>(max_seq_len) * C +
             2 * C + static_cast<long double>(n_layer) * (12 * C * C + 13 * C);
  } else {
    const long double q = static_cast<long double>(n_head) * head_dim();
    const long double kv = static_cast<long double>(n_kv_head) * head_dim();
    const long double F = ffn_dim;
    params = static_cast<long double>(vocab_size) * C * (tie_embeddings ? 1 : 2) + C +
             static_cast<long double>(n_layer) *
                 (2 * C * q + 2 * C * kv + 3 * C * F + 2 * C + q + 2 * kv + 2 * F + 2 * C);
  }
  constexpr long double kMaxParams = 72057594037927936.0L;  // 2^56
  if (params > kMaxParams)
    SL_THROW(InvalidArgument, "GPTConfig: vocab_size ", vocab_size, ", max_seq_len ", max_seq_len,
             ", n_layer ", n_layer, ", n_embd ", n_embd, " give ", static_cast<double>(params),
             " parameters, more than the 2^56 (7.2e+16) this program counts");
}

int64_t GPTConfig::block_params() const {
  const int64_t C = n_embd;
  if (!is_llama()) {
    // ln_1, ln_2: 4C; c_attn: 3C^2 + 3C; attn c_proj: C^2 + C; c_fc: 4C^2 + 4C; mlp c_proj: 4C^2 +
    // C
    return 12 * C * C + 13 * C;
  }
  const int64_t q = static_cast<int64_t>(n_head) * head_dim();
  const int64_t kv = static_cast<int64_t>(n_kv_head) * head_dim();
  const int64_t F = ffn_dim;
  // input_layernorm, post_attention_layernorm: 2C; q/k/v_proj: C (q + 2 kv) (+ q + 2 kv);
  // o_proj: q C (+ C); gate/up/down_proj: 3 C F (+ 2F + C)
  return 2 * C + C * (q + 2 * kv) + (qkv_bias ? q + 2 * kv : 0) + q * C + (o_bias ? C : 0) +
         3 * C * F + (mlp_bias ? 2 * F + C : 0);
}

int64_t GPTConfig::num_params() const {
  const int64_t C = n_embd;
  const int64_t V = vocab_size;
  const int64_t outside = is_llama() ? V * C * (tie_embeddings ? 1 : 2) + C  // embed, norm, head
                                     : V * C + static_cast<int64_t>(max_seq_len) * C + 2 * C;
  return outside + n_layer * block_params();
}

double GPTConfig::flops_per_token(int T) const {
  const int64_t lookup = is_llama() && !tie_embeddings ? int64_t{vocab_size} * n_embd : 0;
  return 6.0 * static_cast<double>(num_params() - lookup) +
         12.0 * n_layer * static_cast<double>(int64_t{n_head} * head_dim()) * T;
}

std::string GPTConfig::describe() const {
  std::ostringstream os;
  if (is_llama()) os << "llama ";
  os << "V=" << vocab_size << " T=" << max_seq_len << " L=" << n_layer << " NH=" << n_head;
  if (is_llama()) os << " NKV=" << n_kv_head;
  os << " C=" << n_embd;
  if (is_llama()) os << " F=" << ffn_dim;
  os << " (" << with_commas(num_params()) << " params)";
  return os.str();
}

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
