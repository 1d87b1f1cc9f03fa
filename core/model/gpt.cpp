// GPT: the single-rank reference model, running the unit functions in order.
#include "core/model/gpt.hpp"

#include "core/base/error.hpp"

namespace shardlab {

GPT::GPT(Device& dev, GPTConfig cfg, uint64_t seed) : dev_(dev), cfg_(cfg) {
  cfg_.validate();
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

float* GPT::grad(const std::string& name) {
  ParamRef r = find_param(cfg_, name);
  return unit_grads(r.unit) + r.entry.offset;
}

void GPT::ensure_activations(int B, int T) {
  SL_CHECK(B >= 1, "GPT::forward: B ", B, " must be positive");
  SL_CHECK(T >= 1 && T <= cfg_.max_seq_len, "GPT::forward: T ", T, " outside [1, max_seq_len ",
           cfg_.max_seq_len, "]");
  if (B == B_ && T == T_) return;
  // Free the old set first so the peak never holds both.
  block_acts_.clear();
  head_acts_ = HeadActivations();
  residuals_.reset();
  const int64_t nc = static_cast<int64_t>(B) * T * cfg_.n_embd;
  residuals_ = dev_.alloc((cfg_.n_layer + 1) * nc * 4, MemCategory::activations);
  for (int l = 0; l < cfg_.n_layer; ++l) block_acts_.emplace_back(dev_, cfg_, B, T);
  head_acts_ = HeadActivations(dev_, cfg_, B, T);
  B_ = B;
  T_ = T;
}

float GPT::forward(const int* tokens, const int* targets, int B, int T) {
  ensure_activations(B, T);
  const int64_t nc = static_cast<int64_t>(B) * T * cfg_.n_embd;
  float* res = residuals_.f32();  // residual l is the input of block l
  embedding_forward(dev_, cfg_, res, tokens, unit_params(kRootUnit), B, T);
  for (int l = 0; l < cfg_.n_layer; ++l)
    block_forward(dev_, cfg_, res + (l + 1) * nc, block_acts_[static_cast<size_t>(l)],
                  res + l * nc, unit_params(block_unit(l)), B, T);
  float loss = head_forward(dev_, cfg_, head_acts_, res + cfg_.n_layer * nc, targets,
                            unit_params(kRootUnit), B, T);
  tokens_ = tokens;
  targets_ = targets;
  return loss;
}

void GPT::backward(float loss_scale) {
  SL_CHECK(tokens_ != nullptr && targets_ != nullptr,
           "GPT::backward: needs a forward with targets first");
  const int B = B_, T = T_;
  const int64_t nc = static_cast<int64_t>(B) * T * cfg_.n_embd;
  const float* res = residuals_.f32();
  // One residual-gradient buffer, updated in place through the stack (block_backward allows it).
  Buffer dres_buf = dev_.alloc(nc * 4, MemCategory::workspace);
  float* dres = dres_buf.f32();
  head_backward(dev_, cfg_, dres, unit_grads(kRootUnit), head_acts_, res + cfg_.n_layer * nc,
                targets_, unit_params(kRootUnit), B, T, loss_scale);
  for (int l = cfg_.n_layer - 1; l >= 0; --l)
    block_backward(dev_, cfg_, dres, unit_grads(block_unit(l)), dres,
                   block_acts_[static_cast<size_t>(l)], res + l * nc, unit_params(block_unit(l)),
                   B, T);
  embedding_backward(dev_, cfg_, unit_grads(kRootUnit), tokens_, dres, B, T);
}

void GPT::zero_grad() {
  for (Buffer& g : grads_) dev_.fill_zero(g.data(), g.bytes());
}

int64_t GPT::activation_bytes() const {
  int64_t total = residuals_.bytes() + head_acts_.bytes();
  for (const BlockActivations& a : block_acts_) total += a.bytes();
  return total;
}

}  // namespace shardlab
