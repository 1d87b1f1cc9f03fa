// GPTConfig: the shape of a decoder-only model of one of two families, GPT-2 (LayerNorm, learned
// positions, GELU MLP of 4C, biases, tied head) or Llama (RMSNorm, rotary positions, SwiGLU MLP of
// ffn_dim, grouped-query attention, untied or tied head; Mistral and Qwen2 are Llama-family
// shapes), its presets, validation and parameter count. Everything else in core/model derives its
// sizes from here.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace shardlab {

// The most transformer blocks `plan` and `simulate` take. The meta device holds no memory, but
// the engine still keeps each unit's layout and schedule on the host; without a bound, --n-layer
// 1000000000 grew that without limit. 2^16 blocks is far beyond any published model (~100-200).
inline constexpr int kMaxSimulatedLayers = 1 << 16;

enum class ModelFamily { gpt2, llama };
const char* model_family_name(ModelFamily f);  // "gpt2", "llama"

struct GPTConfig {
  int vocab_size = 256;  // V: byte-level by default; 50257 for the GPT-2 tokenizer
  int max_seq_len = 64;  // maxT: rows of GPT-2's position embedding wpe; Llama's longest sequence
  int n_layer = 2;       // L: transformer blocks
  int n_head = 2;        // NH: attention (query) heads
  int n_embd = 64;       // C: residual stream width

  // ---- the Llama family (ignored for gpt2, whose fields below keep their defaults) -----------
  ModelFamily family = ModelFamily::gpt2;
  int n_kv_head = 0;          // NKV: K/V heads, dividing NH (NH: multi-head, 1: multi-query)
  int ffn_dim = 0;            // F: the SwiGLU MLP's width (config.json's intermediate_size)
  int head_dim_override = 0;  // hs when not C / NH (config.json's head_dim); 0: C / NH
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;      // RMSNorm's (rms_norm_eps)
  bool qkv_bias = false;       // q/k/v_proj biases (Qwen2; Llama's attention_bias)
  bool o_bias = false;         // o_proj bias (Llama's attention_bias)
  bool mlp_bias = false;       // gate/up/down_proj biases (Llama's mlp_bias)
  bool tie_embeddings = true;  // lm_head = embed_tokens (GPT-2: always)
  // rope_scaling {"rope_type": "llama3", ...} (Llama 3.1 and later); off: plain rope_theta.
  bool rope_llama3 = false;
  float rope_factor = 8.0f, rope_low_freq_factor = 1.0f, rope_high_freq_factor = 4.0f;
  int rope_original_max_pos = 8192;

  // Presets (parameter counts are Hugging Face's for the same shape):
  //   GPT-2 family, tied LM head:
  //   "tiny"   V 256,   T 64,   L 2,  NH 2,  C 64   ->     120,576 params (~0.1M)
  //   "small"  V 256,   T 256,  L 4,  NH 4,  C 256  ->   3,290,624 params (~3M)
  //   "medium" V 256,   T 512,  L 8,  NH 8,  C 512  ->  25,613,312 params (~25M)
  //   "gpt2"   V 50257, T 1024, L 12, NH 12, C 768  -> 124,439,808 params (GPT-2 124M)
  //   Llama family (config.cpp lists the sources of the published shapes):
  //   "llama-tiny", "llama-small" (train in seconds on a CPU), "llama2-7b", "llama3-8b",
  //   "llama3-70b", "mistral-7b", "qwen2-7b".
  // Throws InvalidArgument naming the unknown preset and listing the known ones.
  static GPTConfig preset(const std::string& name);
  static std::vector<std::string> preset_names();

  // Throws InvalidArgument naming the offending field, e.g.
  // "GPTConfig: n_head 5 does not divide n_embd 256".
  void validate() const;

  bool is_llama() const { return family == ModelFamily::llama; }
  int head_dim() const { return head_dim_override > 0 ? head_dim_override : n_embd / n_head; }
  int kv_heads() const { return is_llama() && n_kv_head > 0 ? n_kv_head : n_head; }
  // The MLP's hidden width: 4C for GPT-2, ffn_dim for Llama.
  int mlp_dim() const { return is_llama() ? ffn_dim : 4 * n_embd; }
  // Total parameters over all units (a tied head's weight counted once).
  int64_t num_params() const;
  // Parameters of one transformer block (all blocks are alike), and of what is outside them.
  int64_t block_params() const;
  // Model FLOPs per token at sequence length T, PaLM's count (Chowdhery et al. 2022, appendix B)
  // as torchtitan makes it: 6 N for the matrix products forward and backward, N the parameters
  // that multiply (an untied Llama token embedding is a lookup and left out; GPT-2's tied wte is
  // also its head and counted, as is its small wpe), plus 12 L (NH hs) T for attention's two
  // products. No recomputation (activation checkpointing) counted: MFU, not HFU.
  double flops_per_token(int T) const;
  // "V=256 T=64 L=2 NH=2 C=64 (120,576 params)" for logs and meta.json; Llama-family shapes add
  // "llama", NKV and F.
  std::string describe() const;

  bool operator==(const GPTConfig& o) const {
    return vocab_size == o.vocab_size && max_seq_len == o.max_seq_len && n_layer == o.n_layer &&
           n_head == o.n_head && n_embd == o.n_embd && family == o.family &&
           n_kv_head == o.n_kv_head && ffn_dim == o.ffn_dim &&
           head_dim_override == o.head_dim_override && rope_theta == o.rope_theta &&
           norm_eps == o.norm_eps && qkv_bias == o.qkv_bias && o_bias == o.o_bias &&
           mlp_bias == o.mlp_bias && tie_embeddings == o.tie_embeddings &&
           rope_llama3 == o.rope_llama3 &&
           (!rope_llama3 ||
            (rope_factor == o.rope_factor && rope_low_freq_factor == o.rope_low_freq_factor &&
             rope_high_freq_factor == o.rope_high_freq_factor &&
             rope_original_max_pos == o.rope_original_max_pos));
  }
  bool operator!=(const GPTConfig& o) const { return !(*this == o); }
};

// The shape as run directories and checkpoints record it (Model::config of GPT-2):
// {"vocab_size": 256, "max_seq_len": 64, "n_layer": 2, "n_head": 2, "n_embd": 64} for GPT-2 (the
// keys every checkpoint has); a Llama-family shape adds "family": "llama" and its own fields
// (n_kv_head, ffn_dim, head_dim, rope_theta, norm_eps, qkv_bias, o_bias, mlp_bias,
// tie_embeddings, and rope_scaling when it is llama3's).
nlohmann::json gpt_config_json(const GPTConfig& cfg);
// The inverse, for checkpoints read back (export); IoError naming `where` and the field when one
// is missing or mistyped. The result is validated.
GPTConfig gpt_config_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace shardlab
