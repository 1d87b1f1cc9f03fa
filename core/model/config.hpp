// GPTConfig: the shape of a GPT-2 style model (byte-level vocabulary by default), its presets,
// validation and parameter count. Everything else in core/model derives its sizes from here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardlab {

// The most transformer blocks `plan` and `simulate` take. The meta device holds no memory, but
// the engine still keeps each unit's layout and schedule on the host; without a bound, --n-layer
// 1000000000 grew that without limit. 2^16 blocks is far beyond any published model (~100-200).
inline constexpr int kMaxSimulatedLayers = 1 << 16;

struct GPTConfig {
  int vocab_size = 256;  // V: byte-level by default; 50257 for the GPT-2 tokenizer
  int max_seq_len = 64;  // maxT: rows of the position embedding wpe
  int n_layer = 2;       // L: transformer blocks
  int n_head = 2;        // NH: attention heads; head_dim = n_embd / n_head
  int n_embd = 64;       // C: residual stream width

  // Presets (parameter counts with the tied LM head):
  //   "tiny"   V 256,   T 64,   L 2,  NH 2,  C 64   ->     120,576 params (~0.1M)
  //   "small"  V 256,   T 256,  L 4,  NH 4,  C 256  ->   3,290,624 params (~3M)
  //   "medium" V 256,   T 512,  L 8,  NH 8,  C 512  ->  25,613,312 params (~25M)
  //   "gpt2"   V 50257, T 1024, L 12, NH 12, C 768  -> 124,439,808 params (GPT-2 124M)
  // Throws InvalidArgument naming the unknown preset and listing the known ones.
  static GPTConfig preset(const std::string& name);
  static std::vector<std::string> preset_names();

  // Throws InvalidArgument naming the offending field, e.g.
  // "GPTConfig: n_head 5 does not divide n_embd 256".
  void validate() const;

  int head_dim() const { return n_embd / n_head; }
  // Total parameters over all units (wte counted once: the LM head is tied to it).
  int64_t num_params() const;
  // "V=256 T=64 L=2 NH=2 C=64 (120,576 params)" for logs and meta.json.
  std::string describe() const;

  bool operator==(const GPTConfig& o) const {
    return vocab_size == o.vocab_size && max_seq_len == o.max_seq_len && n_layer == o.n_layer &&
           n_head == o.n_head && n_embd == o.n_embd;
  }
  bool operator!=(const GPTConfig& o) const { return !(*this == o); }
};

}  // namespace shardlab
