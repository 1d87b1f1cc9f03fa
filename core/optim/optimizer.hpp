// Optimizers over flat fp32 buffers on a Device: AdamW and SGD with momentum.
// One optimizer instance serves one flat buffer of n elements (for FSDP: one unit's local shard).
// Its state (Adam m and v, or the momentum buffer) is allocated through Device::alloc as
// MemCategory::optimizer_state when the optimizer is made, so the tracker shows it from step 0.
// The arithmetic is core/kernels/optim.hpp, shared by the CPU loop and the CUDA kernel.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device/device.hpp"

namespace shardlab {

enum class OptimizerKind : uint8_t { adamw, sgd };
const char* optimizer_kind_name(OptimizerKind k);
// "adamw" or "sgd"; throws InvalidArgument naming the value.
OptimizerKind parse_optimizer_kind(const std::string& s);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adamw;
  float lr = 1e-3f;           // the starting rate; the trainer's schedule calls set_lr each step
  float beta1 = 0.9f;         // AdamW
  float beta2 = 0.95f;        // AdamW (GPT-3 / llm.c value)
  float eps = 1e-8f;          // AdamW
  float weight_decay = 0.0f;  // AdamW: decoupled (p -= lr*wd*p); SGD: added to the gradient
  float momentum = 0.9f;      // SGD; 0 = plain SGD, no state
  // Throws InvalidArgument naming the field (lr < 0, betas outside [0, 1), eps <= 0, ...).
  void validate() const;
};

// A named piece of optimizer state on the device, n floats: what a checkpoint saves and restores.
struct OptimizerState {
  std::string name;  // "m", "v", "momentum"
  float* data;       // device memory
  int64_t numel;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of params (n floats, device memory) from grads; n must be size(). Increments the
  // step counter first: the first call is step 1.
  virtual void step(float* params, const float* grads, int64_t n) = 0;
  // The step with the engine's divergence checks around it: `grads` checked finite first (unless
  // `check_grads` is false), scaled by `grad_scale` (clipping; 1 leaves them), the update, then
  // `params` checked finite. Returns what was found NaN or Inf; on any flag the state is not
  // defined and the run must end. The grads may be left scaled. The parameters come out
  // bit-identical to those checks and step() run apart, which is what this default does; AdamW
  // runs it as one pass over p, g, m and v where its device has the fused kernel (the CPU).
  struct Checked {
    bool grads_nonfinite = false;
    bool params_nonfinite = false;
  };
  virtual Checked step_checked(float* params, float* grads, int64_t n, float grad_scale,
                               bool check_grads);
  // Device buffers of the state, in a fixed order; empty for plain SGD.
  virtual std::vector<OptimizerState> state() const = 0;

  const OptimizerConfig& config() const { return cfg_; }
  OptimizerKind kind() const { return cfg_.kind; }
  int64_t size() const { return n_; }
  float lr() const { return cfg_.lr; }
  void set_lr(float lr);
  // Updates taken so far (AdamW's t after the last step). A checkpoint restores it with the state.
  int64_t step_count() const { return steps_; }
  void set_step_count(int64_t steps);
  // Bytes of state held (tracked as optimizer_state).
  int64_t state_bytes() const;

 protected:
  Optimizer(Device& dev, const OptimizerConfig& cfg, int64_t n);
  // Checks n and advances the counter; returns the new step number t.
  int64_t begin_step(int64_t n);

  Device& dev_;
  OptimizerConfig cfg_;
  int64_t n_;
  int64_t steps_ = 0;
};

// AdamW (Loshchilov & Hutter 2019) with bias correction, as torch.optim.AdamW. State m, v: 8 bytes
// per element.
class AdamW final : public Optimizer {
 public:
  AdamW(Device& dev, const OptimizerConfig& cfg, int64_t n);
  void step(float* params, const float* grads, int64_t n) override;
  Checked step_checked(float* params, float* grads, int64_t n, float grad_scale,
                       bool check_grads) override;
  std::vector<OptimizerState> state() const override;
  float* m() { return m_.f32(); }
  float* v() { return v_.f32(); }

 private:
  Buffer m_;  // (n) first moment
  Buffer v_;  // (n) second moment
};

// SGD with momentum (dampening 0), as torch.optim.SGD. State: the momentum buffer, 4 bytes per
// element, none when momentum == 0.
class SGD final : public Optimizer {
 public:
  SGD(Device& dev, const OptimizerConfig& cfg, int64_t n);
  void step(float* params, const float* grads, int64_t n) override;
  std::vector<OptimizerState> state() const override;
  float* momentum_buffer() const { return buf_.empty() ? nullptr : buf_.f32(); }

 private:
  Buffer buf_;  // (n) momentum, empty for plain SGD
};

// The optimizer cfg.kind names, for a buffer of n elements.
std::unique_ptr<Optimizer> make_optimizer(Device& dev, const OptimizerConfig& cfg, int64_t n);

}  // namespace shardlab
