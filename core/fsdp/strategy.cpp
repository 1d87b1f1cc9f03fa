// Strategy names, parsing and the shard group size each strategy implies.
#include "core/fsdp/strategy.hpp"

#include "core/base/error.hpp"

namespace shardlab {

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

int shard_group_size(Strategy s, int world, int hybrid_group) {
  SL_CHECK(world >= 1, "world size ", world, " must be at least 1");
  if (s == Strategy::no_shard) return 1;
  if (s != Strategy::hybrid_shard) return world;
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

}  // namespace shardlab
