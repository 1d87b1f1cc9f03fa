// core/model: presets and their parameter counts, validation messages, unit layouts and the
// deterministic per-name initialisation.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "core/model/gpt.hpp"

using namespace shardlab;

namespace {
std::string error_of(const GPTConfig& cfg) {
  try {
    cfg.validate();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

std::vector<float> init(const GPTConfig& cfg, int unit, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(unit_layout(cfg, unit).numel));
  init_unit(cfg, unit, seed, v.data());
  return v;
}

// Mean and standard deviation of an entry's values.
std::pair<double, double> moments(const std::vector<float>& flat, const ParamEntry& e) {
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < e.numel; ++i) {
    s += flat[e.offset + i];
    s2 += double(flat[e.offset + i]) * flat[e.offset + i];
  }
  double m = s / e.numel;
  return {m, std::sqrt(s2 / e.numel - m * m)};
}
}  // namespace

TEST(ModelConfig, PresetParamCounts) {
  // Hand count for GPT-2 124M: wte 50257*768 + wpe 1024*768 + ln_f 2*768
  //   + 12 * (12*768^2 + 13*768) = 38,597,376 + 786,432 + 1,536 + 85,054,464.
  EXPECT_EQ(GPTConfig::preset("gpt2").num_params(), 124439808);
  EXPECT_EQ(38597376 + 786432 + 1536 + 85054464, 124439808);
  auto in = [](const char* name, int64_t lo, int64_t hi) {
    int64_t n = GPTConfig::preset(name).num_params();
    EXPECT_GE(n, lo) << name;
    EXPECT_LE(n, hi) << name;
  };
  in("tiny", 80000, 150000);
  in("small", 2500000, 3500000);
  in("medium", 20000000, 30000000);
  for (const std::string& name : GPTConfig::preset_names()) {
    GPTConfig cfg = GPTConfig::preset(name);
    EXPECT_NO_THROW(cfg.validate()) << name;
    if (cfg.is_llama()) continue;  // counted by tests/llama_config_test.cpp
    int64_t sum = 0;
    for (int u = 0; u < num_units(cfg); ++u) sum += unit_layout(cfg, u).numel;
    EXPECT_EQ(sum, cfg.num_params()) << name;
  }
  EXPECT_EQ(GPTConfig::preset("gpt2").vocab_size, 50257);
  EXPECT_EQ(GPTConfig::preset("tiny").vocab_size, 256);
  EXPECT_NE(GPTConfig::preset("tiny").describe().find("120,576 params"), std::string::npos);
}

TEST(ModelConfig, ValidateNamesTheField) {
  GPTConfig cfg = GPTConfig::preset("small");
  cfg.n_head = 5;
  EXPECT_NE(error_of(cfg).find("n_head 5 does not divide n_embd 256"), std::string::npos)
      << error_of(cfg);
  cfg = GPTConfig::preset("tiny");
  cfg.n_layer = 0;
  EXPECT_NE(error_of(cfg).find("n_layer 0 must be positive"), std::string::npos) << error_of(cfg);
  cfg = GPTConfig::preset("tiny");
  cfg.vocab_size = -1;
  EXPECT_NE(error_of(cfg).find("vocab_size -1"), std::string::npos) << error_of(cfg);
  // C near 2^31: 12 C^2 wrapped int64 in num_params(); now refused before anything is sized.
  cfg = GPTConfig::preset("tiny");
  cfg.n_embd = 2147483646;
  cfg.n_head = 2;
  EXPECT_NE(error_of(cfg).find("n_embd 2147483646 give"), std::string::npos) << error_of(cfg);
  EXPECT_NE(error_of(cfg).find("more than the 2^56"), std::string::npos) << error_of(cfg);
  cfg = GPTConfig::preset("gpt2");
  cfg.n_layer = 96;
  cfg.n_embd = 12288;
  cfg.n_head = 96;
  EXPECT_EQ(error_of(cfg), "");  // GPT-3 175B's shape is fine
  try {
    GPTConfig::preset("huge");
    FAIL() << "no throw";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown preset 'huge'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tiny, small, medium, gpt2"), std::string::npos);
  }
}

TEST(ModelLayout, UnitsAreContiguousInHuggingFaceOrder) {
  GPTConfig cfg = GPTConfig::preset("tiny");
  ASSERT_EQ(num_units(cfg), 3);
  UnitLayout root = unit_layout(cfg, 0);
  std::vector<std::string> names;
  for (const auto& e : root.entries) names.push_back(e.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"}));
  EXPECT_EQ(root.entries[0].shape, (std::vector<int64_t>{256, 64}));
  EXPECT_EQ(root.entries[1].shape, (std::vector<int64_t>{64, 64}));
  UnitLayout blk = unit_layout(cfg, 2);
  const char* want[] = {"ln_1.weight",      "ln_1.bias",          "attn.c_attn.weight",
                        "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
                        "ln_2.weight",      "ln_2.bias",          "mlp.c_fc.weight",
                        "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
  ASSERT_EQ(blk.entries.size(), 12u);
  int64_t offset = 0;
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_EQ(blk.entries[i].name, std::string("h.1.") + want[i]);
    EXPECT_EQ(blk.entries[i].offset, offset);
    int64_t n = std::accumulate(blk.entries[i].shape.begin(), blk.entries[i].shape.end(),
                                int64_t{1}, std::multiplies<int64_t>());
    EXPECT_EQ(blk.entries[i].numel, n);
    offset += n;
  }
  EXPECT_EQ(blk.numel, offset);
  EXPECT_EQ(blk.find("h.1.attn.c_attn.weight").shape, (std::vector<int64_t>{64, 192}));
  EXPECT_EQ(blk.find("h.1.mlp.c_proj.weight").shape, (std::vector<int64_t>{256, 64}));
  // The views used by the layers agree with the table.
  std::vector<float> buf(static_cast<size_t>(blk.numel));
  float* base = buf.data();
  auto v = block_views(cfg, base);
  EXPECT_EQ(v.attproj_b - base, blk.find("h.1.attn.c_proj.bias").offset);
  EXPECT_EQ(v.fc_w - base, blk.find("h.1.mlp.c_fc.weight").offset);
  EXPECT_EQ(v.fcproj_b - base, blk.find("h.1.mlp.c_proj.bias").offset);
  // The halves FSDP may keep apart (--wrap layer): the MLP half starts at ln_2.
  EXPECT_EQ(block_attn_numel(cfg), blk.find("h.1.ln_2.weight").offset);
  auto halves = block_views(cfg, base, base + block_attn_numel(cfg));
  EXPECT_EQ(halves.ln2_w, v.ln2_w);
  EXPECT_EQ(block_views(cfg, base, static_cast<float*>(nullptr)).fc_w, nullptr);
  EXPECT_EQ(root_views(cfg, static_cast<float*>(nullptr)).lnf_b - static_cast<float*>(nullptr),
            root.find("ln_f.bias").offset);

  ParamRef r = find_param(cfg, "h.1.mlp.c_fc.bias");
  EXPECT_EQ(r.unit, 2);
  EXPECT_EQ(r.entry.numel, 256);
  EXPECT_EQ(find_param(cfg, "wpe.weight").unit, 0);
  EXPECT_THROW(find_param(cfg, "h.2.ln_1.weight"), InvalidArgument);
  EXPECT_THROW(find_param(cfg, "lm_head.weight"), InvalidArgument);
  EXPECT_THROW(unit_layout(cfg, 3), InvalidArgument);
}

TEST(ModelInit, DeterministicPerNameWithGpt2Scales) {
  GPTConfig cfg = GPTConfig::preset("small");
  EXPECT_EQ(init(cfg, 1, 42), init(cfg, 1, 42));
  EXPECT_NE(init(cfg, 1, 42), init(cfg, 1, 43));
  // Seeded by name: h.0.attn.c_attn.weight is the same whatever the number of layers.
  GPTConfig deeper = cfg;
  deeper.n_layer = 7;
  UnitLayout lay = unit_layout(cfg, 1);
  const ParamEntry& qkv = lay.find("h.0.attn.c_attn.weight");
  auto a = init(cfg, 1, 42), b = init(deeper, 1, 42);
  EXPECT_TRUE(std::equal(a.begin() + qkv.offset, a.begin() + qkv.offset + qkv.numel,
                         b.begin() + qkv.offset));
  // Different blocks get different values.
  auto c = init(cfg, 2, 42);
  EXPECT_NE(a[qkv.offset], c[qkv.offset]);

  auto [m, s] = moments(a, qkv);
  EXPECT_NEAR(m, 0.0, 1e-3);
  EXPECT_NEAR(s, 0.02, 0.02 * 0.02);
  auto [m2, s2] = moments(a, lay.find("h.0.mlp.c_proj.weight"));
  EXPECT_NEAR(m2, 0.0, 1e-3);
  EXPECT_NEAR(s2, 0.02 / std::sqrt(2.0 * cfg.n_layer), 0.02 * 0.02);
  for (const char* name : {"h.0.ln_1.weight", "h.0.ln_2.weight"}) {
    const ParamEntry& e = lay.find(name);
    for (int64_t i = 0; i < e.numel; ++i) ASSERT_EQ(a[e.offset + i], 1.0f) << name;
  }
  for (const ParamEntry& e : lay.entries) {
    if (e.name.size() > 5 && e.name.substr(e.name.size() - 5) == ".bias") {
      for (int64_t i = 0; i < e.numel; ++i) ASSERT_EQ(a[e.offset + i], 0.0f) << e.name;
    }
  }
  auto root = init(cfg, 0, 42);
  UnitLayout rl = unit_layout(cfg, 0);
  EXPECT_NEAR(moments(root, rl.find("wte.weight")).second, 0.02, 0.02 * 0.02);
  EXPECT_NEAR(moments(root, rl.find("wpe.weight")).second, 0.02, 0.02 * 0.02);
}

TEST(ModelGPT, OwnsTrackedParamsAndGrads) {
  MemoryTracker tracker(0);
  auto dev = make_cpu_device(tracker);
  GPTConfig cfg = GPTConfig::preset("tiny");
  {
    GPT gpt(*dev, cfg, 7);
    EXPECT_EQ(tracker.current(MemCategory::params), cfg.num_params() * 4);
    EXPECT_EQ(tracker.current(MemCategory::grads), cfg.num_params() * 4);
    EXPECT_EQ(gpt.num_units(), 3);
    // Params hold init_unit's values; grads start at zero.
    auto want = init(cfg, 1, 7);
    std::vector<float> got(want.size());
    dev->copy_to_host(got.data(), gpt.unit_params(1), static_cast<int64_t>(got.size()) * 4);
    EXPECT_EQ(got, want);
    EXPECT_EQ(gpt.param("h.0.ln_1.bias"), gpt.unit_params(1) + 64);
    EXPECT_EQ(gpt.unit_grads(2)[100], 0.0f);
    EXPECT_THROW(gpt.unit_params(3), InvalidArgument);
  }
  EXPECT_EQ(tracker.total(), 0);
  cfg.n_head = 3;
  EXPECT_THROW(GPT(*dev, cfg, 1), InvalidArgument);
}

// num_params() counts in int64, where 12 n_embd^2 overflows for n_embd near 2^31 (UBSan: signed
// overflow in config.cpp). validate() refuses such a model, naming its sizes.
TEST(ModelConfig, ValidateRefusesAParameterCountBeyondInt64) {
  GPTConfig cfg = GPTConfig::preset("tiny");
  cfg.n_embd = 2147483646;  // divisible by n_head 2
  const std::string msg = error_of(cfg);
  EXPECT_NE(msg.find("n_embd 2147483646 give"), std::string::npos) << msg;
  EXPECT_NE(msg.find("more than the 2^56"), std::string::npos) << msg;
  cfg = GPTConfig::preset("tiny");
  cfg.n_layer = 2147483647;
  cfg.n_embd = 65536;  // 12 C^2 L ~ 1.1e20
  EXPECT_NE(error_of(cfg).find("n_layer 2147483647"), std::string::npos) << error_of(cfg);
  cfg = GPTConfig::preset("gpt2");
  EXPECT_EQ(error_of(cfg), "");
}
