// The single-rank model step: one GPT and one optimizer per unit buffer on one device. The FSDP
// engine replaces exactly this piece with its sharded step.
#include <memory>
#include <vector>

#include "core/model/gpt.hpp"
#include "core/train/trainer.hpp"

namespace shardlab {

namespace {

class SingleRankStepper final : public ModelStepper {
 public:
  SingleRankStepper(Device& dev, const GPTConfig& m, const OptimizerConfig& optim, uint64_t seed)
      : dev_(dev), model_(dev, m, seed) {
    for (int u = 0; u < model_.num_units(); ++u)
      optims_.push_back(make_optimizer(dev, optim, model_.layout(u).numel));
  }

  float step(const int32_t* inputs, const int32_t* targets, int rows, int T, float lr) override {
    const int64_t bytes = static_cast<int64_t>(rows) * T * 4;
    if (tokens_.bytes() != bytes) {
      // Token ids go to device memory: the model reads them there (and on a GPU must).
      tokens_.reset();
      targets_.reset();
      tokens_ = dev_.alloc(bytes, MemCategory::activations);
      targets_ = dev_.alloc(bytes, MemCategory::activations);
    }
    dev_.copy_from_host(tokens_.data(), inputs, bytes);
    dev_.copy_from_host(targets_.data(), targets, bytes);
    model_.zero_grad();
    const float loss = model_.forward(tokens_.as<int>(), targets_.as<int>(), rows, T);
    model_.backward();
    for (int u = 0; u < model_.num_units(); ++u) {
      optims_[u]->set_lr(lr);
      optims_[u]->step(model_.unit_params(u), model_.unit_grads(u), model_.layout(u).numel);
    }
    return loss;
  }

  int64_t num_params() const override { return model_.num_params(); }

 private:
  Device& dev_;
  GPT model_;
  std::vector<std::unique_ptr<Optimizer>> optims_;
  Buffer tokens_;   // (rows, T) int32
  Buffer targets_;  // (rows, T) int32
};

}  // namespace

std::unique_ptr<ModelStepper> make_single_rank_stepper(Device& dev, const GPTConfig& model,
                                                       const OptimizerConfig& optim,
                                                       uint64_t seed) {
  return std::make_unique<SingleRankStepper>(dev, model, optim, seed);
}

}  // namespace shardlab
