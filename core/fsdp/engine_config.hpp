// The engine's settings: the one description of how a run shards, gathers, reduces and steps.
// The engine takes it, `shardlab train` keeps one in TrainConfig, and the memory planner keeps one
// in PlanInput, so a setting added here reaches all three.
#pragma once

#include <cstdint>
#include <string>

#include "core/base/dtype.hpp"
#include "core/fsdp/strategy.hpp"
#include "core/optim/optimizer.hpp"

namespace shardlab {

// What lives in host memory instead of device memory (--offload). optim: the optimizer state of
// the rank's owned range (m, v, the fp32 master copy) and the optimizer step over it; the
// gradient shard is copied device -> host before the step and the updated parameters back.
// params (PyTorch's CPUOffload(offload_params=True), whose name it keeps): more than parameters,
// everything a rank keeps between steps: the parameter shards, their gradient shards and the
// optimizer state (full_shard, hybrid_shard). A unit's parameter shard is copied up before its
// all-gather, its reduced gradient shard down after the reduce-scatter, and the optimizer step
// runs on the host with no copies.
enum class Offload : uint8_t { none, optim, params };
const char* offload_name(Offload o);
// "none", "optim" or "params"; throws InvalidArgument naming --offload otherwise.
Offload parse_offload(const std::string& s);

struct EngineConfig {
  Strategy strategy = Strategy::full_shard;
  // What one unit (one flat parameter, gathered and freed together) holds: block, whole, layer,
  // blocks:K or size:N (wrap_policy.hpp).
  std::string wrap = "block";
  int hybrid_group = 0;          // G for hybrid_shard; must divide the world size (0: all)
  int prefetch = 1;              // units whose all-gather is issued ahead (0 = off)
  int max_inflight_gathers = 0;  // all-gathers issued and not yet consumed, at most (0 = no limit)
  DType param_dtype = DType::f32;   // gathered / full parameters and the all-gathers
  DType reduce_dtype = DType::f32;  // gradients kept and the gradient collectives
  bool act_ckpt = false;            // recompute each block's forward during its backward
  // full_shard, hybrid_shard: the root unit stays gathered from the loss to the head's backward
  // instead of being freed and gathered again at once, as PyTorch's FSDP does for its root (FSDP1
  // skips the root's post-forward reshard; FSDP2's root has reshard_after_forward False). One
  // all-gather of the root fewer per step; the memory held is the same. Strategies that keep
  // whole parameters gather nothing per unit, so it changes nothing for them.
  bool keep_root = false;
  AccumMode accum_mode = AccumMode::reduce_each;
  float clip = 0.0f;      // global gradient-norm limit, 0 = off
  OptimizerConfig optim;  // AdamW or SGD, one instance per unit over the owned range
  uint64_t seed = 1337;   // parameter initialisation (init_unit)
  // This rank's compute spans last this many times as long (>= 1; --slow-rank): a straggler on
  // demand, for demonstrations and the straggler tests. The extra time is a sleep.
  double compute_slowdown = 1.0;
  Offload offload = Offload::none;  // --offload: state kept in host memory (a second tier)
  int64_t host_mem_limit = 0;       // --host-mem-limit: the host tier's capacity, 0 = unlimited

  // Checks the settings that need no world size; throws InvalidArgument naming the command-line
  // option and its value ("--prefetch -1: must be >= 0"), as `train` and `plan` report them.
  void validate() const;
};

}  // namespace shardlab
