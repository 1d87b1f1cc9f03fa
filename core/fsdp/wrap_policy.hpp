// The wrap policy: which parameters form one FSDP unit (one flat parameter, gathered and freed
// together), and the order in which one step's forward and backward use the units. Pure functions
// of the model and the policy: the engine (engine.cpp) builds its units and walks its schedule from
// them, the planner (plan_schedule.cpp) replays the same schedule with byte counts.
//
// The model splits into pieces, in forward order: the root (wte, wpe, ln_f; used first by the
// embedding and last by the head), then for each block i its attention half (ln_1, attn) and its
// MLP half (ln_2, mlp), contiguous in the block's flat layout (core/model/params.hpp). A policy
// assigns every piece to a unit; unit 0 always holds the root.
//   block      root + one unit per block (the default)
//   whole      one unit for the whole model (FSDP with no auto-wrap policy)
//   layer      root + a block's attention and its MLP as separate units, each with its LayerNorm
//   blocks:K   root + one unit per K consecutive blocks (the last may hold fewer)
//   size:N     PyTorch's size_based_auto_wrap_policy(min_num_params = N) over this model's module
//              tree (root -> blocks -> attention, MLP), bottom up: a block's half with >= N
//              parameters becomes a unit; what is left of the block becomes a unit when it has >=
//              N; anything smaller stays in the root unit (the blocks' list itself is never
//              wrapped).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model/config.hpp"

namespace shardlab {

enum class WrapKind { block, whole, layer, blocks, size };

struct WrapPolicy {
  WrapKind kind = WrapKind::block;
  int64_t n = 0;  // K for blocks:K, N for size:N
};

// Parses "block", "whole", "layer", "blocks:K" (K >= 1), "size:N" (N >= 1). Throws InvalidArgument
// naming the option and the value: "--wrap blocks:0: K must be >= 1".
WrapPolicy parse_wrap_policy(const std::string& text);
std::string wrap_policy_name(const WrapPolicy& p);  // the text parse_wrap_policy reads back

// A contiguous range of one model unit's flat layout (unit_layout of core/model/params.hpp).
struct WrapSegment {
  int model_unit = 0;
  int64_t offset = 0;  // inside the model unit
  int64_t numel = 0;
};

// One FSDP unit: its segments, concatenated in this order, make its unpadded flat buffer.
struct WrapUnit {
  std::string name;  // what it holds: "root", "block 3", "blocks 0-1", "block 3 attn", ...
  std::vector<WrapSegment> segments;
  int64_t numel = 0;
};

// Where a piece's parameters live: in unit `unit`, from element `offset` of its flat buffer.
struct PiecePlace {
  int unit = 0;
  int64_t offset = 0;
};

struct WrapPlan {
  std::vector<WrapUnit> units;            // unit 0 holds the root; the others in order of first use
  PiecePlace root;                        // wte, wpe, ln_f
  std::vector<PiecePlace> attn, mlp;      // per block: its attention half, its MLP half
  int64_t attn_numel = 0, mlp_numel = 0;  // of one block's halves
};

// The units of `cfg` under `p` (blocks:K with K >= n_layer puts every block in one unit).
WrapPlan make_wrap_plan(const GPTConfig& cfg, const WrapPolicy& p);

// ---- the schedule of one micro-batch

enum class UseKind {
  embed,      // embedding forward / backward (root)
  block,      // a whole block whose halves share a unit
  attn,       // a block's attention half (its own unit)
  mlp,        // a block's MLP half (its own unit)
  recompute,  // act-ckpt: the block's forward again, before its backward (both halves' units)
  head,       // ln_f, tied head, loss (root)
};

struct UnitUse {
  UseKind kind = UseKind::embed;
  int layer = -1;            // the block, for block / attn / mlp / recompute
  std::vector<int> units;    // needed unsharded for this use, in the order they are gathered
  std::vector<int> release;  // units whose last use in this pass this is: resharded after it
};

struct PassSchedule {
  std::vector<UnitUse> uses;
  std::vector<int> order;  // units in order of first use: prefetch walks this
  std::vector<int> pos;    // pos[unit] = its index in order
};

// Forward: embed, blocks 0..L-1 (block, or attn then mlp), head. keep_root: the head does not
// release the root (EngineConfig::keep_root); the backward's head then finds it gathered.
PassSchedule forward_schedule(const WrapPlan& w, int n_layer, bool keep_root = false);
// Backward: head, blocks L-1..0 (recompute when act_ckpt; block, or mlp then attn), embed.
PassSchedule backward_schedule(const WrapPlan& w, int n_layer, bool act_ckpt);

// "forward block 3 attn", "backward head": a use, for the planner's peak label.
std::string use_name(const UnitUse& u);

}  // namespace shardlab
