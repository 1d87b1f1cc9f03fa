// AdamW and SGD: state allocation, the step counter, and the calls into core/kernels/optim.hpp.
#include "core/optim/optimizer.hpp"

#include <cmath>

#include "core/base/error.hpp"
#include "core/kernels/elementwise.hpp"
#include "core/kernels/optim.hpp"

namespace shardlab {

const char* optimizer_kind_name(OptimizerKind k) {
  return k == OptimizerKind::adamw ? "adamw" : "sgd";
}

OptimizerKind parse_optimizer_kind(const std::string& s) {
  if (s == "adamw" || s == "adam") return OptimizerKind::adamw;
  if (s == "sgd") return OptimizerKind::sgd;
  SL_THROW(InvalidArgument, "unknown optimizer '", s, "' (known: adamw, sgd)");
}

void OptimizerConfig::validate() const {
  // User-facing (the command line's --lr etc. land here): plain messages naming field and value.
  if (!(std::isfinite(lr) && lr >= 0.0f))
    SL_THROW(InvalidArgument, "optimizer: lr ", lr, " must be >= 0");
  if (!(beta1 >= 0.0f && beta1 < 1.0f))
    SL_THROW(InvalidArgument, "optimizer: beta1 ", beta1, " must be in [0, 1)");
  if (!(beta2 >= 0.0f && beta2 < 1.0f))
    SL_THROW(InvalidArgument, "optimizer: beta2 ", beta2, " must be in [0, 1)");
  // eps = inf passed "> 0" and silently froze every AdamW update (m / (sqrt(v) + inf) = 0).
  if (!(std::isfinite(eps) && eps > 0.0f))
    SL_THROW(InvalidArgument, "optimizer: eps ", eps, " must be finite and > 0");
  if (!(std::isfinite(weight_decay) && weight_decay >= 0.0f))
    SL_THROW(InvalidArgument, "optimizer: weight_decay ", weight_decay, " must be >= 0");
  if (!(momentum >= 0.0f && momentum < 1.0f))
    SL_THROW(InvalidArgument, "optimizer: momentum ", momentum, " must be in [0, 1)");
}

Optimizer::Optimizer(Device& dev, const OptimizerConfig& cfg, int64_t n)
    : dev_(dev), cfg_(cfg), n_(n) {
  cfg_.validate();
  SL_CHECK(n >= 0, "optimizer: buffer of ", n, " elements");
}

void Optimizer::set_lr(float lr) {
  SL_CHECK(std::isfinite(lr) && lr >= 0.0f, "optimizer: lr ", lr, " must be >= 0");
  cfg_.lr = lr;
}

void Optimizer::set_step_count(int64_t steps) {
  SL_CHECK(steps >= 0, "optimizer: step count ", steps);
  steps_ = steps;
}

int64_t Optimizer::state_bytes() const {
  int64_t bytes = 0;
  for (const OptimizerState& s : state()) bytes += s.numel * 4;
  return bytes;
}

int64_t Optimizer::begin_step(int64_t n) {
  SL_CHECK(n == n_, "optimizer: step on ", n, " elements, but the optimizer was made for ", n_);
  return ++steps_;
}

Optimizer::Checked Optimizer::step_checked(float* params, float* grads, int64_t n, float grad_scale,
                                           bool check_grads) {
  Checked c;
  if (check_grads && !all_finite(dev_, grads, DType::f32, n)) {
    c.grads_nonfinite = true;
    return c;
  }
  if (grad_scale != 1.0f) scale_array(dev_, grads, grad_scale, n);
  step(params, grads, n);
  c.params_nonfinite = !all_finite(dev_, params, DType::f32, n);
  return c;
}

// ---- AdamW --------------------------------------------------------------------------------------

AdamW::AdamW(Device& dev, const OptimizerConfig& cfg, int64_t n) : Optimizer(dev, cfg, n) {
  m_ = dev.alloc_zeros(n * 4, MemCategory::optimizer_state);
  v_ = dev.alloc_zeros(n * 4, MemCategory::optimizer_state);
}

void AdamW::step(float* params, const float* grads, int64_t n) {
  const int64_t t = begin_step(n);
  SL_CHECK(t <= INT32_MAX, "AdamW: step ", t, " beyond the kernel's int range");
  adamw_update(dev_, params, grads, m_.f32(), v_.f32(), n, cfg_.lr, cfg_.beta1, cfg_.beta2,
               cfg_.eps, cfg_.weight_decay, static_cast<int>(t));
}

Optimizer::Checked AdamW::step_checked(float* params, float* grads, int64_t n, float grad_scale,
                                       bool check_grads) {
  const int64_t t = steps_ + 1;
  SL_CHECK(t <= INT32_MAX, "AdamW: step ", t, " beyond the kernel's int range");
  NonFinite found;
  if (n != n_ ||
      !adamw_checked(dev_, params, grads, m_.f32(), v_.f32(), n, grad_scale, cfg_.lr, cfg_.beta1,
                     cfg_.beta2, cfg_.eps, cfg_.weight_decay, static_cast<int>(t), &found))
    return Optimizer::step_checked(params, grads, n, grad_scale, check_grads);
  begin_step(n);
  Checked c;
  c.grads_nonfinite = check_grads && found.grad;
  c.params_nonfinite = found.param;
  return c;
}

std::vector<OptimizerState> AdamW::state() const {
  return {{"m", m_.f32(), n_}, {"v", v_.f32(), n_}};
}

// ---- SGD ----------------------------------------------------------------------------------------

SGD::SGD(Device& dev, const OptimizerConfig& cfg, int64_t n) : Optimizer(dev, cfg, n) {
  if (cfg.momentum > 0.0f) buf_ = dev.alloc_zeros(n * 4, MemCategory::optimizer_state);
}

void SGD::step(float* params, const float* grads, int64_t n) {
  begin_step(n);
  sgd_update(dev_, params, grads, momentum_buffer(), n, cfg_.lr, cfg_.momentum, cfg_.weight_decay);
}

std::vector<OptimizerState> SGD::state() const {
  if (buf_.empty()) return {};
  return {{"momentum", buf_.f32(), n_}};
}

std::unique_ptr<Optimizer> make_optimizer(Device& dev, const OptimizerConfig& cfg, int64_t n) {
  if (cfg.kind == OptimizerKind::adamw) return std::make_unique<AdamW>(dev, cfg, n);
  return std::make_unique<SGD>(dev, cfg, n);
}

}  // namespace shardlab
