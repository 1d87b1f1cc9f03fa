// The FSDP engine as the trainer's ModelStepper: one per rank. It copies the rank's rows to the
// device, splits them into K micro-batches, sets the learning rate and runs one engine step;
// step() returns the loss averaged over all ranks.
#pragma once

#include <memory>

#include "core/comm/launcher.hpp"
#include "core/fsdp/engine.hpp"
#include "core/train/trainer.hpp"

namespace shardlab {

class EngineStepper final : public ModelStepper {
 public:
  EngineStepper(RankContext& ctx, const GPTConfig& model, const EngineConfig& cfg, int accum);

  float step(const int32_t* inputs, const int32_t* targets, int rows, int T, float lr) override;
  int64_t num_params() const override { return engine_.num_params(); }

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

// The EngineConfig a TrainConfig describes.
EngineConfig engine_config(const TrainConfig& cfg);

}  // namespace shardlab
