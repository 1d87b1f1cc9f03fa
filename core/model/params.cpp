// GPT-2's unit layouts (names, shapes, offsets) and their initialisation, from its stages'
// parameters.
#include "core/model/params.hpp"

#include <cstdlib>

#include "core/base/error.hpp"
#include "core/model/gpt2.hpp"

namespace shardlab {

namespace {

void add(UnitLayout& u, const std::vector<StageParam>& params) {
  for (const StageParam& p : params) {
    u.entries.push_back({p.name, p.shape, u.numel, p.numel()});
    u.numel += p.numel();
  }
}

// A unit's parameters with their init rules: the stages it is made of (gpt2.hpp), in order.
std::vector<StageParam> unit_params(const GPTConfig& cfg, int unit) {
  if (unit < 0 || unit >= num_units(cfg))
    SL_THROW(InvalidArgument, "unit_layout: unit ", unit, " outside [0, ", num_units(cfg), ")");
  refuse_llama_shape(cfg, "unit_layout");
  std::vector<StageParam> a, b;
  if (unit == kRootUnit) {
    a = gpt2_embedding_params(cfg);
    b = gpt2_head_params(cfg);
  } else {
    a = gpt2_attn_params(cfg, unit - 1);
    b = gpt2_mlp_params(cfg, unit - 1);
  }
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

const ParamEntry& UnitLayout::find(const std::string& name) const {
  for (const ParamEntry& e : entries)
    if (e.name == name) return e;
  SL_THROW(InvalidArgument, "unit layout: no parameter named '", name, "'");
}

int num_units(const GPTConfig& cfg) { return 1 + cfg.n_layer; }

UnitLayout unit_layout(const GPTConfig& cfg, int unit) {
  UnitLayout u;
  add(u, unit_params(cfg, unit));
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
  init_params(unit_params(cfg, unit), seed, flat);
}

}  // namespace shardlab
