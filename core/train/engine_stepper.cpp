// EngineStepper: the trainer's step on one rank through the FSDP engine.
#include "core/train/engine_stepper.hpp"

#include "core/base/error.hpp"

namespace shardlab {

EngineStepper::EngineStepper(RankContext& ctx, const Model& model, const EngineConfig& cfg,
                             int accum)
    : ctx_(ctx), engine_(*ctx.device, *ctx.comm, ctx.recorder, model, cfg), accum_(accum) {
  SL_CHECK(accum >= 1, "--accum ", accum, " must be >= 1");
}

float EngineStepper::step(const int32_t* inputs, const int32_t* targets, int rows, int T,
                          float lr) {
  SL_CHECK(rows % accum_ == 0, "rank ", ctx_.rank, ": ", rows, " rows do not split into --accum ",
           accum_, " micro-batches");
  const int64_t bytes = static_cast<int64_t>(rows) * T * 4;
  if (tokens_.bytes() != bytes) {
    // Token ids live in device memory: the model reads them there (and on a GPU must).
    tokens_.reset();
    targets_.reset();
    tokens_ = ctx_.device->alloc(bytes, MemCategory::activations);
    targets_ = ctx_.device->alloc(bytes, MemCategory::activations);
  }
  ctx_.device->copy_from_host(tokens_.data(), inputs, bytes);
  ctx_.device->copy_from_host(targets_.data(), targets, bytes);
  const int micro = rows / accum_;
  std::vector<const int*> tok, tgt;
  for (int k = 0; k < accum_; ++k) {
    tok.push_back(tokens_.as<int>() + static_cast<int64_t>(k) * micro * T);
    tgt.push_back(targets_.as<int>() + static_cast<int64_t>(k) * micro * T);
  }
  engine_.set_lr(lr);
  last_ = engine_.step(tok, tgt, micro, T);
  return engine_.world_mean(last_.loss);
}

}  // namespace shardlab
