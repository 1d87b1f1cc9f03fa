// core/model/config (the Llama family's fields, presets and parameter counts) and
// core/checkpoint/hf_config (reading the published config.json files in data/hf_configs/, the
// errors that name a bad file's field, and writing config.json back).
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "core/base/error.hpp"
#include "core/base/file_io.hpp"
#include "core/checkpoint/gpt_checkpoint.hpp"
#include "core/checkpoint/hf_config.hpp"
#include "core/model/config.hpp"
#include "core/model/params.hpp"

using namespace shardlab;

namespace {

std::string config_path(const std::string& name) {
  return std::string(SHARDLAB_SOURCE_DIR) + "/data/hf_configs/" + name;
}

// The message of what fn throws (as type E), "" when it does not throw.
template <class E, class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

// A Llama 3 8B config.json with one field changed (or removed, for a null value).
std::string llama3_with(const std::string& key, const nlohmann::json& value) {
  nlohmann::json j = nlohmann::json::parse(read_text_file(config_path("llama3-8b.json")));
  if (value.is_null())
    j.erase(key);
  else
    j[key] = value;
  return j.dump();
}

}  // namespace

// The parameter counts of transformers' models of the same shapes (data/hf_configs/README.md;
// bench/hf/llama_compare.py --counts checks them against transformers itself).
TEST(LlamaConfig, PresetParameterCountsAreHuggingFaces) {
  const std::pair<const char*, int64_t> counts[] = {
      {"llama-tiny", 125248},    {"llama-small", 2902272},    {"llama2-7b", 6738415616},
      {"llama3-8b", 8030261248}, {"llama3-70b", 70553706496}, {"mistral-7b", 7248023552},
      {"qwen2-7b", 7615616512},  {"gpt2", 124439808},
  };
  for (const auto& [name, n] : counts) {
    const GPTConfig c = GPTConfig::preset(name);
    EXPECT_NO_THROW(c.validate()) << name;
    EXPECT_EQ(c.num_params(), n) << name;
  }
}

TEST(LlamaConfig, ParameterCountByHand) {
  // llama-tiny: V 256, C 64, L 2, NH 4, NKV 2 (hs 16), F 176, untied.
  const GPTConfig c = GPTConfig::preset("llama-tiny");
  const int64_t C = 64, kv = 2 * 16, F = 176;
  const int64_t block = 2 * C + C * (C + 2 * kv) + C * C + 3 * C * F;
  EXPECT_EQ(c.block_params(), block);
  EXPECT_EQ(c.num_params(), 2 * 256 * C + C + 2 * block);
  GPTConfig tied = c;
  tied.tie_embeddings = true;
  EXPECT_EQ(tied.num_params(), c.num_params() - 256 * C);
  GPTConfig biased = c;
  biased.qkv_bias = biased.o_bias = biased.mlp_bias = true;
  EXPECT_EQ(biased.block_params(), block + (C + 2 * kv) + C + (2 * F + C));
  EXPECT_EQ(c.describe(), "llama V=256 T=64 L=2 NH=4 NKV=2 C=64 F=176 (125,248 params)");
}

TEST(LlamaConfig, ValidateNamesTheField) {
  GPTConfig c = GPTConfig::preset("llama-tiny");
  c.n_kv_head = 3;
  EXPECT_NE(
      error_of<InvalidArgument>([&] { c.validate(); }).find("n_kv_head 3 does not divide n_head 4"),
      std::string::npos);
  c = GPTConfig::preset("llama-tiny");
  c.ffn_dim = 0;
  EXPECT_NE(error_of<InvalidArgument>([&] { c.validate(); }).find("ffn_dim 0"), std::string::npos);
  c = GPTConfig::preset("llama-tiny");
  c.head_dim_override = 15;
  EXPECT_NE(error_of<InvalidArgument>([&] { c.validate(); }).find("head_dim 15 must be even"),
            std::string::npos);
  c = GPTConfig::preset("llama-tiny");
  c.norm_eps = 0;
  EXPECT_NE(error_of<InvalidArgument>([&] { c.validate(); }).find("norm_eps"), std::string::npos);
}

// Each published config.json gives its preset's shape, field for field.
TEST(HfConfig, PublishedConfigsGiveThePresets) {
  const std::pair<const char*, const char*> pairs[] = {
      {"gpt2.json", "gpt2"},
      {"llama2-7b.json", "llama2-7b"},
      {"llama3-8b.json", "llama3-8b"},
      {"llama3-70b.json", "llama3-70b"},
      {"mistral-7b-v0.3.json", "mistral-7b"},
      {"qwen2-7b-instruct.json", "qwen2-7b"},
  };
  for (const auto& [file, preset] : pairs) {
    const GPTConfig c = read_hf_config(config_path(file));
    EXPECT_EQ(c, GPTConfig::preset(preset)) << file << ": " << c.describe();
  }
}

TEST(HfConfig, Llama31RopeScalingAndMistralWindow) {
  const GPTConfig c = read_hf_config(config_path("llama3.1-8b.json"));
  EXPECT_TRUE(c.rope_llama3);
  EXPECT_EQ(c.rope_factor, 8.0f);
  EXPECT_EQ(c.rope_high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_original_max_pos, 8192);
  EXPECT_EQ(c.max_seq_len, 131072);
  EXPECT_EQ(c.num_params(), 8030261248);
  // Mistral v0.1: the 4096-token window limits T; up to it attention is plain causal.
  const GPTConfig m = read_hf_config(config_path("mistral-7b-v0.1.json"));
  EXPECT_EQ(m.max_seq_len, 4096);
  EXPECT_EQ(m.num_params(), 7241732096);
}

// transformers 5 writes rope_parameters instead of rope_theta / rope_scaling.
TEST(HfConfig, ReadsTransformers5RopeParameters) {
  nlohmann::json j = nlohmann::json::parse(read_text_file(config_path("llama3.1-8b.json")));
  nlohmann::json rope = j["rope_scaling"];
  rope["rope_theta"] = 500000.0;
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j["rope_parameters"] = rope;
  EXPECT_EQ(parse_hf_config(j.dump(), "v5.json"), read_hf_config(config_path("llama3.1-8b.json")));
}

TEST(HfConfig, BadFilesNameTheField) {
  auto msg = [](const std::string& text) {
    try {
      parse_hf_config(text, "bad/config.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  auto has = [](const std::string& m, const std::string& part) {
    return m.find(part) != std::string::npos ? ::testing::AssertionSuccess()
                                             : ::testing::AssertionFailure() << m;
  };
  EXPECT_TRUE(has(msg(llama3_with("hidden_size", nullptr)),
                  "bad/config.json: field 'hidden_size' is missing"));
  EXPECT_TRUE(
      has(msg(llama3_with("intermediate_size", nullptr)), "'intermediate_size' is missing"));
  EXPECT_TRUE(
      has(msg(llama3_with("num_key_value_heads", 5)),
          "field 'num_key_value_heads' = 5 does not divide field 'num_attention_heads' = 32"));
  EXPECT_TRUE(
      has(msg(llama3_with("num_key_value_heads", 0)), "'num_key_value_heads' = 0 is out of range"));
  EXPECT_TRUE(has(msg(llama3_with("model_type", "gemma")),
                  "field 'model_type' = \"gemma\" is not a model type this program builds (gpt2, "
                  "llama, mistral, qwen2)"));
  EXPECT_TRUE(has(msg(llama3_with("model_type", nullptr)), "field 'model_type' is missing"));
  EXPECT_TRUE(has(msg(llama3_with("hidden_size", "4096")), "'hidden_size' must be an integer"));
  EXPECT_TRUE(has(msg(llama3_with("hidden_act", "gelu")), "field 'hidden_act' = \"gelu\""));
  EXPECT_TRUE(
      has(msg(llama3_with("rope_theta", -1.0)), "field 'rope_theta' = -1.0 must be positive"));
  EXPECT_TRUE(has(msg(llama3_with("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}})),
                  "field 'rope_scaling.rope_type' = \"yarn\""));
  EXPECT_TRUE(has(msg(llama3_with("rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}})),
                  "field 'low_freq_factor' is missing"));
  EXPECT_TRUE(has(msg(llama3_with("head_dim", 127)), "head_dim 127 must be even"));
  EXPECT_TRUE(has(msg("{\"model_type\": \"llama\""), "bad/config.json: not valid JSON"));
  EXPECT_TRUE(has(msg("[1, 2]"), "one JSON object"));
  EXPECT_TRUE(has(msg(R"({"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024,
                          "n_layer": 12, "n_head": 5, "n_embd": 768})"),
                  "field 'n_head' = 5 does not divide field 'n_embd' = 768"));
  EXPECT_TRUE(has(msg(R"({"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024,
                          "n_layer": 12, "n_head": 12, "n_embd": 768, "n_inner": 1000})"),
                  "field 'n_inner' = 1000"));
  EXPECT_TRUE(has(error_of<IoError>([] { read_hf_config("/nonexistent/dir/config.json"); }),
                  "/nonexistent/dir/config.json: no such file"));
}

// What export writes reads back as the same shape (and transformers loads it:
// bench/hf/llama_compare.py).
TEST(HfConfig, WrittenConfigReadsBack) {
  for (const std::string& name : GPTConfig::preset_names()) {
    const GPTConfig c = GPTConfig::preset(name);
    EXPECT_EQ(parse_hf_config(hf_config_text(c), name), c) << name << ":\n" << hf_config_text(c);
  }
  GPTConfig c = read_hf_config(config_path("llama3.1-8b.json"));
  EXPECT_EQ(parse_hf_config(hf_config_text(c), "3.1"), c);
  const nlohmann::json j = nlohmann::json::parse(hf_config_text(GPTConfig::preset("llama3-8b")));
  EXPECT_EQ(j["rms_norm_eps"].dump(), "1e-05");
  EXPECT_EQ(j["model_type"], "llama");
  EXPECT_EQ(nlohmann::json::parse(hf_config_text(GPTConfig::preset("qwen2-7b")))["model_type"],
            "qwen2");
  c = GPTConfig::preset("llama-tiny");
  c.o_bias = true;  // o_proj alone: no Hugging Face class
  EXPECT_THROW(hf_config_text(c), InvalidArgument);
}

// Checkpoints store the shape as JSON; GPT-2's keeps its five keys (older checkpoints compare
// equal), a Llama shape adds its own and reads back whole.
TEST(HfConfig, CheckpointJsonRoundTrips) {
  EXPECT_EQ(gpt_config_json(GPTConfig::preset("tiny")).size(), 5u);
  for (const std::string& name : GPTConfig::preset_names()) {
    const GPTConfig c = GPTConfig::preset(name);
    EXPECT_EQ(gpt_config_from_json(gpt_config_json(c), name), c) << name;
  }
  GPTConfig c = read_hf_config(config_path("llama3.1-8b.json"));
  EXPECT_EQ(gpt_config_from_json(gpt_config_json(c), "3.1"), c);
}

// Until the engine builds the Llama family, a Llama shape must not become GPT-2 units silently.
TEST(LlamaConfig, GptUnitsRefuseALlamaShape) {
  const std::string m =
      error_of<InvalidArgument>([] { unit_layout(GPTConfig::preset("llama-tiny"), 0); });
  EXPECT_NE(m.find("Llama-family shape"), std::string::npos) << m;
}

TEST(LlamaConfig, ModelFlopsPerTokenLeaveTheUntiedEmbeddingOut) {
  // PaLM's 6 N + 12 L (NH hs) T as torchtitan counts it: Llama 3 8B's N without embed_tokens
  // (128256 x 4096, a lookup), its lm_head kept.
  const GPTConfig l3 = GPTConfig::preset("llama3-8b");
  const double n = 8030261248.0 - 128256.0 * 4096.0;
  EXPECT_DOUBLE_EQ(l3.flops_per_token(2048), 6.0 * n + 12.0 * 32 * 4096 * 2048);
  // GPT-2's tied wte is also its head: every parameter counts.
  const GPTConfig g = GPTConfig::preset("gpt2");
  EXPECT_DOUBLE_EQ(g.flops_per_token(1024), 6.0 * 124439808.0 + 12.0 * 12 * 768 * 1024);
}
