// GPTConfig: presets, validation, the parameter count and the JSON of the shape.
#include "core/model/config.hpp"

#include <sstream>

#include "core/base/error.hpp"

namespace shardlab {

namespace {
struct Preset {
  const char* name;
  GPTConfig cfg;
};
// {vocab_size, max_seq_len, n_layer, n_head, n_embd}
const Preset kPresets[] = {
    {"tiny", {256, 64, 2, 2, 64}},
    {"small", {256, 256, 4, 4, 256}},
    {"medium", {256, 512, 8, 8, 512}},
    {"gpt2", {50257, 1024, 12, 12, 768}},
    // For the simulator (docs/simulate.md): GPT-2 XL's shape (1.56B), and a 7B-class GPT with
    // LLaMA-7B's widths (L 32, C 4096, 32 heads, T 2048, V 32000) on this project's block (GELU MLP
    // of 4C, biases): 6.59B parameters.
    {"gpt2-xl", {50257, 1024, 48, 25, 1600}},
    {"7b", {32000, 2048, 32, 32, 4096}},
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

void GPTConfig::validate() const {
  const std::pair<const char*, int> positive[] = {{"vocab_size", vocab_size},
                                                  {"max_seq_len", max_seq_len},
                                                  {"n_layer", n_layer},
                                                  {"n_head", n_head},
                                                  {"n_embd", n_embd}};
  for (const auto& [field, value] : positive)
    if (value <= 0)
      SL_THROW(InvalidArgument, "GPTConfig: ", field, " ", value, " must be positive");
  if (n_embd % n_head != 0)
    SL_THROW(InvalidArgument, "GPTConfig: n_head ", n_head, " does not divide n_embd ", n_embd);
  // num_params() counts in int64: with n_embd near 2^31, 12 C^2 alone overflows it. The count in
  // long double first; 2^56 parameters (256 PiB as fp32) is far beyond any machine, and keeps
  // every byte count derived from it (x 16 for params, grads and Adam's m and v) inside int64.
  const long double C = n_embd;
  const long double params = static_cast<long double>(vocab_size) * C +
                             static_cast<long double>(max_seq_len) * C + 2 * C +
                             static_cast<long double>(n_layer) * (12 * C * C + 13 * C);
  constexpr long double kMaxParams = 72057594037927936.0L;  // 2^56
  if (params > kMaxParams)
    SL_THROW(InvalidArgument, "GPTConfig: vocab_size ", vocab_size, ", max_seq_len ", max_seq_len,
             ", n_layer ", n_layer, ", n_embd ", n_embd, " give ", static_cast<double>(params),
             " parameters, more than the 2^56 (7.2e+16) this program counts");
}

int64_t GPTConfig::num_params() const {
  const int64_t C = n_embd;
  const int64_t root =
      static_cast<int64_t>(vocab_size) * C + static_cast<int64_t>(max_seq_len) * C + 2 * C;
  // ln_1, ln_2: 4C; c_attn: 3C^2 + 3C; attn c_proj: C^2 + C; c_fc: 4C^2 + 4C; mlp c_proj: 4C^2 + C
  const int64_t block = 12 * C * C + 13 * C;
  return root + n_layer * block;
}

std::string GPTConfig::describe() const {
  std::ostringstream os;
  os << "V=" << vocab_size << " T=" << max_seq_len << " L=" << n_layer << " NH=" << n_head
     << " C=" << n_embd << " (" << with_commas(num_params()) << " params)";
  return os.str();
}

nlohmann::json gpt_config_json(const GPTConfig& cfg) {
  return {{"vocab_size", cfg.vocab_size},
          {"max_seq_len", cfg.max_seq_len},
          {"n_layer", cfg.n_layer},
          {"n_head", cfg.n_head},
          {"n_embd", cfg.n_embd}};
}

}  // namespace shardlab
