// Sharding strategies and what each one decides: what a rank keeps of a unit's parameters,
// gradients and optimizer state between steps, which collective reduces the gradients, and when
// parameters are gathered. One row per strategy in strategy.cpp (the table of docs/fsdp.md and
// docs/memory.md); the engine and the planner switch on these decisions, never on the strategy.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/base/dtype.hpp"

namespace shardlab {

enum class Strategy {
  no_shard,       // DDP: everything replicated, all-reduce of gradients
  shard_optim,    // ZeRO-1: Adam state sharded; full params and grads
  shard_grad_op,  // ZeRO-2: Adam state and grads sharded; full params
  full_shard,     // ZeRO-3 / FSDP: params, grads and Adam state sharded
  hybrid_shard,   // HSDP: full_shard inside groups of G ranks, replicated across N/G groups
};

const char* strategy_name(Strategy s);
// Accepts the names above and the aliases ddp, zero1, zero2, zero3, fsdp, hsdp; throws
// InvalidArgument naming the accepted values.
Strategy parse_strategy(const std::string& s);

// What a rank keeps of a state between steps: the whole unit, or its shard group's share of it.
enum class Placement : uint8_t { full, shard };

// The collective that turns backward's gradient of a unit into this rank's reduced gradient.
enum class GradCollective : uint8_t {
  all_reduce,                 // the full gradient, in place, across the replica group
  reduce_scatter,             // this rank's shard, within the shard group
  reduce_scatter_all_reduce,  // reduce-scatter in the shard group, then all-reduce of the shard
                              // across the replica group
};
const char* grad_collective_name(GradCollective c);

// A strategy's decisions. The shard group is the G ranks that split a unit (G = 1 for no_shard),
// the replica group the N/G ranks holding the same shard (mesh.hpp); a group of one rank makes
// its collectives no-ops, not another strategy.
struct StrategySpec {
  Strategy strategy;
  const char* zero;                // the same scheme's name in the ZeRO paper (or DDP, HSDP)
  Placement params, grads, optim;  // kept between steps
  GradCollective grad_collective;
  bool reshard_after_forward;  // params all-gathered per unit before forward and backward,
                               // freed after each (ZeRO-3)
  bool gather_after_step;      // the optimizer updates the owned range of full params: an
                               // all-gather after the step brings the others' ranges
};
inline constexpr int kNumStrategies = 5;
const std::array<StrategySpec, kNumStrategies>& strategy_table();
const StrategySpec& strategy_spec(Strategy s);

// What a strategy keeps persistently at full size on every rank of its shard group.
inline bool keeps_full_params(Strategy s) { return strategy_spec(s).params == Placement::full; }
inline bool keeps_full_grads(Strategy s) { return strategy_spec(s).grads == Placement::full; }
inline bool keeps_full_optim(Strategy s) { return strategy_spec(s).optim == Placement::full; }
// Parameters gathered per unit before forward and backward and freed after (ZeRO-3 style).
inline bool gathers_params_per_unit(Strategy s) { return strategy_spec(s).reshard_after_forward; }

// The number of ranks a unit is sharded over: 1 for no_shard (nothing is split), the hybrid group
// size G for hybrid_shard (EngineConfig::hybrid_group; 0: the whole world, one group), the world
// size N otherwise. The one place that reads hybrid_group 0.
int shard_group_size(Strategy s, int world, int hybrid_group);

// How gradients of K > 1 micro-batches are accumulated by strategies that keep only gradient
// shards (shard_grad_op, full_shard, hybrid_shard). no_shard and shard_optim keep full gradients
// anyway and always accumulate locally, communicating on the last micro-batch only.
enum class AccumMode : uint8_t {
  // Reduce-scatter after every micro-batch and add into the gradient shard: memory stays sharded,
  // gradient traffic is K times one step's. The default.
  reduce_each,
  // no_sync: keep every unit's full fp32 gradient across micro-batches (4 Psi bytes per rank, the
  // memory FSDP was meant to save) and reduce once, on the last micro-batch.
  no_sync,
};
const char* accum_mode_name(AccumMode m);
AccumMode parse_accum_mode(const std::string& s);

// How backward's fp32 gradient of a unit (computed per micro-batch) reaches the gradient a rank
// keeps, and when it is reduced. Decided once from the strategy, reduce_dtype and the accumulation
// mode; the engine switches on it (grad_reduce.cpp, optim_step.cpp).
enum class GradAccum : uint8_t {
  direct,       // full fp32 gradients: backward adds into them; reduced on the last micro-batch
  fold,         // full gradients in reduce_dtype: backward writes an fp32 gradient, cast and added
                // into them after each micro-batch; reduced on the last
  reduce_each,  // gradient shards: reduced after every micro-batch and added into the shard
  no_sync,      // gradient shards: the fp32 gradient kept across micro-batches, reduced on the last
};
GradAccum grad_accum(Strategy s, DType reduce_dtype, AccumMode mode);
// Whether a unit's gradient is reduced after this micro-batch's backward: after every one under
// reduce_each, after the last under the others.
inline bool reduces_after(GradAccum a, bool last_micro) {
  return last_micro || a == GradAccum::reduce_each;
}
const char* grad_accum_name(GradAccum a);

}  // namespace shardlab
