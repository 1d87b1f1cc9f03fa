// Unit layouts (names, shapes, offsets) and the deterministic per-name initialisation.
#include "core/model/params.hpp"

#include <cmath>
#include <cstdlib>

#include "core/base/error.hpp"

namespace shardlab {

namespace {

void add(UnitLayout& u, std::string name, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  u.entries.push_back({std::move(name), std::move(shape), u.numel, n});
  u.numel += n;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// splitmix64 (Steele, Lea & Flood 2014): a tiny, well-mixed generator whose output is the same on
// every platform (std::normal_distribution is not).
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// Fills n values with N(0, std) by Box-Muller on a splitmix64 stream seeded by (seed, name).
void fill_normal(float* out, int64_t n, float std, uint64_t seed, const std::string& name) {
  uint64_t state = seed ^ fnv1a(name);
  splitmix64(state);  // decorrelate seeds that differ in few bits
  const double kTwoPi = 6.283185307179586;
  for (int64_t i = 0; i < n; i += 2) {
    // u1 in (0, 1]: log never sees 0.
    double u1 = (static_cast<double>(splitmix64(state) >> 11) + 1.0) * 0x1.0p-53;
    double u2 = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;
    double r = std::sqrt(-2.0 * std::log(u1));
    out[i] = static_cast<float>(std * r * std::cos(kTwoPi * u2));
    if (i + 1 < n) out[i + 1] = static_cast<float>(std * r * std::sin(kTwoPi * u2));
  }
}

}  // namespace

const ParamEntry& UnitLayout::find(const std::string& name) const {
  for (const ParamEntry& e : entries)
    if (e.name == name) return e;
  SL_THROW(InvalidArgument, "unit layout: no parameter named '", name, "'");
}

int num_units(const GPTConfig& cfg) { return 1 + cfg.n_layer; }

UnitLayout unit_layout(const GPTConfig& cfg, int unit) {
  if (unit < 0 || unit >= num_units(cfg))
    SL_THROW(InvalidArgument, "unit_layout: unit ", unit, " outside [0, ", num_units(cfg), ")");
  if (cfg.is_llama())
    SL_THROW(InvalidArgument, "unit_layout: ", cfg.describe(),
             " is a Llama-family shape, which has no GPT-2 units (its layers: "
             "core/model/llama_layers.hpp); the engine trains and plans GPT-2 shapes");
  const int64_t C = cfg.n_embd;
  UnitLayout u;
  if (unit == kRootUnit) {
    add(u, "wte.weight", {cfg.vocab_size, C});
    add(u, "wpe.weight", {cfg.max_seq_len, C});
    add(u, "ln_f.weight", {C});
    add(u, "ln_f.bias", {C});
    return u;
  }
  const std::string h = "h." + std::to_string(unit - 1) + ".";
  add(u, h + "ln_1.weight", {C});
  add(u, h + "ln_1.bias", {C});
  add(u, h + "attn.c_attn.weight", {C, 3 * C});
  add(u, h + "attn.c_attn.bias", {3 * C});
  add(u, h + "attn.c_proj.weight", {C, C});
  add(u, h + "attn.c_proj.bias", {C});
  add(u, h + "ln_2.weight", {C});
  add(u, h + "ln_2.bias", {C});
  add(u, h + "mlp.c_fc.weight", {C, 4 * C});
  add(u, h + "mlp.c_fc.bias", {4 * C});
  add(u, h + "mlp.c_proj.weight", {4 * C, C});
  add(u, h + "mlp.c_proj.bias", {C});
  return u;
}

ParamRef find_param(const GPTConfig& cfg, const std::string& name) {
  int unit = kRootUnit;
  if (name.rfind("h.", 0) == 0) {
    char* end = nullptr;
    long layer = std::strtol(name.c_str() + 2, &end, 10);
    if (end == name.c_str() + 2 || *end != '.' || layer < 0 || layer >= cfg.n_layer)
      SL_THROW(InvalidArgument, "find_param: no parameter named '", name, "' (n_layer ",
               cfg.n_layer, ")");
    unit = block_unit(static_cast<int>(layer));
  }
  return {unit, unit_layout(cfg, unit).find(name)};
}

void init_unit(const GPTConfig& cfg, int unit, uint64_t seed, float* flat) {
  const UnitLayout u = unit_layout(cfg, unit);
  const float kStd = 0.02f;
  // GPT-2 scales residual projections by 1/sqrt(2L): each block adds two of them to the stream.
  const float kResidualStd = kStd / std::sqrt(2.0f * cfg.n_layer);
  for (const ParamEntry& e : u.entries) {
    float* p = flat + e.offset;
    const bool is_ln = e.name.find("ln_") != std::string::npos;
    if (ends_with(e.name, ".bias")) {
      for (int64_t i = 0; i < e.numel; ++i) p[i] = 0.0f;
    } else if (is_ln) {
      for (int64_t i = 0; i < e.numel; ++i) p[i] = 1.0f;
    } else if (ends_with(e.name, "c_proj.weight")) {
      fill_normal(p, e.numel, kResidualStd, seed, e.name);
    } else {
      fill_normal(p, e.numel, kStd, seed, e.name);
    }
  }
}

}  // namespace shardlab
