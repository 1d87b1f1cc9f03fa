// GPT-2's layers, forward and backward, on device pointers (llm.c style: outputs first, then what
// backward needs, then inputs, then sizes). A layer's parameters come as ONE flat pointer laid
// out as params.hpp says (views are computed inside). GPT-2's stages (gpt2.hpp) call these for
// the FSDP engine and the single-rank GPT; the lessons call them directly.
//
// Conventions:
// - All tensors are fp32 device memory of the Device passed in; tokens and targets are int32
//   device memory, shape (B, T), values in [0, V) (the CPU path checks and throws InvalidArgument).
// - Parameter gradients ACCUMULATE (+=), so gradient accumulation over micro-batches works;
//   callers zero them. Activation gradients (dx) are overwritten. GradWrite::overwrite instead
//   writes the call's parameter gradients (GEMMs with beta 0), for a buffer backward has not
//   written yet: it then needs no zeroing first, and the result has the bits of += into zeros.
//   The tied wte is the one exception: head_backward writes it, embedding_backward always adds.
// - Loss scale: head_forward returns the mean cross-entropy over the B*T positions; head_backward
//   produces gradients of loss_scale * mean_loss. To accumulate over K micro-batches and get the
//   gradient of the average loss, pass loss_scale = 1/K on each micro-batch (and scale further for
//   data parallelism if the reduction sums instead of averaging).
// - Saved activations are allocated under MemCategory::activations, scratch under
//   MemCategory::workspace (allocated and freed inside each call), both through Device::alloc.
#pragma once

#include <cstdint>

#include "core/device/device.hpp"
#include "core/model/config.hpp"
#include "core/model/stage.hpp"  // GradWrite, KernelChoice

namespace shardlab {

// ---- embedding (root unit): x = wte[tokens] + wpe[0..T) ------------------------------------

void embedding_forward(Device& dev, const GPTConfig& cfg,
                       float* x,                  // (B, T, C) out
                       const int* tokens,         // (B, T)
                       const float* root_params,  // root unit flat buffer
                       int B, int T);

// overwrite: the wpe gradient is written (its rows past T zeroed); wte's is still added to, as
// head_backward, which runs first, wrote it.
void embedding_backward(Device& dev, const GPTConfig& cfg,
                        float* droot_params,  // root unit flat grad, += (wte and wpe rows)
                        const int* tokens,    // (B, T)
                        const float* dx,      // (B, T, C)
                        int B, int T, GradWrite gw = GradWrite::accumulate);

// ---- transformer block: y = r + mlp(ln_2(r)), r = x + attn(ln_1(x)) --------------------------

// What one block's forward saves for backward, in one allocation under MemCategory::activations.
// For activation checkpointing: release() frees it, allocate() takes it again (same shapes), and
// running block_forward again refills it.
// Bytes each half of a block saves (the halves' Stage::saved_bytes, gpt2.hpp): the attention half
// ln1, its mean and rstd, qkv, the attention kernel's own (naive: the (B, NH, T, T)
// probabilities; flash: one logsumexp per query row, (B, NH, T)), atty and res2,
// 4 (B T (6C + 2) + B NH T^2) naive and 4 (B T (6C + 2) + B NH T) flash; the MLP half ln2, its
// mean and rstd, fch and fch_gelu, 4 B T (9C + 2).
int64_t block_attn_saved_bytes(const GPTConfig& cfg, const KernelChoice& k, int B, int T);
int64_t block_mlp_saved_bytes(const GPTConfig& cfg, int B, int T);

class BlockActivations {
 public:
  BlockActivations() = default;
  // Allocates immediately.
  BlockActivations(Device& dev, const GPTConfig& cfg, int B, int T, const KernelChoice& k = {});
  BlockActivations(BlockActivations&&) = default;
  BlockActivations& operator=(BlockActivations&&) = default;

  // Bytes one block saves for (cfg, B, T): both halves, 4 * (B*T*(15C + 4) + B*NH*T*T) with
  // naive attention, 4 * (B*T*(15C + 4) + B*NH*T) with flash.
  static int64_t bytes_for(const GPTConfig& cfg, int B, int T, const KernelChoice& k = {});

  void allocate();  // no-op when already allocated; needs the constructor's device
  void release();
  bool allocated() const { return !buf_.empty(); }
  int64_t bytes() const { return buf_.bytes(); }  // 0 when released
  int B() const { return B_; }
  int T() const { return T_; }
  // The kernels the block runs with these activations (what they hold depends on them).
  const KernelChoice& kernels() const { return kernels_; }

  // Saved tensors (null when released).
  float* ln1 = nullptr;       // (B, T, C)   ln_1 output
  float* ln1_mean = nullptr;  // (B, T)
  float* ln1_rstd = nullptr;  // (B, T)
  float* qkv = nullptr;       // (B, T, 3C)  q | k | v, head h at columns [h*hs, (h+1)*hs) of each
  float* att = nullptr;       // naive attention: (B, NH, T, T) causal softmax probabilities
                              // (upper triangle 0); null under flash attention
  float* lse = nullptr;       // flash attention: (B, NH, T) logsumexp of each query row's scores;
                              // null under naive attention
  float* atty = nullptr;      // (B, T, C)   attention output before c_proj
  float* res2 = nullptr;      // (B, T, C)   x + attention branch (input of ln_2)
  float* ln2 = nullptr;       // (B, T, C)
  float* ln2_mean = nullptr;  // (B, T)
  float* ln2_rstd = nullptr;  // (B, T)
  float* fch = nullptr;       // (B, T, 4C)  c_fc output (GELU input)
  float* fch_gelu = nullptr;  // (B, T, 4C)  GELU output (c_proj input)

 private:
  void set_views();
  Device* dev_ = nullptr;
  GPTConfig cfg_;
  KernelChoice kernels_;
  int B_ = 0, T_ = 0;
  Buffer buf_;
};

// y may alias x when no backward follows (backward needs the original x).
void block_forward(Device& dev, const GPTConfig& cfg,
                   float* y,                   // (B, T, C) out
                   BlockActivations& acts,     // filled; must be allocated for (B, T)
                   const float* x,             // (B, T, C)
                   const float* block_params,  // block unit flat buffer
                   int B, int T);

// dx may alias dy (one residual-gradient buffer reused through the stack, as llm.c does).
void block_backward(Device& dev, const GPTConfig& cfg,
                    float* dx,                     // (B, T, C) out, overwritten
                    float* dblock_params,          // block unit flat grad, +=
                    const float* dy,               // (B, T, C)
                    const BlockActivations& acts,  // from block_forward on this x
                    const float* x,                // (B, T, C) the block's input
                    const float* block_params,     // block unit flat buffer
                    int B, int T, GradWrite gw = GradWrite::accumulate);

// The same, one half at a time, for a block whose halves live in different FSDP units (the
// `layer` wrap policy): forward is attn then mlp, backward mlp then attn. Each half takes only its
// own parameters (block_views' halves, params.hpp); block_forward and block_backward are exactly
// these calls in this order.
void block_attn_forward(Device& dev, const GPTConfig& cfg,
                        BlockActivations& acts,    // ln1 .. res2 filled
                        const float* x,            // (B, T, C)
                        const float* attn_params,  // the block's attention half
                        int B, int T);
void block_mlp_forward(Device& dev, const GPTConfig& cfg,
                       float* y,                 // (B, T, C) out
                       BlockActivations& acts,   // ln2 .. fch_gelu filled; reads res2
                       const float* mlp_params,  // the block's MLP half
                       int B, int T);
void block_mlp_backward(Device& dev, const GPTConfig& cfg,
                        float* dx,                     // (B, T, C) out: dL/d(res2), may alias dy
                        float* dmlp_params,            // MLP half of the flat grad, +=
                        const float* dy,               // (B, T, C)
                        const BlockActivations& acts,  // from the forward
                        const float* mlp_params,       // the block's MLP half
                        int B, int T, GradWrite gw = GradWrite::accumulate);
void block_attn_backward(Device& dev, const GPTConfig& cfg,
                         float* dx,                     // (B, T, C) in: dL/d(res2), out: dL/dx
                         float* dattn_params,           // attention half of the flat grad, +=
                         const BlockActivations& acts,  // from the forward
                         const float* x,                // (B, T, C) the block's input
                         const float* attn_params,      // the block's attention half
                         int B, int T, GradWrite gw = GradWrite::accumulate);

// ---- head (root unit): ln_f, logits = ln_f(x) @ wte^T (tied), softmax, cross-entropy ---------

class HeadActivations {
 public:
  HeadActivations() = default;
  HeadActivations(Device& dev, const GPTConfig& cfg, int B, int T);
  HeadActivations(HeadActivations&&) = default;
  HeadActivations& operator=(HeadActivations&&) = default;

  // 4 * (B*T*(C + 3) + B*T*V).
  static int64_t bytes_for(const GPTConfig& cfg, int B, int T);
  void allocate();
  void release();
  bool allocated() const { return !buf_.empty(); }
  int64_t bytes() const { return buf_.bytes(); }
  int B() const { return B_; }
  int T() const { return T_; }

  float* lnf = nullptr;       // (B, T, C)
  float* lnf_mean = nullptr;  // (B, T)
  float* lnf_rstd = nullptr;  // (B, T)
  float* probs = nullptr;     // (B, T, V) softmax of the logits
  float* losses = nullptr;    // (B, T) per-position cross-entropy (0 when no targets)

 private:
  void set_views();
  Device* dev_ = nullptr;
  GPTConfig cfg_;
  int B_ = 0, T_ = 0;
  Buffer buf_;
};

// The head's parameters wherever they sit: ln_f's weight then bias (2C, contiguous) and the output
// projection (V, C), which is wte when the head is tied. Gradients likewise, each with how
// backward writes it.
struct HeadWeights {
  const float* lnf;   // (2C) ln_f.weight, ln_f.bias
  const float* wout;  // (V, C)
};
struct HeadGrads {
  float* lnf;   // (2C)
  float* wout;  // (V, C)
  GradWrite lnf_write = GradWrite::accumulate, wout_write = GradWrite::accumulate;
};

// Returns the mean cross-entropy over B*T positions (copied to the host). With targets == nullptr
// only probs are computed (inference) and the return value is 0.
float head_forward(Device& dev, const GPTConfig& cfg,
                   HeadActivations& acts,  // filled; must be allocated for (B, T)
                   const float* x,         // (B, T, C) output of the last block
                   const int* targets,     // (B, T) or nullptr
                   const HeadWeights& w, int B, int T);
// The same on the root unit's flat buffer (wte, wpe, ln_f: params.hpp), the head tied to wte.
float head_forward(Device& dev, const GPTConfig& cfg, HeadActivations& acts, const float* x,
                   const int* targets, const float* root_params, int B, int T);

// Gradient of loss_scale * mean_loss: dx overwritten, the parameters' gradients per `g`. See the
// loss-scale note at the top of this file.
void head_backward(Device& dev, const GPTConfig& cfg,
                   float* dx,                    // (B, T, C) out, overwritten
                   const HeadGrads& g,           // ln_f's and the output projection's
                   const HeadActivations& acts,  // from head_forward with the same targets
                   const float* x,               // (B, T, C)
                   const int* targets,           // (B, T)
                   const HeadWeights& w, int B, int T, float loss_scale);
// The same on the root unit's flat buffers, the head tied to wte: droot_params gets wte's
// (through the head), ln_f.weight's and ln_f.bias's gradients, all per `gw`.
void head_backward(Device& dev, const GPTConfig& cfg,
                   float* dx,                    // (B, T, C) out, overwritten
                   float* droot_params,          // root unit flat grad, +=
                   const HeadActivations& acts,  // from head_forward with the same targets
                   const float* x,               // (B, T, C)
                   const int* targets,           // (B, T)
                   const float* root_params,     // root unit flat buffer
                   int B, int T, float loss_scale = 1.0f, GradWrite gw = GradWrite::accumulate);

}  // namespace shardlab
