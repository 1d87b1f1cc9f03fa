// GPT: the single-rank reference model. It owns one flat parameter buffer and one flat gradient
// buffer per unit (MemCategory::params / grads; units as params.hpp lays them out) and walks
// GPT-2's stages (gpt2.hpp) forward, then in reverse. The single-rank trainer and every
// sharded-vs-single-rank test compare against it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/device/device.hpp"
#include "core/model/config.hpp"
#include "core/model/layers.hpp"
#include "core/model/model.hpp"
#include "core/model/params.hpp"

namespace shardlab {

class GPT {
 public:
  // Validates cfg, allocates params (initialised by init_unit with `seed`) and zeroed grads.
  GPT(Device& dev, GPTConfig cfg, uint64_t seed);
  GPT(const GPT&) = delete;
  GPT& operator=(const GPT&) = delete;

  const GPTConfig& config() const { return cfg_; }
  Device& device() const { return dev_; }
  int num_units() const { return static_cast<int>(params_.size()); }
  const UnitLayout& layout(int unit) const;
  int64_t num_params() const { return cfg_.num_params(); }

  // Flat device buffers of a unit, layout(unit).numel floats each.
  float* unit_params(int unit);
  const float* unit_params(int unit) const;
  float* unit_grads(int unit);
  const float* unit_grads(int unit) const;
  // The device pointer of a named parameter inside its unit's buffer.
  float* param(const std::string& name);

  // tokens and targets: (B, T) int32 device memory, T <= max_seq_len. Returns the mean
  // cross-entropy; targets == nullptr runs inference only (returns 0, probs() is valid).
  // Activations are (re)allocated when B or T change and kept until the next forward.
  float forward(const int* tokens, const int* targets, int B, int T);
  // Accumulates (+=) the gradient of loss_scale * (mean loss of the last forward) into the grads.
  // Needs a forward with targets since the last call. loss_scale = 1/K for K micro-batches.
  void backward(float loss_scale = 1.0f);
  void zero_grad();

  // Softmax probabilities of the last forward, (B, T, V) device memory.
  const float* probs() const;
  // Bytes currently held for activations (residual stream + blocks + head).
  int64_t activation_bytes() const;

 private:
  // What stage s computes with: its range of its unit's buffers, and the ranges it is tied to.
  StageArgs args(int s);

  Device& dev_;
  GPTConfig cfg_;
  Model model_;
  std::vector<UnitLayout> layouts_;
  std::vector<Buffer> params_;  // per unit, MemCategory::params
  std::vector<Buffer> grads_;   // per unit, MemCategory::grads
  struct Place {
    int unit;
    int64_t offset;
  };
  std::vector<Place> place_;  // per stage: unit 0 holds the root's stages, unit 1 + l layer l's

  // The residual stream and what the stages saved, kept from one forward to the next of the same
  // (B, T): the last forward's, for backward.
  std::unique_ptr<Pass> pass_;
  bool has_targets_ = false;  // the last forward had targets
};

}  // namespace shardlab
