// A Llama-family model (Llama 2/3, Mistral, Qwen2) as a list of stages (stage.hpp): the token
// embedding, each decoder layer's attention half and MLP half, and the head (the final RMSNorm and
// lm_head, untied or tied to embed_tokens). Each stage calls the layer functions of
// llama_layers.hpp on its own flat range; the pass holds the residual stream, the rotary table and
// what each half and the head save.
//
//   stage 0          embedding      embed_tokens (V, C)                              root
//   stage 1 + 2l     layer l attn   input_layernorm, self_attn.{q,k,v,o}_proj         layer "layer
//   l" stage 2 + 2l     layer l mlp    post_attention_layernorm, mlp.{gate,up,down}_proj layer
//   "layer l" stage 1 + 2L     head           norm, lm_head (untied; tied: reads embed_tokens) root
//
// Names are Hugging Face LlamaForCausalLM's without "model." (lm_head.weight as it is), in the
// (out, in) layout of torch.nn.Linear, so a save_pretrained directory maps tensor for tensor.
#pragma once

#include <memory>
#include <vector>

#include "core/model/config.hpp"
#include "core/model/llama_layers.hpp"
#include "core/model/model.hpp"

namespace shardlab {

// Parameter lists, in flat order (the order llama_attn_views and llama_mlp_views read).
std::vector<StageParam> llama_embedding_params(const GPTConfig& cfg);
std::vector<StageParam> llama_attn_params(const GPTConfig& cfg, int layer);
std::vector<StageParam> llama_mlp_params(const GPTConfig& cfg, int layer);
std::vector<StageParam> llama_head_params(const GPTConfig& cfg);  // norm; lm_head when untied

// The Llama-family model of a Llama-family shape (cfg.is_llama()), running `kernels`.
Model llama_model(const GPTConfig& cfg, const KernelChoice& kernels = {});

// One micro-batch through a Llama model: the residual stream at each half's input and the
// output (2L + 1 positions of (B, T, C)), the rotary table of positions [0, T), each half's and
// the head's saved tensors (allocated by their stages' forward), the residual gradient.
class LlamaPass : public Pass {
 public:
  LlamaPass(Device& dev, const GPTConfig& cfg, const KernelChoice& kernels,
            const MicroBatch& batch);
  void begin_backward() override;
  void end_backward() override { dres_.reset(); }

  // Input of half h (h = 2l: layer l's attention, 2l + 1 its MLP; h = 2L: the head's input).
  float* x(int h) { return residuals_.f32() + h * btc_; }
  float* dx() { return dres_.f32(); }
  const float* rope() const { return rope_.f32(); }  // (T, hs) cos | sin
  LlamaAttnActivations& attn(int l) { return attn_[static_cast<size_t>(l)]; }
  LlamaMlpActivations& mlp(int l) { return mlp_[static_cast<size_t>(l)]; }
  LlamaHeadActivations& head() { return head_; }
  // Allocate them unless they are (a first forward, or again after a release).
  LlamaAttnActivations& hold_attn(int l);
  LlamaMlpActivations& hold_mlp(int l);
  LlamaHeadActivations& hold_head();

  const GPTConfig cfg;
  const KernelChoice kernels;

 private:
  int64_t btc_ = 0;
  Buffer residuals_;  // (2L + 1, B, T, C)
  Buffer rope_;       // (T, hs)
  Buffer dres_;       // (B, T, C) from begin_backward to end_backward
  std::vector<LlamaAttnActivations> attn_;
  std::vector<LlamaMlpActivations> mlp_;
  LlamaHeadActivations head_;
};

}  // namespace shardlab
