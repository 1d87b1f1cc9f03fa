// GPT-2's stages: their parameters (names and layouts of Hugging Face's GPT2LMHeadModel), the pass
// that carries the residual stream, and each stage's forward and backward over layers.hpp.
#include "core/model/gpt2.hpp"

#include <cmath>

#include "core/base/error.hpp"
#include "core/model/params.hpp"

namespace shardlab {

// ---- parameters ---------------------------------------------------------------------------------

namespace {

constexpr float kStd = 0.02f;

// GPT-2's initialisation: weights N(0, 0.02), the residual projections (attn.c_proj, mlp.c_proj)
// N(0, 0.02 / sqrt(2L)), as each block adds two of them to the stream; biases 0, LayerNorm
// weights 1. Names are Hugging Face's without "transformer."; Conv1D keeps (in, out) as we do.
StageParam param(std::string name, std::vector<int64_t> shape, ParamInit init) {
  std::string hf = "transformer." + name;
  return {std::move(name), std::move(shape), init, std::move(hf), HfLayout::same};
}
ParamInit normal(float std) { return {InitKind::normal, std}; }
const ParamInit kZeros{InitKind::zeros, 0.0f};
const ParamInit kOnes{InitKind::ones, 0.0f};

float residual_std(const GPTConfig& cfg) { return kStd / std::sqrt(2.0f * cfg.n_layer); }

std::string layer_prefix(int layer) { return "h." + std::to_string(layer) + "."; }

}  // namespace

std::vector<StageParam> gpt2_embedding_params(const GPTConfig& cfg) {
  return {param("wte.weight", {cfg.vocab_size, cfg.n_embd}, normal(kStd)),
          param("wpe.weight", {cfg.max_seq_len, cfg.n_embd}, normal(kStd))};
}

namespace {
// A block half: its LayerNorm, then a linear (C, width) and a projection (width_in, C) back to the
// residual stream, whose weights start at the residual std.
std::vector<StageParam> half_params(const GPTConfig& cfg, int layer, const char* ln, const char* fc,
                                    int64_t width, const char* proj, int64_t proj_in) {
  const int64_t C = cfg.n_embd;
  const std::string h = layer_prefix(layer);
  return {param(h + ln + ".weight", {C}, kOnes),
          param(h + ln + ".bias", {C}, kZeros),
          param(h + fc + ".weight", {C, width}, normal(kStd)),
          param(h + fc + ".bias", {width}, kZeros),
          param(h + proj + ".weight", {proj_in, C}, normal(residual_std(cfg))),
          param(h + proj + ".bias", {C}, kZeros)};
}
}  // namespace

std::vector<StageParam> gpt2_attn_params(const GPTConfig& cfg, int layer) {
  const int64_t C = cfg.n_embd;
  return half_params(cfg, layer, "ln_1", "attn.c_attn", 3 * C, "attn.c_proj", C);
}

std::vector<StageParam> gpt2_mlp_params(const GPTConfig& cfg, int layer) {
  const int64_t C = cfg.n_embd;
  return half_params(cfg, layer, "ln_2", "mlp.c_fc", 4 * C, "mlp.c_proj", 4 * C);
}

std::vector<StageParam> gpt2_head_params(const GPTConfig& cfg) {
  return {param("ln_f.weight", {cfg.n_embd}, kOnes), param("ln_f.bias", {cfg.n_embd}, kZeros)};
}

// ---- the pass -----------------------------------------------------------------------------------

Gpt2Pass::Gpt2Pass(Device& d, const GPTConfig& c, const KernelChoice& k, const MicroBatch& b)
    : Pass(d, b), cfg(c), kernels(k) {
  SL_CHECK(b.B >= 1 && b.T >= 1 && b.T <= c.max_seq_len, "gpt2: batch (B ", b.B, ", T ", b.T,
           ") must have B >= 1 and 1 <= T <= max_seq_len ", c.max_seq_len);
  btc_ = static_cast<int64_t>(b.B) * b.T * c.n_embd;
  residuals_ = d.alloc((c.n_layer + 1) * btc_ * 4, MemCategory::activations);
  blocks_.resize(static_cast<size_t>(c.n_layer));
}

void Gpt2Pass::begin_backward() {
  if (dres_.empty()) dres_ = dev.alloc(btc_ * 4, MemCategory::workspace);
}

BlockActivations& Gpt2Pass::hold_block(int l) {
  BlockActivations& a = blocks_[static_cast<size_t>(l)];
  if (a.B() == 0)
    a = BlockActivations(dev, cfg, batch.B, batch.T, kernels);
  else
    a.allocate();  // after a release (activation checkpointing); kept by a reused pass
  return a;
}

HeadActivations& Gpt2Pass::hold_head() {
  if (head_.B() == 0)
    head_ = HeadActivations(dev, cfg, batch.B, batch.T);
  else
    head_.allocate();
  return head_;
}

int64_t Gpt2Pass::saved_bytes() const {
  int64_t total = residuals_.bytes() + head_.bytes();
  for (const BlockActivations& a : blocks_) total += a.bytes();
  return total;
}

namespace {
Gpt2Pass& gpt2_pass(Pass& p) { return static_cast<Gpt2Pass&>(p); }
}  // namespace

// ---- stages -------------------------------------------------------------------------------------

Gpt2Embedding::Gpt2Embedding(const GPTConfig& cfg, bool wte_tied)
    : Stage("embedding", "embedding", gpt2_embedding_params(cfg)), cfg_(cfg), wte_tied_(wte_tied) {}

void Gpt2Embedding::forward(Pass& pass, const StageArgs& a) const {
  Gpt2Pass& p = gpt2_pass(pass);
  embedding_forward(p.dev, cfg_, p.x(0), p.batch.tokens, a.own.w, p.batch.B, p.batch.T);
}

void Gpt2Embedding::backward(Pass& pass, const StageArgs& a) const {
  Gpt2Pass& p = gpt2_pass(pass);
  // embedding_backward adds into wte's gradient: tied, the head wrote it; untied, start it here.
  if (!wte_tied_ && a.own.write == GradWrite::overwrite)
    p.dev.fill_zero(a.own.g, static_cast<int64_t>(cfg_.vocab_size) * cfg_.n_embd * 4);
  embedding_backward(p.dev, cfg_, a.own.g, p.batch.tokens, p.dx(), p.batch.B, p.batch.T,
                     a.own.write);
}

Gpt2BlockHalf::Gpt2BlockHalf(const GPTConfig& cfg, const KernelChoice& kernels, int layer,
                             Half half)
    : Stage("block " + std::to_string(layer) + (half == Half::attn ? " attn" : " mlp"),
            half == Half::attn ? "attn" : "mlp",
            half == Half::attn ? gpt2_attn_params(cfg, layer) : gpt2_mlp_params(cfg, layer)),
      cfg_(cfg),
      kernels_(kernels),
      layer_(layer),
      half_(half) {}

int64_t Gpt2BlockHalf::saved_bytes(int B, int T) const {
  return half_ == Half::attn ? block_attn_saved_bytes(cfg_, kernels_, B, T)
                             : block_mlp_saved_bytes(cfg_, B, T);
}

void Gpt2BlockHalf::forward(Pass& pass, const StageArgs& a) const {
  Gpt2Pass& p = gpt2_pass(pass);
  const int B = p.batch.B, T = p.batch.T;
  if (half_ == Half::attn)
    block_attn_forward(p.dev, cfg_, p.hold_block(layer_), p.x(layer_), a.own.w, B, T);
  else
    block_mlp_forward(p.dev, cfg_, p.x(layer_ + 1), p.block(layer_), a.own.w, B, T);
}

void Gpt2BlockHalf::recompute(Pass& pass, const StageArgs& a) const {
  if (half_ == Half::attn) return forward(pass, a);
  Gpt2Pass& p = gpt2_pass(pass);
  // The next block's input is already in the stream: the output goes to scratch.
  Buffer y = p.dev.alloc(static_cast<int64_t>(p.batch.B) * p.batch.T * cfg_.n_embd * 4,
                         MemCategory::workspace);  // (B, T, C), discarded
  block_mlp_forward(p.dev, cfg_, y.f32(), p.block(layer_), a.own.w, p.batch.B, p.batch.T);
}

void Gpt2BlockHalf::backward(Pass& pass, const StageArgs& a) const {
  Gpt2Pass& p = gpt2_pass(pass);
  const int B = p.batch.B, T = p.batch.T;
  if (half_ == Half::attn)
    block_attn_backward(p.dev, cfg_, p.dx(), a.own.g, p.block(layer_), p.x(layer_), a.own.w, B, T,
                        a.own.write);
  else
    block_mlp_backward(p.dev, cfg_, p.dx(), a.own.g, p.dx(), p.block(layer_), a.own.w, B, T,
                       a.own.write);
}

void Gpt2BlockHalf::release(Pass& pass) const {
  if (half_ == Half::attn) gpt2_pass(pass).block(layer_).release();
}

Gpt2Head::Gpt2Head(const GPTConfig& cfg)
    : Stage("head", "head", gpt2_head_params(cfg), {"wte.weight"}), cfg_(cfg) {}

int64_t Gpt2Head::saved_bytes(int B, int T) const { return HeadActivations::bytes_for(cfg_, B, T); }

void Gpt2Head::forward(Pass& pass, const StageArgs& a) const {
  Gpt2Pass& p = gpt2_pass(pass);
  p.loss = head_forward(p.dev, cfg_, p.hold_head(), p.x(cfg_.n_layer), p.batch.targets,
                        HeadWeights{a.own.w, a.tied[0].w}, p.batch.B, p.batch.T);
}

void Gpt2Head::backward(Pass& pass, const StageArgs& a) const {
  Gpt2Pass& p = gpt2_pass(pass);
  const HeadGrads g{a.own.g, a.tied[0].g, a.own.write, a.tied[0].write};
  head_backward(p.dev, cfg_, p.dx(), g, p.head(), p.x(cfg_.n_layer), p.batch.targets,
                HeadWeights{a.own.w, a.tied[0].w}, p.batch.B, p.batch.T, p.batch.loss_scale);
}

void Gpt2Head::release(Pass& pass) const { gpt2_pass(pass).head().release(); }

// ---- the model ----------------------------------------------------------------------------------

void refuse_llama_shape(const GPTConfig& cfg, const char* where) {
  if (cfg.is_llama())
    SL_THROW(InvalidArgument, where, ": ", cfg.describe(),
             " is a Llama-family shape, which has no GPT-2 stages or units (its layers: "
             "core/model/llama_layers.hpp)");
}

Model gpt2_model(const GPTConfig& cfg, const KernelChoice& kernels) {
  cfg.validate();
  refuse_llama_shape(cfg, "gpt2_model");
  ModelDef d;
  d.family = "gpt2";
  d.stages.push_back(std::make_shared<Gpt2Embedding>(cfg, /*wte_tied=*/true));
  for (int l = 0; l < cfg.n_layer; ++l) {
    d.layers.push_back({"block " + std::to_string(l), {1 + 2 * l, 2 + 2 * l}});
    d.stages.push_back(std::make_shared<Gpt2BlockHalf>(cfg, kernels, l, Gpt2BlockHalf::Half::attn));
    d.stages.push_back(std::make_shared<Gpt2BlockHalf>(cfg, kernels, l, Gpt2BlockHalf::Half::mlp));
  }
  d.stages.push_back(std::make_shared<Gpt2Head>(cfg));
  d.layer_item = "block";
  d.root_label = "embeddings and ln_f";
  d.max_seq_len = cfg.max_seq_len;
  d.vocab_size = cfg.vocab_size;
  d.config = gpt_config_json(cfg);
  d.describe = cfg.describe();
  d.begin = [cfg, kernels](Device& dev, const MicroBatch& b) {
    return std::make_unique<Gpt2Pass>(dev, cfg, kernels, b);
  };
  return Model(std::move(d));
}

}  // namespace shardlab
