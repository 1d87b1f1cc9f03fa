// The FSDP engine: trains a model (core/model/model.hpp: an ordered list of stages) on one rank
// of a data-parallel group, with every sharding strategy of strategy.hpp. It knows the model only
// as stages with parameters, a forward and a backward. The wrap policy (wrap_policy.hpp,
// EngineConfig::wrap) groups the stages into units; each unit's parameters live in one flat
// buffer padded to a multiple of the shard group size, and rank r of the group owns
// [r*S, (r+1)*S).
//
// One step (docs/fsdp.md has the picture):
//   for each of K micro-batches: the stages' forward in order, each with its units gathered
//   (unshard, prefetching the next, reshard after a unit's last use), then their backward in
//   reverse (unshard -> compute -> reduce a unit's gradient as soon as its last use is done ->
//   reshard); the gradient collectives run only on the last micro-batch unless the strategy keeps
//   only gradient shards; then global-norm clipping, AdamW on the rank's shard, and for
//   shard_optim / shard_grad_op an all-gather of the updated parameters.
// All memory goes through the rank's Device (and so its tracker) under the categories of
// core/memory/tracker.hpp; all communication goes through Communicator and is counted there.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/base/dtype.hpp"
#include "core/comm/communicator.hpp"
#include "core/device/device.hpp"
#include "core/fsdp/engine_config.hpp"
#include "core/fsdp/flat_param.hpp"
#include "core/fsdp/strategy.hpp"
#include "core/model/model.hpp"
#include "core/optim/optimizer.hpp"

namespace shardlab {

class Recorder;

// What one optimizer step did, as seen from this rank.
struct StepStats {
  float loss = 0;       // mean loss over this rank's micro-batches
  float grad_norm = 0;  // global norm before clipping (0 when clipping is off)
  int64_t tokens = 0;   // tokens this rank processed
  // Sent per rank: bytes this rank sent into the engine's collectives during the step
  // (Communicator::traffic, core/comm/traffic.hpp), by op and by group; comm_total() is the step's.
  int64_t comm_all_gather = 0, comm_reduce_scatter = 0, comm_all_reduce = 0;
  int64_t comm_intra = 0;  // within the shard group
  int64_t comm_inter = 0;  // across replica groups (no_shard's all-reduce, hybrid's all-reduce)
  int64_t comm_total() const { return comm_intra + comm_inter; }
  // Buffer: the full sizes of the same collectives (collective_bytes, nccl-tests' convention).
  int64_t comm_buffer = 0;
  // Bytes copied between device and host memory during the step (--offload; 0 without).
  int64_t copy_h2d = 0, copy_d2h = 0;
};

// A rank's part of one unit, for checkpoints and tests: the owned range of the padded flat buffer
// and fp32 host copies of the states there (padding included, zeros), by the engine's names:
// kParams (the fp32 master parameters) and the optimizer's states by OptimizerState::name ("m"
// and "v" for AdamW, "momentum" for SGD with momentum). The checkpoint layer names them its own
// way; core/train/train_checkpoint.cpp maps between the two.
struct UnitShard {
  static constexpr const char* kParams = "params";
  ShardRange range;
  std::map<std::string, std::vector<float>> states;
};

class Engine {
 public:
  // Collective over `world` (splits it into the shard and replica groups). Allocates persistent
  // state (params, grads, optimizer state) and initialises parameters from cfg.seed by the
  // stages' init rules. A GPTConfig converts to its GPT-2 Model.
  Engine(Device& dev, Communicator& world, Recorder* recorder, const Model& model,
         const EngineConfig& cfg);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // One optimizer step over K = tokens.size() micro-batches of (B, T) int32 device arrays.
  StepStats step(const std::vector<const int*>& tokens, const std::vector<const int*>& targets,
                 int B, int T);

  // The pieces of step(), for tests and custom loops. forward_backward accumulates gradients of
  // micro-batch `micro` of `K` (loss scaled by 1/(N K)) and returns its mean loss.
  float forward_backward(const int* tokens, const int* targets, int B, int T, int micro, int K);
  // Global gradient norm over all shards (and over replica groups once); scales gradients when it
  // exceeds max_norm > 0. Call after the last forward_backward of a step.
  float clip_grad_norm(float max_norm);
  void optimizer_step();
  // The learning rate of the next optimizer steps (the trainer's schedule sets it every step).
  void set_lr(float lr);

  // Mean of a value over the world (loss reporting); not counted in StepStats' traffic.
  float world_mean(float v);

  const Model& model() const;
  const EngineConfig& config() const;
  int num_units() const;
  int rank() const;
  int world() const;
  int shard_group() const;  // G (1 for no_shard)
  int shard_rank() const;   // this rank's index in its shard group
  const FlatLayout& layout(int unit) const;
  int64_t num_params() const;
  int steps_done() const;

  // Full fp32 parameters of a unit (unpadded, layout(unit) order), on every rank. Collective.
  std::vector<float> gather_unit_params(int unit);
  // The reduced fp32 gradient of a unit (unpadded), on every rank: valid after the last
  // forward_backward of a step and before optimizer_step. Collective.
  std::vector<float> gather_unit_grads(int unit);
  // This rank's shard of a unit (see UnitShard) and its inverse. set_shard is collective for
  // shard_optim and shard_grad_op (the updated range is all-gathered into the full parameters).
  UnitShard get_shard(int unit) const;
  void set_shard(int unit, const UnitShard& s);
  // Optimizer steps taken (AdamW's t); setting it restores a checkpoint's bias correction.
  void set_steps_done(int t);

  // Bytes by category of persistent state (params, grads, optimizer_state) this engine allocated
  // in device memory, and in host memory (--offload; all 0 without).
  MemArray persistent_bytes() const;
  MemArray host_persistent_bytes() const;
  // The host tier's tracker (--offload), null without: its peak is the run's host peak.
  const MemoryTracker* host_tracker() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardlab
