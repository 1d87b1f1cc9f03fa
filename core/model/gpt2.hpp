// GPT-2 as a list of stages (stage.hpp): the embedding, each block's attention half and MLP half,
// and the head (ln_f, the LM head tied to wte, the loss). Each stage calls the layer functions of
// layers.hpp on its own flat range; the pass holds the residual stream and what each block and
// the head save. gpt2_model builds the Model; `Model(const GPTConfig&)` is the same call.
//
//   stage 0          embedding   wte (V, C), wpe (maxT, C)            root
//   stage 1 + 2l     block l attn   ln_1, attn.c_attn, attn.c_proj    layer "block l"
//   stage 2 + 2l     block l mlp    ln_2, mlp.c_fc, mlp.c_proj        layer "block l"
//   stage 1 + 2L     head        ln_f; reads wte (tied)               root
//
// The stage classes are public so that a variant (an untied head, another block) can reuse them.
#pragma once

#include <vector>

#include "core/model/config.hpp"
#include "core/model/layers.hpp"
#include "core/model/model.hpp"

namespace shardlab {

// Parameter lists, in flat order (params.hpp's unit layouts concatenate them).
std::vector<StageParam> gpt2_embedding_params(const GPTConfig& cfg);
std::vector<StageParam> gpt2_attn_params(const GPTConfig& cfg, int layer);
std::vector<StageParam> gpt2_mlp_params(const GPTConfig& cfg, int layer);
std::vector<StageParam> gpt2_head_params(const GPTConfig& cfg);  // ln_f only: the head is tied

// GPT-2 with the head tied to wte (as Hugging Face's GPT2LMHeadModel), running `kernels`.
Model gpt2_model(const GPTConfig& cfg, const KernelChoice& kernels = {});
// Throws InvalidArgument ("<where>: ... is a Llama-family shape ...") for a shape GPT-2's stages
// must not build: a Llama-family config never silently becomes GPT-2.
void refuse_llama_shape(const GPTConfig& cfg, const char* where);

// One micro-batch through GPT-2: the residual stream (allocated here), each block's and the head's
// saved tensors (allocated by their stages' forward), the residual gradient (backward).
class Gpt2Pass : public Pass {
 public:
  Gpt2Pass(Device& dev, const GPTConfig& cfg, const KernelChoice& kernels, const MicroBatch& batch);
  void begin_backward() override;
  void end_backward() override { dres_.reset(); }

  // Input of block l (l = L: the head's input), (B, T, C).
  float* x(int l) { return residuals_.f32() + l * btc_; }
  // The gradient flowing down the stack, (B, T, C), one buffer reused by every stage.
  float* dx() { return dres_.f32(); }
  // Block l's and the head's saved tensors. The hold_ forms allocate them unless they are
  // (the forward of the block's attention half, and of the head).
  BlockActivations& block(int l) { return blocks_[static_cast<size_t>(l)]; }
  HeadActivations& head() { return head_; }
  BlockActivations& hold_block(int l);
  HeadActivations& hold_head();
  // Bytes held now: the residual stream and what the blocks and the head saved.
  int64_t saved_bytes() const;

  const GPTConfig cfg;
  const KernelChoice kernels;

 private:
  int64_t btc_ = 0;
  Buffer residuals_;  // (L + 1, B, T, C)
  Buffer dres_;       // (B, T, C) from begin_backward to end_backward
  std::vector<BlockActivations> blocks_;
  HeadActivations head_;
};

// x0 = wte[tokens] + wpe[0..T). With a tied wte the head, whose backward runs first, writes wte's
// gradient and this stage adds to it; untied, this stage writes it too.
class Gpt2Embedding : public Stage {
 public:
  Gpt2Embedding(const GPTConfig& cfg, bool wte_tied);
  int64_t saved_bytes(int, int) const override { return 0; }
  void forward(Pass& pass, const StageArgs& a) const override;
  void backward(Pass& pass, const StageArgs& a) const override;
  void release(Pass&) const override {}

 private:
  GPTConfig cfg_;
  bool wte_tied_;
};

// One half of block l. attn: r = x + c_proj(attn(c_attn(ln_1(x)))); its forward allocates the
// block's saved tensors (its own and the MLP half's, one allocation) and its release frees them.
// mlp: y = r + mlp.c_proj(gelu(mlp.c_fc(ln_2(r)))), into the next block's input, saving into that
// allocation (its release frees nothing).
class Gpt2BlockHalf : public Stage {
 public:
  enum class Half { attn, mlp };
  Gpt2BlockHalf(const GPTConfig& cfg, const KernelChoice& kernels, int layer, Half half);
  int64_t saved_bytes(int B, int T) const override;
  void forward(Pass& pass, const StageArgs& a) const override;
  void recompute(Pass& pass, const StageArgs& a) const override;
  void backward(Pass& pass, const StageArgs& a) const override;
  void release(Pass& pass) const override;

 private:
  GPTConfig cfg_;
  KernelChoice kernels_;
  int layer_;
  Half half_;
};

// ln_f, logits = ln_f(x) @ wte^T (wte: tied[0]), softmax, cross-entropy; sets the pass's loss.
class Gpt2Head : public Stage {
 public:
  explicit Gpt2Head(const GPTConfig& cfg);
  int64_t saved_bytes(int B, int T) const override;
  void forward(Pass& pass, const StageArgs& a) const override;
  void backward(Pass& pass, const StageArgs& a) const override;
  void release(Pass& pass) const override;

 private:
  GPTConfig cfg_;
};

}  // namespace shardlab
