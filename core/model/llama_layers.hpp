// The Llama family's layers (Llama 2/3, Mistral, Qwen2 as Hugging Face's modeling_llama.py
// writes them), forward and backward on device pointers, llm.c style: outputs first, then what
// backward needs, then inputs, then sizes. Each takes its own flat parameter range, laid out as
// llama_*_views say (the order of llama.cpp's parameter lists); conventions as layers.hpp
// (parameter gradients += or, under GradWrite::overwrite, written; dx overwritten or, where said,
// updated in place; saved tensors under MemCategory::activations, scratch under workspace).
//
//   x0 = embed_tokens[tokens]                                        embedding
//   per layer l:
//     r = x + o_proj(attn(rope(q_proj, k_proj, v_proj (rmsnorm_1(x)))))   attention half
//     x = r + down_proj(silu(gate_proj(h)) * up_proj(h)), h = rmsnorm_2(r) MLP half
//   logits = rmsnorm_f(x) @ lm_head^T (lm_head = embed_tokens when tied)   head
//
// Projections keep torch.nn.Linear's (out, in) layout, Hugging Face's, so checkpoints map one to
// one; q_proj, k_proj, v_proj sit together (one GEMM making q | k | v rows), as do gate_proj and
// up_proj (one GEMM making gate | up rows).
#pragma once

#include <cstdint>

#include "core/device/device.hpp"
#include "core/model/config.hpp"
#include "core/model/layers.hpp"  // GradWrite
#include "core/model/stage.hpp"   // KernelChoice

namespace shardlab {

// ---- parameter views ----------------------------------------------------------------------------

// The attention half of layer l, in this order:
//   input_layernorm.weight (C); q_proj.weight (q, C), k_proj.weight (kv, C), v_proj.weight (kv, C);
//   with qkv_bias: q_proj.bias (q), k_proj.bias (kv), v_proj.bias (kv); o_proj.weight (C, q);
//   with o_bias: o_proj.bias (C).                  q = NH hs, kv = NKV hs
template <typename T>
struct LlamaAttnViews {
  T* norm;   // (C)
  T* qkv_w;  // (q + 2 kv, C)
  T* qkv_b;  // (q + 2 kv) or null
  T* o_w;    // (C, q)
  T* o_b;    // (C) or null
};
// The MLP half: post_attention_layernorm.weight (C); gate_proj.weight (F, C), up_proj.weight (F,
// C); with mlp_bias: gate_proj.bias (F), up_proj.bias (F); down_proj.weight (C, F); with mlp_bias:
// down_proj.bias (C).
template <typename T>
struct LlamaMlpViews {
  T* norm;       // (C)
  T* gate_up_w;  // (2F, C)
  T* gate_up_b;  // (2F) or null
  T* down_w;     // (C, F)
  T* down_b;     // (C) or null
};

inline int64_t llama_q_cols(const GPTConfig& c) { return int64_t{c.n_head} * c.head_dim(); }
inline int64_t llama_kv_cols(const GPTConfig& c) { return int64_t{c.kv_heads()} * c.head_dim(); }
inline int64_t llama_qkv_cols(const GPTConfig& c) { return llama_q_cols(c) + 2 * llama_kv_cols(c); }

int64_t llama_attn_numel(const GPTConfig& cfg);
int64_t llama_mlp_numel(const GPTConfig& cfg);

template <typename T>
LlamaAttnViews<T> llama_attn_views(const GPTConfig& cfg, T* p) {
  const int64_t C = cfg.n_embd, q = llama_q_cols(cfg), qkv = llama_qkv_cols(cfg);
  LlamaAttnViews<T> v{};
  // clang-format off
  v.norm = p; p += C;
  v.qkv_w = p; p += qkv * C;
  if (cfg.qkv_bias) { v.qkv_b = p; p += qkv; }
  v.o_w = p; p += C * q;
  if (cfg.o_bias) v.o_b = p;
  // clang-format on
  return v;
}

template <typename T>
LlamaMlpViews<T> llama_mlp_views(const GPTConfig& cfg, T* p) {
  const int64_t C = cfg.n_embd, F = cfg.ffn_dim;
  LlamaMlpViews<T> v{};
  // clang-format off
  v.norm = p; p += C;
  v.gate_up_w = p; p += 2 * F * C;
  if (cfg.mlp_bias) { v.gate_up_b = p; p += 2 * F; }
  v.down_w = p; p += C * F;
  if (cfg.mlp_bias) v.down_b = p;
  // clang-format on
  return v;
}

// ---- saved tensors ------------------------------------------------------------------------------

// What one half's forward saves, in one allocation carved into views by D::carve; release() frees
// it (activation checkpointing), allocate() takes it again for a forward to refill.
template <class D>
class LlamaSaved {
 public:
  void allocate() {  // no-op when allocated
    if (!buf_.empty()) return;
    buf_ = dev_->alloc(D::bytes_for(cfg_, B_, T_), MemCategory::activations);
    static_cast<D*>(this)->carve(buf_.f32());
  }
  void release() {
    buf_.reset();
    static_cast<D*>(this)->carve(nullptr);
  }
  bool allocated() const { return !buf_.empty(); }
  int64_t bytes() const { return buf_.bytes(); }
  int B() const { return B_; }
  int T() const { return T_; }

 protected:
  LlamaSaved() = default;
  LlamaSaved(Device& dev, const GPTConfig& cfg, int B, int T)
      : dev_(&dev), cfg_(cfg), B_(B), T_(T) {}
  Device* dev_ = nullptr;
  GPTConfig cfg_;
  int B_ = 0, T_ = 0;
  Buffer buf_;
};

// The attention half: 4 (N (C + 1 + qkv + q) + B NH T^2) bytes with naive attention, N = B T;
// with flash attention the probabilities give way to one logsumexp per query row, B NH T.
class LlamaAttnActivations final : public LlamaSaved<LlamaAttnActivations> {
 public:
  LlamaAttnActivations() = default;
  LlamaAttnActivations(Device& dev, const GPTConfig& cfg, int B, int T,
                       const KernelChoice& kernels = {});
  static int64_t bytes_for(const GPTConfig& cfg, int B, int T, const KernelChoice& kernels = {});
  const KernelChoice& kernels() const { return kernels_; }
  float* ln = nullptr;    // (N, C)     rmsnorm_1 output
  float* rstd = nullptr;  // (N)
  float* qkv = nullptr;   // (N, qkv)   q | k | v, q and k after the rotation
  float* att = nullptr;   // naive: (B, NH, T, T) causal softmax probabilities; else null
  float* lse = nullptr;   // flash: (B, NH, T) logsumexp of each query row's scores; else null
  float* atty = nullptr;  // (N, q)     attention output before o_proj
  void carve(float* p);   // the views from p, or all null

 private:
  KernelChoice kernels_;
};

// The MLP half: 4 N (C + 1 + 3F) bytes.
class LlamaMlpActivations final : public LlamaSaved<LlamaMlpActivations> {
 public:
  LlamaMlpActivations() = default;
  LlamaMlpActivations(Device& dev, const GPTConfig& cfg, int B, int T);
  static int64_t bytes_for(const GPTConfig& cfg, int B, int T);
  float* ln = nullptr;       // (N, C)   rmsnorm_2 output
  float* rstd = nullptr;     // (N)
  float* gate_up = nullptr;  // (N, 2F)  gate | up
  float* h = nullptr;        // (N, F)   silu(gate) * up, down_proj's input
  void carve(float* p);      // the views from p, or all null
};

// The head: 4 N (C + 2 + V) bytes.
class LlamaHeadActivations final : public LlamaSaved<LlamaHeadActivations> {
 public:
  LlamaHeadActivations() = default;
  LlamaHeadActivations(Device& dev, const GPTConfig& cfg, int B, int T);
  static int64_t bytes_for(const GPTConfig& cfg, int B, int T);
  float* ln = nullptr;      // (N, C)  final norm output
  float* rstd = nullptr;    // (N)
  float* probs = nullptr;   // (N, V)
  float* losses = nullptr;  // (N)
  void carve(float* p);     // the views from p, or all null
};

// ---- layers -------------------------------------------------------------------------------------

// The rotary table of positions [0, T): (T, hs) cos | sin, rope.hpp's, for cfg's theta and scaling.
void llama_rope_table(Device& dev, const GPTConfig& cfg, float* cos_sin /* (T, hs) */, int T);

void llama_embedding_forward(Device& dev, const GPTConfig& cfg, float* x /* (B, T, C) out */,
                             const int* tokens /* (B, T) */, const float* embed /* (V, C) */, int B,
                             int T);
// dembed += the rows of dx scattered to their tokens; overwrite: zeroed first (pass accumulate
// where a tied head's backward wrote it already).
void llama_embedding_backward(Device& dev, const GPTConfig& cfg, float* dembed /* (V, C) */,
                              const int* tokens, const float* dx /* (B, T, C) */, int B, int T,
                              GradWrite gw);

// y = x + attention half of x; y must not alias x.
void llama_attn_forward(Device& dev, const GPTConfig& cfg, float* y /* (B, T, C) out */,
                        LlamaAttnActivations& acts, const float* x /* (B, T, C) */,
                        const float* params, const float* cos_sin /* (T, hs) */, int B, int T);
// dx: dL/dy on entry, dL/dx on exit.
void llama_attn_backward(Device& dev, const GPTConfig& cfg, float* dx /* (B, T, C) in/out */,
                         float* dparams, const LlamaAttnActivations& acts, const float* x,
                         const float* params, const float* cos_sin, int B, int T, GradWrite gw);

// y = x + MLP half of x; y must not alias x.
void llama_mlp_forward(Device& dev, const GPTConfig& cfg, float* y, LlamaMlpActivations& acts,
                       const float* x, const float* params, int B, int T);
void llama_mlp_backward(Device& dev, const GPTConfig& cfg, float* dx /* in/out as above */,
                        float* dparams, const LlamaMlpActivations& acts, const float* x,
                        const float* params, int B, int T, GradWrite gw);

// The final norm and the head: the mean cross-entropy over B T positions (0 without targets).
float llama_head_forward(Device& dev, const GPTConfig& cfg, LlamaHeadActivations& acts,
                         const float* x, const int* targets, const float* norm /* (C) */,
                         const float* head /* (V, C) */, int B, int T);
// Gradient of loss_scale * mean loss: dx overwritten; dnorm and dhead per their GradWrite.
void llama_head_backward(Device& dev, const GPTConfig& cfg, float* dx, float* dnorm,
                         GradWrite norm_gw, float* dhead, GradWrite head_gw,
                         const LlamaHeadActivations& acts, const float* x, const int* targets,
                         const float* norm, const float* head, int B, int T, float loss_scale);

}  // namespace shardlab
