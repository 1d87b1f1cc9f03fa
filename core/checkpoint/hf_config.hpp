// Hugging Face config.json <-> GPTConfig: the shape of a GPT-2 or Llama-family model (model_type
// "gpt2", "llama", "mistral", "qwen2") read from the file transformers writes, and written back so
// that transformers loads what `shardlab export` produces.
//
// Read: the published configs of Llama 2 and 3 (rope_theta, rope_scaling), those transformers 5
// writes (rope_parameters), Mistral (sliding_window), Qwen2 (q/k/v biases, use_sliding_window,
// layer_types) and GPT-2 (n_embd, n_positions, ...). A field transformers gives a default
// (rope_theta, rms_norm_eps, num_key_value_heads, tie_word_embeddings, ...) takes that default
// where it is absent; the shape's own fields (hidden_size, num_hidden_layers, ...) must be there.
// What this program cannot build is refused naming the field: another model_type (by name), a
// hidden_act other than silu (GPT-2: gelu_new), rope types other than default and llama3, GPT-2's
// n_inner other than 4C. A sliding window (Mistral v0.1, Qwen2 with use_sliding_window) only limits
// max_seq_len to the window: up to it, causal attention and sliding-window attention are the same.
#pragma once

#include <string>

#include "core/model/config.hpp"

namespace shardlab {

// The model types read_hf_config accepts, for messages: "gpt2, llama, mistral, qwen2".
std::string hf_model_types();

// Parses config.json's text; `where` (the file's path) starts every message. IoError for what is
// not JSON or a field of the wrong type, InvalidArgument for a shape this program cannot build,
// each naming the field. The result is validated.
GPTConfig parse_hf_config(const std::string& text, const std::string& where);
// The same, from a config.json file or a directory holding one.
GPTConfig read_hf_config(const std::string& path);

// config.json's text for cfg, as transformers 5 writes it (rope_parameters) plus rope_theta at the
// top for readers older than 5. model_type: gpt2; llama; qwen2 when the q/k/v projections alone
// have biases. Throws InvalidArgument for a bias combination no Hugging Face class has.
std::string hf_config_text(const GPTConfig& cfg);

}  // namespace shardlab
