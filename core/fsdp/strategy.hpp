// Sharding strategies: what each rank keeps of a unit's parameters, gradients and Adam state, and
// which collectives a step issues. The table is in docs/fsdp.md and docs/memory.md.
#pragma once

#include <cstdint>
#include <string>

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

// What a strategy keeps persistently at full size on every rank of its shard group.
inline bool keeps_full_params(Strategy s) {
  return s == Strategy::no_shard || s == Strategy::shard_optim || s == Strategy::shard_grad_op;
}
inline bool keeps_full_grads(Strategy s) {
  return s == Strategy::no_shard || s == Strategy::shard_optim;
}
inline bool keeps_full_optim(Strategy s) { return s == Strategy::no_shard; }
// Parameters gathered per unit before forward and backward and freed after (ZeRO-3 style).
inline bool gathers_params_per_unit(Strategy s) {
  return s == Strategy::full_shard || s == Strategy::hybrid_shard;
}

// The number of ranks a unit is sharded over: 1 for no_shard (nothing is split), the hybrid group
// size G for hybrid_shard, the world size N otherwise.
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

}  // namespace shardlab
