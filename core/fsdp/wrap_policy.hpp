// The wrap policy: which stages of the model (core/model/model.hpp) form one FSDP unit (one flat
// parameter, gathered and freed together), and the order in which one micro-batch's forward and
// backward use the units. Pure functions of the model and the policy: the engine builds its units
// and walks its schedule from them, and the planner runs that engine.
//
// The model is a tree: the root's own stages, then `layers` (the repeated list), each a run of
// stages. A policy assigns every stage to a unit; unit 0 is the root, which holds the root's own
// stages and whatever no other unit takes. The policies' names are the command line's (--wrap),
// where a "block" is one of the model's layers:
//   block      root + one unit per layer (the default; FSDP2's fully_shard on each of
//              torchtitan's model.layers)
//   whole      one unit for the whole model (FSDP with no auto-wrap policy)
//   layer      root + one unit per stage of each layer
//   blocks:K   root + one unit per K consecutive layers (the last may hold fewer)
//   size:N     PyTorch's size_based_auto_wrap_policy(min_num_params = N) over the tree, bottom up:
//              a layer's stage with >= N parameters becomes a unit; what is left of the layer
//              becomes a unit when it has >= N; anything smaller stays in the root (the list of
//              layers itself is never wrapped, as PyTorch excludes ModuleList).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model/model.hpp"

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

// One FSDP unit: the stages whose parameters, one after the other, make its unpadded flat buffer.
struct WrapUnit {
  std::string name;  // what it holds: "root", a layer's or a stage's name, "<item>s 0-1", ...
  std::vector<int> stages;  // in buffer order: the root's own stages first, then forward order
  int64_t numel = 0;
};

// Where a stage's parameters live: in unit `unit`, from element `offset` of its flat buffer.
struct StagePlace {
  int unit = 0;
  int64_t offset = 0;
};

struct WrapPlan {
  std::vector<WrapUnit> units;    // unit 0 holds the root; the others in order of first use
  std::vector<StagePlace> place;  // per stage
};

// The units of `model` under `p` (blocks:K with K >= the layer count puts every layer in one
// unit).
WrapPlan make_wrap_plan(const Model& model, const WrapPolicy& p);

// ---- the schedule of one micro-batch

// Stages that run back to back with the same units gathered: one compute span. Forward and
// backward give one per stage, except that consecutive stages of one layer needing the same units
// share one (under `block`, a whole layer).
struct StageUse {
  std::vector<int> stages;  // in the order this pass runs them (backward: reverse)
  int layer = -1;           // the layer they belong to, -1 for a root stage
  bool recompute = false;   // act-ckpt: the layer's forward again, before its backward
  // The use ends its layer in this pass (forward: holds its last stage; backward: its first), or
  // holds a root stage: what the stages saved can be dropped after it.
  bool ends_layer = false;
  std::vector<int> units;    // needed unsharded (the stages' and those they are tied to), in the
                             // order they are gathered
  std::vector<int> release;  // units whose last use in this pass this is: resharded after it
};

struct PassSchedule {
  std::vector<StageUse> uses;
  std::vector<int> order;  // units in order of first use: prefetch walks this
  std::vector<int> pos;    // pos[unit] = its index in order
};

// Forward: the stages in order. keep_root: the root unit is not released (EngineConfig::keep_root);
// the backward then finds it gathered.
PassSchedule forward_schedule(const Model& model, const WrapPlan& w, bool keep_root = false);
// Backward: the stages in reverse; with act_ckpt each layer's recompute (its stages' units in the
// order backward uses them) comes before its first backward use.
PassSchedule backward_schedule(const Model& model, const WrapPlan& w, bool act_ckpt);

}  // namespace shardlab
