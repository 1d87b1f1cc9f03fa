// GPT: the single-rank reference model, walking GPT-2's stages.
#include "core/model/gpt.hpp"

#include "core/base/error.hpp"
#include "core/model/gpt2.hpp"

namespace shardlab {

GPT::GPT(Device& dev, GPTConfig cfg, uint64_t seed)
    : dev_(dev), cfg_(cfg), model_(gpt2_model(cfg)) {
  const int units = shardlab::num_units(cfg_);
  for (int u = 0; u < units; ++u) {
    layouts_.push_back(unit_layout(cfg_, u));
    const int64_t n = layouts_.back().numel;
    std::vector<float> host(static_cast<size_t>(n));
    init_unit(cfg_, u, seed, host.data());
    params_.push_back(dev_.alloc(n * 4, MemCategory::params));
    dev_.copy_from_host(params_.back().data(), host.data(), n * 4);
    grads_.push_back(dev_.alloc_zeros(n * 4, MemCategory::grads));
  }
  // The units' layouts are the stages' parameters in this order (params.cpp).
  place_.resize(static_cast<size_t>(model_.num_stages()));
  int64_t root_at = 0;
  for (int s : model_.root_stages()) {
    place_[static_cast<size_t>(s)] = {kRootUnit, root_at};
    root_at += model_.stage(s).numel();
  }
  for (size_t l = 0; l < model_.layers().size(); ++l) {
    int64_t at = 0;
    for (int s : model_.layers()[l].stages) {
      place_[static_cast<size_t>(s)] = {block_unit(static_cast<int>(l)), at};
      at += model_.stage(s).numel();
    }
  }
}

const UnitLayout& GPT::layout(int unit) const {
  SL_CHECK(unit >= 0 && unit < num_units(), "GPT: unit ", unit, " outside [0, ", num_units(), ")");
  return layouts_[static_cast<size_t>(unit)];
}

float* GPT::unit_params(int unit) {
  layout(unit);  // range check
  return params_[static_cast<size_t>(unit)].f32();
}
const float* GPT::unit_params(int unit) const {
  layout(unit);
  return params_[static_cast<size_t>(unit)].f32();
}
float* GPT::unit_grads(int unit) {
  layout(unit);
  return grads_[static_cast<size_t>(unit)].f32();
}
const float* GPT::unit_grads(int unit) const {
  layout(unit);
  return grads_[static_cast<size_t>(unit)].f32();
}

float* GPT::param(const std::string& name) {
  ParamRef r = find_param(cfg_, name);
  return unit_params(r.unit) + r.entry.offset;
}

StageArgs GPT::args(int s) {
  const Place& p = place_[static_cast<size_t>(s)];
  StageArgs a;
  a.own = {unit_params(p.unit) + p.offset, unit_grads(p.unit) + p.offset, GradWrite::accumulate};
  for (const TieRef& t : model_.ties(s)) {
    const Place& o = place_[static_cast<size_t>(t.owner)];
    a.tied.push_back({unit_params(o.unit) + o.offset + t.offset,
                      unit_grads(o.unit) + o.offset + t.offset, GradWrite::accumulate});
  }
  return a;
}

float GPT::forward(const int* tokens, const int* targets, int B, int T) {
  SL_CHECK(B >= 1, "GPT::forward: B ", B, " must be positive");
  SL_CHECK(T >= 1 && T <= cfg_.max_seq_len, "GPT::forward: T ", T, " outside [1, max_seq_len ",
           cfg_.max_seq_len, "]");
  const MicroBatch batch{tokens, targets, B, T, 1.0f};
  if (pass_ && pass_->batch.B == B && pass_->batch.T == T) {
    pass_->batch = batch;
  } else {
    pass_.reset();  // the old activations go first, so the peak never holds both
    pass_ = model_.begin(dev_, batch);
  }
  for (int s = 0; s < model_.num_stages(); ++s) model_.stage(s).forward(*pass_, args(s));
  has_targets_ = targets != nullptr;
  return pass_->loss;
}

void GPT::backward(float loss_scale) {
  SL_CHECK(pass_ != nullptr && has_targets_, "GPT::backward: needs a forward with targets first");
  pass_->batch.loss_scale = loss_scale;
  pass_->begin_backward();
  for (int s = model_.num_stages() - 1; s >= 0; --s) model_.stage(s).backward(*pass_, args(s));
  pass_->end_backward();
}

void GPT::zero_grad() {
  for (Buffer& g : grads_) dev_.fill_zero(g.data(), g.bytes());
}

const float* GPT::probs() const {
  return pass_ ? static_cast<Gpt2Pass&>(*pass_).head().probs : nullptr;
}

int64_t GPT::activation_bytes() const {
  return pass_ ? static_cast<const Gpt2Pass&>(*pass_).saved_bytes() : 0;
}

}  // namespace shardlab
