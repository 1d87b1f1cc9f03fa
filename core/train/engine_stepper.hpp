// The trainer's model step on one rank: the FSDP engine, one per rank (with one rank, every
// strategy is the single-rank GPT's computation). It copies the rank's rows to the device, splits
// them into K micro-batches, sets the learning rate and runs one engine step; step() returns the
// loss averaged over all ranks.
#pragma once

#include "core/comm/launcher.hpp"
#include "core/fsdp/engine.hpp"

namespace shardlab {

class EngineStepper {
 public:
  EngineStepper(RankContext& ctx, const Model& model, const EngineConfig& cfg, int accum);

  // inputs and targets: host memory, (rows, T) int32. Runs forward, backward and one optimizer
  // update at learning rate lr over K = accum micro-batches.
  float step(const int32_t* inputs, const int32_t* targets, int rows, int T, float lr);
  int64_t num_params() const { return engine_.num_params(); }

  Engine& engine() { return engine_; }
  const StepStats& last() const { return last_; }

 private:
  RankContext& ctx_;
  Engine engine_;
  int accum_;
  StepStats last_;
  Buffer tokens_;   // (rows, T) int32, device
  Buffer targets_;  // (rows, T) int32, device
};

}  // namespace shardlab
