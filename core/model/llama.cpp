// The Llama family's stages: their parameters (names and layouts of Hugging Face's
// LlamaForCausalLM), the pass that carries the residual stream and the rotary table, and each
// stage's forward and backward over llama_layers.hpp.
#include "core/model/llama.hpp"

#include <string>

#include "core/base/error.hpp"

namespace shardlab {

// ---- parameters ---------------------------------------------------------------------------------

namespace {

// Hugging Face's LlamaPreTrainedModel._init_weights: every Linear and the embedding
// N(0, initializer_range = 0.02), biases 0, RMSNorm weights 1.
constexpr float kStd = 0.02f;
const ParamInit kNormal{InitKind::normal, kStd};
const ParamInit kZeros{InitKind::zeros, 0.0f};
const ParamInit kOnes{InitKind::ones, 0.0f};

// nn.Linear keeps (out, in) as the layers do: the same layout. The body's tensors sit under
// "model." in a LlamaForCausalLM checkpoint, lm_head beside it.
StageParam param(std::string name, std::vector<int64_t> shape, ParamInit init) {
  std::string hf = name == "lm_head.weight" ? name : "model." + name;
  return {std::move(name), std::move(shape), init, std::move(hf), HfLayout::same};
}

std::string layer_prefix(int layer) { return "layers." + std::to_string(layer) + "."; }

}  // namespace

std::vector<StageParam> llama_embedding_params(const GPTConfig& cfg) {
  return {param("embed_tokens.weight", {cfg.vocab_size, cfg.n_embd}, kNormal)};
}

std::vector<StageParam> llama_attn_params(const GPTConfig& cfg, int layer) {
  const int64_t C = cfg.n_embd, q = llama_q_cols(cfg), kv = llama_kv_cols(cfg);
  const std::string a = layer_prefix(layer) + "self_attn.";
  // The order of llama_attn_views: the norm, q | k | v weights (one (q + 2kv, C) block), their
  // biases, o_proj.
  std::vector<StageParam> ps = {param(layer_prefix(layer) + "input_layernorm.weight", {C}, kOnes),
                                param(a + "q_proj.weight", {q, C}, kNormal),
                                param(a + "k_proj.weight", {kv, C}, kNormal),
                                param(a + "v_proj.weight", {kv, C}, kNormal)};
  if (cfg.qkv_bias) {
    ps.push_back(param(a + "q_proj.bias", {q}, kZeros));
    ps.push_back(param(a + "k_proj.bias", {kv}, kZeros));
    ps.push_back(param(a + "v_proj.bias", {kv}, kZeros));
  }
  ps.push_back(param(a + "o_proj.weight", {C, q}, kNormal));
  if (cfg.o_bias) ps.push_back(param(a + "o_proj.bias", {C}, kZeros));
  return ps;
}

std::vector<StageParam> llama_mlp_params(const GPTConfig& cfg, int layer) {
  const int64_t C = cfg.n_embd, F = cfg.ffn_dim;
  const std::string m = layer_prefix(layer) + "mlp.";
  // The order of llama_mlp_views: the norm, gate | up weights, their biases, down_proj.
  std::vector<StageParam> ps = {
      param(layer_prefix(layer) + "post_attention_layernorm.weight", {C}, kOnes),
      param(m + "gate_proj.weight", {F, C}, kNormal), param(m + "up_proj.weight", {F, C}, kNormal)};
  if (cfg.mlp_bias) {
    ps.push_back(param(m + "gate_proj.bias", {F}, kZeros));
    ps.push_back(param(m + "up_proj.bias", {F}, kZeros));
  }
  ps.push_back(param(m + "down_proj.weight", {C, F}, kNormal));
  if (cfg.mlp_bias) ps.push_back(param(m + "down_proj.bias", {C}, kZeros));
  return ps;
}

std::vector<StageParam> llama_head_params(const GPTConfig& cfg) {
  std::vector<StageParam> ps = {param("norm.weight", {cfg.n_embd}, kOnes)};
  if (!cfg.tie_embeddings)
    ps.push_back(param("lm_head.weight", {cfg.vocab_size, cfg.n_embd}, kNormal));
  return ps;
}

// ---- the pass -----------------------------------------------------------------------------------

LlamaPass::LlamaPass(Device& d, const GPTConfig& c, const KernelChoice& k, const MicroBatch& b)
    : Pass(d, b), cfg(c), kernels(k) {
  SL_CHECK(b.B >= 1 && b.T >= 1 && b.T <= c.max_seq_len, "llama: batch (B ", b.B, ", T ", b.T,
           ") must have B >= 1 and 1 <= T <= max_seq_len ", c.max_seq_len);
  btc_ = static_cast<int64_t>(b.B) * b.T * c.n_embd;
  residuals_ = d.alloc((2 * c.n_layer + 1) * btc_ * 4, MemCategory::activations);
  rope_ = d.alloc(static_cast<int64_t>(b.T) * c.head_dim() * 4, MemCategory::activations);
  llama_rope_table(d, c, rope_.f32(), b.T);
  attn_.resize(static_cast<size_t>(c.n_layer));
  mlp_.resize(static_cast<size_t>(c.n_layer));
}

void LlamaPass::begin_backward() {
  if (dres_.empty()) dres_ = dev.alloc(btc_ * 4, MemCategory::workspace);
}

LlamaAttnActivations& LlamaPass::hold_attn(int l) {
  LlamaAttnActivations& a = attn_[static_cast<size_t>(l)];
  if (a.B() == 0)
    a = LlamaAttnActivations(dev, cfg, batch.B, batch.T, kernels);
  else
    a.allocate();
  return a;
}

LlamaMlpActivations& LlamaPass::hold_mlp(int l) {
  LlamaMlpActivations& a = mlp_[static_cast<size_t>(l)];
  if (a.B() == 0)
    a = LlamaMlpActivations(dev, cfg, batch.B, batch.T);
  else
    a.allocate();
  return a;
}

LlamaHeadActivations& LlamaPass::hold_head() {
  if (head_.B() == 0)
    head_ = LlamaHeadActivations(dev, cfg, batch.B, batch.T);
  else
    head_.allocate();
  return head_;
}

// ---- stages -------------------------------------------------------------------------------------

namespace {

LlamaPass& llama_pass(Pass& p) { return static_cast<LlamaPass&>(p); }

// x0 = embed_tokens[tokens]. Tied, the head's backward (which runs first) wrote the gradient and
// this stage adds to it; untied, it writes it per its unit's GradWrite.
class LlamaEmbedding : public Stage {
 public:
  explicit LlamaEmbedding(const GPTConfig& cfg)
      : Stage("embedding", "embedding", llama_embedding_params(cfg)), cfg_(cfg) {}
  int64_t saved_bytes(int, int) const override { return 0; }
  void forward(Pass& pass, const StageArgs& a) const override {
    LlamaPass& p = llama_pass(pass);
    llama_embedding_forward(p.dev, cfg_, p.x(0), p.batch.tokens, a.own.w, p.batch.B, p.batch.T);
  }
  void backward(Pass& pass, const StageArgs& a) const override {
    LlamaPass& p = llama_pass(pass);
    const GradWrite gw = cfg_.tie_embeddings ? GradWrite::accumulate : a.own.write;
    llama_embedding_backward(p.dev, cfg_, a.own.g, p.batch.tokens, p.dx(), p.batch.B, p.batch.T,
                             gw);
  }
  void release(Pass&) const override {}

 private:
  GPTConfig cfg_;
};

// One half of decoder layer l: attn reads stream position 2l and writes 2l + 1; mlp reads 2l + 1
// and writes 2l + 2. Each saves its own tensors (one allocation per half).
class LlamaLayerHalf : public Stage {
 public:
  enum class Half { attn, mlp };
  LlamaLayerHalf(const GPTConfig& cfg, const KernelChoice& kernels, int layer, Half half)
      : Stage("layer " + std::to_string(layer) + (half == Half::attn ? " attn" : " mlp"),
              half == Half::attn ? "attn" : "mlp",
              half == Half::attn ? llama_attn_params(cfg, layer) : llama_mlp_params(cfg, layer)),
        cfg_(cfg),
        kernels_(kernels),
        layer_(layer),
        half_(half) {}

  int64_t saved_bytes(int B, int T) const override {
    return half_ == Half::attn ? LlamaAttnActivations::bytes_for(cfg_, B, T, kernels_)
                               : LlamaMlpActivations::bytes_for(cfg_, B, T);
  }

  void forward(Pass& pass, const StageArgs& a) const override {
    LlamaPass& p = llama_pass(pass);
    forward_into(p, a, p.x(in() + 1));
  }

  // The next stage's input is already in the stream: the output goes to scratch.
  void recompute(Pass& pass, const StageArgs& a) const override {
    LlamaPass& p = llama_pass(pass);
    Buffer y = p.dev.alloc(static_cast<int64_t>(p.batch.B) * p.batch.T * cfg_.n_embd * 4,
                           MemCategory::workspace);  // (B, T, C), discarded
    forward_into(p, a, y.f32());
  }

  void backward(Pass& pass, const StageArgs& a) const override {
    LlamaPass& p = llama_pass(pass);
    const int B = p.batch.B, T = p.batch.T;
    if (half_ == Half::attn)
      llama_attn_backward(p.dev, cfg_, p.dx(), a.own.g, p.attn(layer_), p.x(in()), a.own.w,
                          p.rope(), B, T, a.own.write);
    else
      llama_mlp_backward(p.dev, cfg_, p.dx(), a.own.g, p.mlp(layer_), p.x(in()), a.own.w, B, T,
                         a.own.write);
  }

  void release(Pass& pass) const override {
    LlamaPass& p = llama_pass(pass);
    if (half_ == Half::attn)
      p.attn(layer_).release();
    else
      p.mlp(layer_).release();
  }

 private:
  int in() const { return 2 * layer_ + (half_ == Half::attn ? 0 : 1); }  // stream position read

  void forward_into(LlamaPass& p, const StageArgs& a, float* y) const {
    const int B = p.batch.B, T = p.batch.T;
    if (half_ == Half::attn)
      llama_attn_forward(p.dev, cfg_, y, p.hold_attn(layer_), p.x(in()), a.own.w, p.rope(), B, T);
    else
      llama_mlp_forward(p.dev, cfg_, y, p.hold_mlp(layer_), p.x(in()), a.own.w, B, T);
  }

  GPTConfig cfg_;
  KernelChoice kernels_;
  int layer_;
  Half half_;
};

// norm, logits = norm(x) @ lm_head^T (lm_head: its own parameter, or embed_tokens tied),
// softmax, cross-entropy; sets the pass's loss.
class LlamaHead : public Stage {
 public:
  explicit LlamaHead(const GPTConfig& cfg)
      : Stage("head", "head", llama_head_params(cfg),
              cfg.tie_embeddings ? std::vector<std::string>{"embed_tokens.weight"}
                                 : std::vector<std::string>{}),
        cfg_(cfg) {}

  int64_t saved_bytes(int B, int T) const override {
    return LlamaHeadActivations::bytes_for(cfg_, B, T);
  }

  void forward(Pass& pass, const StageArgs& a) const override {
    LlamaPass& p = llama_pass(pass);
    p.loss = llama_head_forward(p.dev, cfg_, p.hold_head(), p.x(2 * cfg_.n_layer), p.batch.targets,
                                a.own.w, head(a).w, p.batch.B, p.batch.T);
  }

  void backward(Pass& pass, const StageArgs& a) const override {
    LlamaPass& p = llama_pass(pass);
    const ParamView h = head(a);
    llama_head_backward(p.dev, cfg_, p.dx(), a.own.g, a.own.write, h.g, h.write, p.head(),
                        p.x(2 * cfg_.n_layer), p.batch.targets, a.own.w, h.w, p.batch.B, p.batch.T,
                        p.batch.loss_scale);
  }

  void release(Pass& pass) const override { llama_pass(pass).head().release(); }

 private:
  // lm_head: tied[0] (embed_tokens), or the second of its own parameters, after norm (C).
  ParamView head(const StageArgs& a) const {
    if (cfg_.tie_embeddings) return a.tied[0];
    return {a.own.w + cfg_.n_embd, a.own.g ? a.own.g + cfg_.n_embd : nullptr, a.own.write};
  }

  GPTConfig cfg_;
};

}  // namespace

// ---- the model ----------------------------------------------------------------------------------

Model llama_model(const GPTConfig& cfg, const KernelChoice& kernels) {
  cfg.validate();
  SL_CHECK(cfg.is_llama(), "llama_model: ", cfg.describe(), " is not a Llama-family shape");
  ModelDef d;
  d.family = "llama";
  d.stages.push_back(std::make_shared<LlamaEmbedding>(cfg));
  for (int l = 0; l < cfg.n_layer; ++l) {
    d.layers.push_back({"layer " + std::to_string(l), {1 + 2 * l, 2 + 2 * l}});
    d.stages.push_back(
        std::make_shared<LlamaLayerHalf>(cfg, kernels, l, LlamaLayerHalf::Half::attn));
    d.stages.push_back(
        std::make_shared<LlamaLayerHalf>(cfg, kernels, l, LlamaLayerHalf::Half::mlp));
  }
  d.stages.push_back(std::make_shared<LlamaHead>(cfg));
  d.layer_item = "layer";
  d.root_label = cfg.tie_embeddings ? "embed_tokens and norm" : "embed_tokens, norm and lm_head";
  d.max_seq_len = cfg.max_seq_len;
  d.vocab_size = cfg.vocab_size;
  d.config = gpt_config_json(cfg);
  d.describe = cfg.describe();
  d.begin = [cfg, kernels](Device& dev, const MicroBatch& b) {
    return std::make_unique<LlamaPass>(dev, cfg, kernels, b);
  };
  return Model(std::move(d));
}

}  // namespace shardlab
