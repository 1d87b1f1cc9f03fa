// GPT-2's parameter layout in units: unit 0 is the root (the embedding's and the head's
// parameters: embeddings and the final LayerNorm), unit 1+i is transformer block i (its attention
// half, then its MLP half). These are the single-rank GPT's buffers, the lessons' units and the
// FSDP engine's units under its default wrap policy; the entries come from the stages' parameter
// lists (gpt2.hpp). Initialisation is per parameter name (stage.hpp), so it does not depend on
// how many ranks (or which shard layout) the parameters end up on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model/config.hpp"

namespace shardlab {

// One named parameter inside a unit's flat buffer. Names and (in, out) layouts follow Hugging
// Face GPT-2 (Conv1D weights are stored (in, out)), without the "transformer." prefix.
struct ParamEntry {
  std::string name;            // "wte.weight", "h.3.attn.c_attn.weight", ...
  std::vector<int64_t> shape;  // row-major
  int64_t offset = 0;          // first element inside the unit's flat buffer
  int64_t numel = 0;
};

// A unit: its entries contiguous, in a fixed order, no padding (padding for sharding is the
// engine's job). numel is the sum of the entries' numel.
struct UnitLayout {
  std::vector<ParamEntry> entries;
  int64_t numel = 0;
  // The entry called `name`; throws InvalidArgument when the unit has none.
  const ParamEntry& find(const std::string& name) const;
};

// 1 + n_layer.
int num_units(const GPTConfig& cfg);
inline constexpr int kRootUnit = 0;
inline int block_unit(int layer) { return 1 + layer; }

// Unit 0 (root), in this order:
//   wte.weight (V, C), wpe.weight (maxT, C), ln_f.weight (C), ln_f.bias (C)
// Unit 1+i (block i), in this order:
//   h.{i}.ln_1.weight (C), h.{i}.ln_1.bias (C),
//   h.{i}.attn.c_attn.weight (C, 3C), h.{i}.attn.c_attn.bias (3C),
//   h.{i}.attn.c_proj.weight (C, C), h.{i}.attn.c_proj.bias (C),
//   h.{i}.ln_2.weight (C), h.{i}.ln_2.bias (C),
//   h.{i}.mlp.c_fc.weight (C, 4C), h.{i}.mlp.c_fc.bias (4C),
//   h.{i}.mlp.c_proj.weight (4C, C), h.{i}.mlp.c_proj.bias (C)
// The LM head is tied to wte.weight. Throws InvalidArgument for a unit outside [0, num_units).
UnitLayout unit_layout(const GPTConfig& cfg, int unit);

// Where a parameter lives: its unit and its entry. Throws InvalidArgument for an unknown name.
struct ParamRef {
  int unit = 0;
  ParamEntry entry;
};
ParamRef find_param(const GPTConfig& cfg, const std::string& name);

// Fills `flat` (host memory, unit_layout(cfg, unit).numel floats) with GPT-2's initialisation
// (the stages' init rules, init_params):
// Linear/embedding weights N(0, 0.02); residual projections (attn.c_proj.weight,
// mlp.c_proj.weight) N(0, 0.02 / sqrt(2 * n_layer)); biases 0; LayerNorm weight 1, bias 0.
// Each parameter draws from its own generator seeded by hash(seed, name), so values depend only on
// (seed, name, shape): the same on any rank count, and across units' evaluation order.
void init_unit(const GPTConfig& cfg, int unit, uint64_t seed, float* flat);

// Views into a block unit's flat buffer (device or host pointer `p`), laid out as above.
template <typename T>
struct BlockParamViews {
  T* ln1_w;      // (C)
  T* ln1_b;      // (C)
  T* qkv_w;      // (C, 3C)
  T* qkv_b;      // (3C)
  T* attproj_w;  // (C, C)
  T* attproj_b;  // (C)
  T* ln2_w;      // (C)
  T* ln2_b;      // (C)
  T* fc_w;       // (C, 4C)
  T* fc_b;       // (4C)
  T* fcproj_w;   // (4C, C)
  T* fcproj_b;   // (C)
};
// A block's flat buffer is two contiguous halves: attention (ln_1 .. attn.c_proj.bias, these
// many elements) then MLP (ln_2 .. mlp.c_proj.bias). FSDP may keep the halves in different units.
inline int64_t block_attn_numel(const GPTConfig& cfg) {
  const int64_t C = cfg.n_embd;
  return 4 * C * C + 6 * C;
}

// Views with the attention half at `attn` and the MLP half at `mlp`; a half passed as null keeps
// its views null.
template <typename T>
BlockParamViews<T> block_views(const GPTConfig& cfg, T* attn, T* mlp) {
  const int64_t C = cfg.n_embd;
  BlockParamViews<T> v{};
  T* p = attn;
  // clang-format off
  if (p) {
  v.ln1_w = p; p += C;
  v.ln1_b = p; p += C;
  v.qkv_w = p; p += C * 3 * C;
  v.qkv_b = p; p += 3 * C;
  v.attproj_w = p; p += C * C;
  v.attproj_b = p;
  }
  p = mlp;
  if (p) {
  v.ln2_w = p; p += C;
  v.ln2_b = p; p += C;
  v.fc_w = p; p += C * 4 * C;
  v.fc_b = p; p += 4 * C;
  v.fcproj_w = p; p += 4 * C * C;
  v.fcproj_b = p;
  }
  // clang-format on
  return v;
}
template <typename T>
BlockParamViews<T> block_views(const GPTConfig& cfg, T* p) {
  return block_views(cfg, p, p + block_attn_numel(cfg));
}

// Views into the root unit's flat buffer.
template <typename T>
struct RootParamViews {
  T* wte;    // (V, C)
  T* wpe;    // (maxT, C)
  T* lnf_w;  // (C)
  T* lnf_b;  // (C)
};
template <typename T>
RootParamViews<T> root_views(const GPTConfig& cfg, T* p) {
  const int64_t C = cfg.n_embd;
  RootParamViews<T> v;
  // clang-format off
  v.wte = p; p += static_cast<int64_t>(cfg.vocab_size) * C;
  v.wpe = p; p += static_cast<int64_t>(cfg.max_seq_len) * C;
  v.lnf_w = p; p += C;
  v.lnf_b = p;
  // clang-format on
  return v;
}

}  // namespace shardlab
