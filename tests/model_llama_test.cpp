// core/model/llama_layers: a whole small Llama-family model (embedding, layers of attention and MLP
// halves, final norm and head) run with the fp32 layers, its loss against the fp64 reference of
// tests/llama_reference.hpp and every parameter's gradient against central differences of that
// reference; for grouped-query, multi-head and multi-query attention, biases (Qwen2's and
// Llama's), a tied head and Llama 3.1's rope scaling.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/model/llama_layers.hpp"
#include "tests/llama_reference.hpp"

using namespace shardlab;
using ref::Vec;

namespace {

constexpr double kGradTol = 1e-4;

struct Variant {
  const char* name;
  int n_kv_head;
  bool qkv_bias, o_bias, mlp_bias, tied, llama3;
};

GPTConfig micro(const Variant& v) {
  GPTConfig c{11, 6, 2, 4, 16};  // V 11, T 6, L 2, NH 4, C 16 (hs 4)
  c.family = ModelFamily::llama;
  c.n_kv_head = v.n_kv_head;
  c.ffn_dim = 12;
  c.rope_theta = 50.0f;  // turns far enough over 6 positions to matter
  c.norm_eps = 1e-5f;
  c.qkv_bias = v.qkv_bias;
  c.o_bias = v.o_bias;
  c.mlp_bias = v.mlp_bias;
  c.tie_embeddings = v.tied;
  if (v.llama3) {
    c.rope_llama3 = true;
    c.rope_factor = 4.0f;
    c.rope_original_max_pos = 4;  // thresholds 4 and 1 against wavelengths 2 pi ... 2 pi * 7
  }
  c.validate();
  return c;
}

class LlamaModelTest : public ::testing::TestWithParam<Variant> {
 protected:
  MemoryTracker tracker{0};
  std::unique_ptr<Device> dev = make_cpu_device(tracker);
};

// fp32 values of a tensor of n, scaled; norms near 1 so that they matter.
std::vector<float> values(int64_t n, uint32_t seed, float scale, float offset = 0.0f) {
  auto v = ref::random_floats(static_cast<size_t>(n), seed, scale);
  for (float& x : v) x += offset;
  return v;
}

}  // namespace

TEST_P(LlamaModelTest, LossAndEveryGradientAgainstTheReference) {
  const GPTConfig cfg = micro(GetParam());
  const int B = 2, T = 6, N = B * T, C = cfg.n_embd, V = cfg.vocab_size, L = cfg.n_layer;
  const std::vector<int> tokens = {1, 5, 3, 9, 0, 10, 4, 4, 7, 2, 8, 6};
  const std::vector<int> targets = {5, 3, 9, 0, 10, 4, 4, 7, 2, 8, 6, 1};

  // Parameters (fp32, the values both sides use): norms around 1, the rest small.
  const int64_t an = llama_attn_numel(cfg), mn = llama_mlp_numel(cfg);
  std::vector<float> embed = values(int64_t{V} * C, 1, 0.5f), norm = values(C, 2, 0.2f, 1.0f),
                     head = values(int64_t{V} * C, 3, 0.5f);
  std::vector<std::vector<float>> attn, mlp;
  for (int l = 0; l < L; ++l) {
    attn.push_back(values(an, 10 + l, 0.3f));
    mlp.push_back(values(mn, 20 + l, 0.3f));
    auto a = llama_attn_views(cfg, attn.back().data());
    auto m = llama_mlp_views(cfg, mlp.back().data());
    for (int c = 0; c < C; ++c) a.norm[c] += 1.0f, m.norm[c] += 1.0f;
  }

  // fp32 forward and backward with the layers.
  std::vector<float> cs(static_cast<size_t>(T) * cfg.head_dim());
  llama_rope_table(*dev, cfg, cs.data(), T);
  std::vector<std::vector<float>> xs(2 * L + 1, std::vector<float>(static_cast<size_t>(N) * C));
  std::vector<LlamaAttnActivations> aa;
  std::vector<LlamaMlpActivations> ma;
  for (int l = 0; l < L; ++l) {
    aa.emplace_back(*dev, cfg, B, T);
    ma.emplace_back(*dev, cfg, B, T);
  }
  LlamaHeadActivations ha(*dev, cfg, B, T);
  const float* head_w = cfg.tie_embeddings ? embed.data() : head.data();
  llama_embedding_forward(*dev, cfg, xs[0].data(), tokens.data(), embed.data(), B, T);
  for (int l = 0; l < L; ++l) {
    llama_attn_forward(*dev, cfg, xs[2 * l + 1].data(), aa[l], xs[2 * l].data(), attn[l].data(),
                       cs.data(), B, T);
    llama_mlp_forward(*dev, cfg, xs[2 * l + 2].data(), ma[l], xs[2 * l + 1].data(), mlp[l].data(),
                      B, T);
  }
  const float loss = llama_head_forward(*dev, cfg, ha, xs[2 * L].data(), targets.data(),
                                        norm.data(), head_w, B, T);

  // Gradients: overwrite for the first writer of each, as the engine's first micro-batch does.
  std::vector<float> dembed(embed.size(), 7.0f), dnorm(norm.size(), 7.0f), dhead(head.size(), 7.0f),
      dx(static_cast<size_t>(N) * C);
  std::vector<std::vector<float>> dattn(L, std::vector<float>(an, 7.0f)),
      dmlp(L, std::vector<float>(mn, 7.0f));
  float* dhead_w = cfg.tie_embeddings ? dembed.data() : dhead.data();
  llama_head_backward(*dev, cfg, dx.data(), dnorm.data(), GradWrite::overwrite, dhead_w,
                      GradWrite::overwrite, ha, xs[2 * L].data(), targets.data(), norm.data(),
                      head_w, B, T, 1.0f);
  for (int l = L - 1; l >= 0; --l) {
    llama_mlp_backward(*dev, cfg, dx.data(), dmlp[l].data(), ma[l], xs[2 * l + 1].data(),
                       mlp[l].data(), B, T, GradWrite::overwrite);
    llama_attn_backward(*dev, cfg, dx.data(), dattn[l].data(), aa[l], xs[2 * l].data(),
                        attn[l].data(), cs.data(), B, T, GradWrite::overwrite);
  }
  llama_embedding_backward(*dev, cfg, dembed.data(), tokens.data(), dx.data(), B, T,
                           cfg.tie_embeddings ? GradWrite::accumulate : GradWrite::overwrite);

  // The reference, in double, on the same values.
  Vec e = ref::to_double(embed), nw = ref::to_double(norm), hw = ref::to_double(head);
  std::vector<Vec> at, ml;
  for (int l = 0; l < L; ++l)
    at.push_back(ref::to_double(attn[l])), ml.push_back(ref::to_double(mlp[l]));
  auto f = [&] {
    return ref::llama_loss(cfg, e, at, ml, nw, hw, tokens.data(), targets.data(), B, T);
  };
  EXPECT_NEAR(loss, f(), 1e-5);
  EXPECT_LT(ref::scaled_max_error(dembed, ref::numeric_grad(e, f)), kGradTol) << "embed";
  EXPECT_LT(ref::scaled_max_error(dnorm, ref::numeric_grad(nw, f)), kGradTol) << "norm";
  if (!cfg.tie_embeddings) {
    EXPECT_LT(ref::scaled_max_error(dhead, ref::numeric_grad(hw, f)), kGradTol) << "head";
  }
  for (int l = 0; l < L; ++l) {
    EXPECT_LT(ref::scaled_max_error(dattn[l], ref::numeric_grad(at[l], f)), kGradTol)
        << "attn " << l;
    EXPECT_LT(ref::scaled_max_error(dmlp[l], ref::numeric_grad(ml[l], f)), kGradTol) << "mlp " << l;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Variants, LlamaModelTest,
    ::testing::Values(Variant{"gqa", 2, false, false, false, false, false},
                      Variant{"mha", 4, false, false, false, false, false},
                      Variant{"mqa_tied_llama3", 1, false, false, false, true, true},
                      Variant{"qwen2_biases", 2, true, false, false, false, false},
                      Variant{"all_biases", 2, true, true, true, false, false}),
    [](const auto& info) { return std::string(info.param.name); });

// What each half saves is what bytes_for says, and activation checkpointing's release and
// allocate give it back and take it again.
TEST(LlamaActivations, BytesAndRelease) {
  MemoryTracker tracker(0);
  auto dev = make_cpu_device(tracker);
  const GPTConfig cfg = GPTConfig::preset("llama-tiny");
  const int B = 2, T = 8, N = B * T;
  LlamaAttnActivations a(*dev, cfg, B, T);
  EXPECT_EQ(a.bytes(), 4 * (N * (64 + 1 + 128 + 64) + B * 4 * T * T));  // qkv = (4 + 2 * 2) * 16
  LlamaMlpActivations m(*dev, cfg, B, T);
  EXPECT_EQ(m.bytes(), 4 * N * (64 + 1 + 3 * 176));
  const int64_t held = tracker.current(MemCategory::activations);
  a.release();
  EXPECT_EQ(a.qkv, nullptr);
  EXPECT_EQ(tracker.current(MemCategory::activations), held - a.bytes_for(cfg, B, T));
  a.allocate();
  EXPECT_NE(a.qkv, nullptr);
  EXPECT_EQ(tracker.current(MemCategory::activations), held);
}
