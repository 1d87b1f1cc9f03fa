// BlockActivations and HeadActivations: one tracked allocation each, carved into views.
#include "core/base/error.hpp"
#include "core/model/layers.hpp"

namespace shardlab {

namespace {
// Hands out consecutive float views from one buffer.
struct Carver {
  float* p;
  float* take(int64_t n) {
    float* r = p;
    p += n;
    return r;
  }
};
}  // namespace

// ---- BlockActivations --------------------------------------------------------------------------

namespace {
// Floats of the attention kernel's own saved tensor: naive's probabilities (B, NH, T, T), or
// flash's logsumexp (B, NH, T).
int64_t attention_saved_floats(const GPTConfig& cfg, const KernelChoice& k, int B, int T) {
  const int64_t rows = static_cast<int64_t>(B) * cfg.n_head * T;
  return k.attention == AttentionKernel::flash ? rows : rows * T;
}
}  // namespace

int64_t block_attn_saved_bytes(const GPTConfig& cfg, const KernelChoice& k, int B, int T) {
  const int64_t N = static_cast<int64_t>(B) * T, C = cfg.n_embd;
  return 4 * (N * (6 * C + 2) + attention_saved_floats(cfg, k, B, T));
}

int64_t block_mlp_saved_bytes(const GPTConfig& cfg, int B, int T) {
  const int64_t N = static_cast<int64_t>(B) * T, C = cfg.n_embd;
  return 4 * N * (9 * C + 2);
}

BlockActivations::BlockActivations(Device& dev, const GPTConfig& cfg, int B, int T,
                                   const KernelChoice& k)
    : dev_(&dev), cfg_(cfg), kernels_(k), B_(B), T_(T) {
  SL_CHECK(B > 0 && T > 0, "BlockActivations: B ", B, " and T ", T, " must be positive");
  allocate();
}

int64_t BlockActivations::bytes_for(const GPTConfig& cfg, int B, int T, const KernelChoice& k) {
  return block_attn_saved_bytes(cfg, k, B, T) + block_mlp_saved_bytes(cfg, B, T);
}

void BlockActivations::allocate() {
  SL_CHECK(dev_ != nullptr, "BlockActivations::allocate on a default-constructed object");
  if (allocated()) return;
  buf_ = dev_->alloc(bytes_for(cfg_, B_, T_, kernels_), MemCategory::activations);
  set_views();
}

void BlockActivations::release() {
  buf_.reset();
  set_views();
}

void BlockActivations::set_views() {
  if (buf_.empty()) {
    ln1 = ln1_mean = ln1_rstd = qkv = att = lse = atty = res2 = nullptr;
    ln2 = ln2_mean = ln2_rstd = fch = fch_gelu = nullptr;
    return;
  }
  const int64_t N = static_cast<int64_t>(B_) * T_, C = cfg_.n_embd;
  Carver c{buf_.f32()};
  ln1 = c.take(N * C);
  ln1_mean = c.take(N);
  ln1_rstd = c.take(N);
  qkv = c.take(N * 3 * C);
  float* kernel_saved = c.take(attention_saved_floats(cfg_, kernels_, B_, T_));
  const bool flash = kernels_.attention == AttentionKernel::flash;
  att = flash ? nullptr : kernel_saved;
  lse = flash ? kernel_saved : nullptr;
  atty = c.take(N * C);
  res2 = c.take(N * C);
  ln2 = c.take(N * C);
  ln2_mean = c.take(N);
  ln2_rstd = c.take(N);
  fch = c.take(N * 4 * C);
  fch_gelu = c.take(N * 4 * C);
}

// ---- HeadActivations ---------------------------------------------------------------------------

HeadActivations::HeadActivations(Device& dev, const GPTConfig& cfg, int B, int T)
    : dev_(&dev), cfg_(cfg), B_(B), T_(T) {
  SL_CHECK(B > 0 && T > 0, "HeadActivations: B ", B, " and T ", T, " must be positive");
  allocate();
}

int64_t HeadActivations::bytes_for(const GPTConfig& cfg, int B, int T) {
  const int64_t N = static_cast<int64_t>(B) * T;
  return 4 * (N * (cfg.n_embd + 3) + N * cfg.vocab_size);
}

void HeadActivations::allocate() {
  SL_CHECK(dev_ != nullptr, "HeadActivations::allocate on a default-constructed object");
  if (allocated()) return;
  buf_ = dev_->alloc(bytes_for(cfg_, B_, T_), MemCategory::activations);
  set_views();
}

void HeadActivations::release() {
  buf_.reset();
  set_views();
}

void HeadActivations::set_views() {
  if (buf_.empty()) {
    lnf = lnf_mean = lnf_rstd = probs = losses = nullptr;
    return;
  }
  const int64_t N = static_cast<int64_t>(B_) * T_;
  Carver c{buf_.f32()};
  lnf = c.take(N * cfg_.n_embd);
  lnf_mean = c.take(N);
  lnf_rstd = c.take(N);
  probs = c.take(N * cfg_.vocab_size);
  losses = c.take(N);
}

}  // namespace shardlab
