// The strategy table (one row per strategy: what it keeps, how it reduces gradients, when it
// gathers parameters), strategy names and parsing, and the shard group size each strategy implies.
#include "core/fsdp/strategy.hpp"

#include "core/base/error.hpp"

namespace shardlab {

namespace {

constexpr Placement kFull = Placement::full, kShard = Placement::shard;
constexpr GradCollective kAr = GradCollective::all_reduce, kRs = GradCollective::reduce_scatter,
                         kRsAr = GradCollective::reduce_scatter_all_reduce;

// In the order of the enum. docs/memory.md's and docs/fsdp.md's strategy tables, checked against
// them by fsdp_strategy_test.
constexpr std::array<StrategySpec, kNumStrategies> kStrategies = {{
    // strategy               zero      params  grads   optim   grads    reshard  gather
    //                                  (kept between steps)    reduced  after    after
    //                                                          by       forward  step
    {Strategy::no_shard, "DDP", kFull, kFull, kFull, kAr, false, false},
    {Strategy::shard_optim, "ZeRO-1", kFull, kFull, kShard, kRs, false, true},
    {Strategy::shard_grad_op, "ZeRO-2", kFull, kShard, kShard, kRs, false, true},
    {Strategy::full_shard, "ZeRO-3", kShard, kShard, kShard, kRs, true, false},
    {Strategy::hybrid_shard, "HSDP", kShard, kShard, kShard, kRsAr, true, false},
}};

}  // namespace

const std::array<StrategySpec, kNumStrategies>& strategy_table() { return kStrategies; }

const StrategySpec& strategy_spec(Strategy s) {
  const int i = static_cast<int>(s);
  SL_CHECK(i >= 0 && i < kNumStrategies, "strategy ", i, " is not one of the ", kNumStrategies);
  return kStrategies[i];
}

const char* strategy_name(Strategy s) {
  switch (s) {
    case Strategy::no_shard: return "no_shard";
    case Strategy::shard_optim: return "shard_optim";
    case Strategy::shard_grad_op: return "shard_grad_op";
    case Strategy::full_shard: return "full_shard";
    case Strategy::hybrid_shard: return "hybrid_shard";
  }
  return "?";
}

Strategy parse_strategy(const std::string& s) {
  if (s == "no_shard" || s == "ddp") return Strategy::no_shard;
  if (s == "shard_optim" || s == "zero1") return Strategy::shard_optim;
  if (s == "shard_grad_op" || s == "zero2") return Strategy::shard_grad_op;
  if (s == "full_shard" || s == "zero3" || s == "fsdp") return Strategy::full_shard;
  if (s == "hybrid_shard" || s == "hsdp") return Strategy::hybrid_shard;
  SL_THROW(InvalidArgument, "unknown strategy '", s,
           "' (expected no_shard, shard_optim, shard_grad_op, full_shard or hybrid_shard; "
           "aliases ddp, zero1, zero2, zero3, fsdp, hsdp)");
}

const char* grad_collective_name(GradCollective c) {
  constexpr const char* kNames[] = {"all_reduce", "reduce_scatter", "reduce_scatter+all_reduce"};
  return kNames[static_cast<int>(c)];
}

int shard_group_size(Strategy s, int world, int hybrid_group) {
  SL_CHECK(world >= 1, "world size ", world, " must be at least 1");
  if (s == Strategy::no_shard) return 1;
  if (s != Strategy::hybrid_shard) return world;
  if (hybrid_group == 0) return world;  // EngineConfig's "0: all"
  SL_CHECK(hybrid_group >= 1 && hybrid_group <= world && world % hybrid_group == 0,
           "hybrid_shard: group size ", hybrid_group, " must divide the world size ", world);
  return hybrid_group;
}

const char* accum_mode_name(AccumMode m) {
  return m == AccumMode::no_sync ? "no_sync" : "reduce_each";
}

AccumMode parse_accum_mode(const std::string& s) {
  if (s == "reduce_each") return AccumMode::reduce_each;
  if (s == "no_sync") return AccumMode::no_sync;
  SL_THROW(InvalidArgument, "unknown gradient accumulation mode '", s,
           "' (expected reduce_each or no_sync)");
}

GradAccum grad_accum(Strategy s, DType reduce_dtype, AccumMode mode) {
  // Full gradients accumulate locally whatever the mode: they are full-sized anyway.
  if (strategy_spec(s).grads == Placement::full)
    return reduce_dtype == DType::f32 ? GradAccum::direct : GradAccum::fold;
  return mode == AccumMode::no_sync ? GradAccum::no_sync : GradAccum::reduce_each;
}

const char* grad_accum_name(GradAccum a) {
  constexpr const char* kNames[] = {"direct", "fold", "reduce_each", "no_sync"};
  return kNames[static_cast<int>(a)];
}

}  // namespace shardlab
