// core/model: the unit-level forward passes against the fp64 reference (tests/model_reference.hpp)
// and the hand-written backward passes against central differences of that reference, for a block,
// the head, and the whole model; plus the loss-scale, aliasing and recompute contracts.
// Tolerance: scaled_max_error (max abs error / max abs gradient) below kGradTol.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/model/gpt.hpp"
#include "tests/model_reference.hpp"

using namespace shardlab;
using ref::Vec;

namespace {

constexpr double kGradTol = 1e-4;

// Small enough that a full finite-difference sweep over every parameter takes milliseconds.
GPTConfig micro() { return GPTConfig{11, 6, 2, 2, 8}; }

struct ModelTest : ::testing::Test {
  MemoryTracker tracker{0};
  std::unique_ptr<Device> dev = make_cpu_device(tracker);
};

// A unit's params: init_unit plus noise, so LayerNorm weights and biases are not trivially 1 and 0.
std::vector<float> unit_params(const GPTConfig& cfg, int unit, uint32_t seed) {
  std::vector<float> p(static_cast<size_t>(unit_layout(cfg, unit).numel));
  init_unit(cfg, unit, seed, p.data());
  auto noise = ref::random_floats(p.size(), seed + 1000, 0.1f);
  for (size_t i = 0; i < p.size(); ++i) p[i] += noise[i];
  return p;
}

std::vector<int> random_tokens(int n, int V, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int> t(static_cast<size_t>(n));
  for (int& x : t) x = static_cast<int>(gen() % static_cast<uint32_t>(V));
  return t;
}

}  // namespace

TEST_F(ModelTest, BlockForwardAndBackward) {
  const GPTConfig cfg = micro();
  const int B = 2, T = 5, C = cfg.n_embd;
  auto params = unit_params(cfg, 1, 1);
  auto x = ref::random_floats(B * T * C, 2);
  auto dy = ref::random_floats(B * T * C, 3);
  BlockActivations acts(*dev, cfg, B, T);
  EXPECT_EQ(tracker.current(MemCategory::activations), BlockActivations::bytes_for(cfg, B, T));
  std::vector<float> y(x.size());
  block_forward(*dev, cfg, y.data(), acts, x.data(), params.data(), B, T);
  Vec xd = ref::to_double(x), pd = ref::to_double(params);
  Vec want = ref::block(cfg, xd, pd.data(), B, T);
  for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], want[i], 1e-5) << i;

  std::vector<float> dx(x.size(), 123.0f), dparams(params.size(), 0.25f);
  block_backward(*dev, cfg, dx.data(), dparams.data(), dy.data(), acts, x.data(), params.data(), B,
                 T);
  EXPECT_EQ(tracker.current(MemCategory::workspace), 0);  // scratch released
  for (float& g : dparams) g -= 0.25f;                    // accumulated on top of 0.25
  auto loss = [&] { return ref::weighted_sum(ref::block(cfg, xd, pd.data(), B, T), dy); };
  EXPECT_LT(ref::scaled_max_error(dx, ref::numeric_grad(xd, loss)), kGradTol);
  Vec num = ref::numeric_grad(pd, loss);
  // Check each parameter on its own scale too: a small tensor's bug could hide under a large one.
  for (const ParamEntry& e : unit_layout(cfg, 1).entries) {
    std::vector<float> a(dparams.begin() + e.offset, dparams.begin() + e.offset + e.numel);
    Vec n(num.begin() + e.offset, num.begin() + e.offset + e.numel);
    EXPECT_LT(ref::scaled_max_error(a, n), kGradTol) << e.name;
  }

  // dx may alias dy; and after release + allocate + forward again (activation checkpointing) the
  // recomputed backward is bit-identical.
  std::vector<float> dparams0(params.size(), 0.0f);
  block_backward(*dev, cfg, dx.data(), dparams0.data(), dy.data(), acts, x.data(), params.data(), B,
                 T);
  acts.release();
  EXPECT_EQ(acts.bytes(), 0);
  EXPECT_EQ(tracker.current(MemCategory::activations), 0);
  acts.allocate();
  block_forward(*dev, cfg, y.data(), acts, x.data(), params.data(), B, T);
  std::vector<float> d_inplace = dy, dparams2(params.size(), 0.0f);
  block_backward(*dev, cfg, d_inplace.data(), dparams2.data(), d_inplace.data(), acts, x.data(),
                 params.data(), B, T);
  EXPECT_EQ(d_inplace, dx);
  EXPECT_EQ(dparams2, dparams0);
  BlockActivations wrong(*dev, cfg, 1, T);
  EXPECT_THROW(block_forward(*dev, cfg, y.data(), wrong, x.data(), params.data(), B, T),
               InvalidArgument);
}

TEST_F(ModelTest, HeadForwardAndScaledBackward) {
  const GPTConfig cfg = micro();
  const int B = 2, T = 4, C = cfg.n_embd;
  auto root = unit_params(cfg, 0, 4);
  auto x = ref::random_floats(B * T * C, 5);
  auto targets = random_tokens(B * T, cfg.vocab_size, 6);
  HeadActivations acts(*dev, cfg, B, T);
  float loss = head_forward(*dev, cfg, acts, x.data(), targets.data(), root.data(), B, T);
  Vec xd = ref::to_double(x), rd = ref::to_double(root);
  EXPECT_NEAR(loss, ref::head(cfg, xd, rd.data(), targets.data(), B, T), 1e-5);

  const float scale = 0.5f;
  std::vector<float> dx(x.size(), 9.0f), droot(root.size(), 0.0f);
  head_backward(*dev, cfg, dx.data(), droot.data(), acts, x.data(), targets.data(), root.data(), B,
                T, scale);
  auto f = [&] { return scale * ref::head(cfg, xd, rd.data(), targets.data(), B, T); };
  EXPECT_LT(ref::scaled_max_error(dx, ref::numeric_grad(xd, f)), kGradTol);
  Vec num = ref::numeric_grad(rd, f);
  for (const ParamEntry& e : unit_layout(cfg, 0).entries) {
    if (e.name == "wpe.weight") continue;  // the head does not touch wpe: both are 0
    std::vector<float> a(droot.begin() + e.offset, droot.begin() + e.offset + e.numel);
    Vec n(num.begin() + e.offset, num.begin() + e.offset + e.numel);
    EXPECT_LT(ref::scaled_max_error(a, n), kGradTol) << e.name;
  }
  // Inference: no targets, probabilities only.
  EXPECT_EQ(head_forward(*dev, cfg, acts, x.data(), nullptr, root.data(), B, T), 0.0f);
  double s = 0;
  for (int v = 0; v < cfg.vocab_size; ++v) s += acts.probs[v];
  EXPECT_NEAR(s, 1.0, 1e-6);
}

TEST_F(ModelTest, WholeModelLossAndEveryGradient) {
  const GPTConfig cfg = micro();
  const int B = 2, T = 6;
  GPT gpt(*dev, cfg, 11);
  std::vector<Vec> units;
  for (int u = 0; u < gpt.num_units(); ++u) {
    auto p = unit_params(cfg, u, 20 + u);
    dev->copy_from_host(gpt.unit_params(u), p.data(), static_cast<int64_t>(p.size()) * 4);
    units.push_back(ref::to_double(p));
  }
  auto tokens = random_tokens(B * T, cfg.vocab_size, 7);
  auto targets = random_tokens(B * T, cfg.vocab_size, 8);
  float loss = gpt.forward(tokens.data(), targets.data(), B, T);
  auto f = [&] { return ref::model_loss(cfg, units, tokens.data(), targets.data(), B, T); };
  EXPECT_NEAR(loss, f(), 1e-5);
  gpt.backward();
  for (int u = 0; u < gpt.num_units(); ++u) {
    Vec num = ref::numeric_grad(units[static_cast<size_t>(u)], f);
    const float* g = gpt.unit_grads(u);
    for (const ParamEntry& e : gpt.layout(u).entries) {
      std::vector<float> a(g + e.offset, g + e.offset + e.numel);
      Vec n(num.begin() + e.offset, num.begin() + e.offset + e.numel);
      EXPECT_LT(ref::scaled_max_error(a, n), kGradTol) << e.name;
    }
  }
}

// fp32 central differences on the real `tiny` preset (no reference): the directional derivative
// along a random direction d, (L(p + h d) - L(p - h d)) / 2h, against <grad, d>. With h = 1e-3 the
// fp32 rounding of L (~4e-7) contributes ~2e-4 absolute; the tolerance is 1% relative.
TEST_F(ModelTest, TinyPresetDirectionalDerivative) {
  const GPTConfig cfg = GPTConfig::preset("tiny");
  const int B = 2, T = 32;
  GPT gpt(*dev, cfg, 3);
  auto tokens = random_tokens(B * T, cfg.vocab_size, 9);
  auto targets = random_tokens(B * T, cfg.vocab_size, 10);
  gpt.forward(tokens.data(), targets.data(), B, T);
  gpt.backward();
  std::vector<std::vector<float>> dirs, base;
  double gd = 0;
  for (int u = 0; u < gpt.num_units(); ++u) {
    int64_t n = gpt.layout(u).numel;
    dirs.push_back(ref::random_floats(static_cast<size_t>(n), 100 + u));
    base.emplace_back(gpt.unit_params(u), gpt.unit_params(u) + n);
    for (int64_t i = 0; i < n; ++i) gd += double(gpt.unit_grads(u)[i]) * dirs.back()[i];
  }
  auto loss_at = [&](float h) {
    for (int u = 0; u < gpt.num_units(); ++u)
      for (size_t i = 0; i < base[u].size(); ++i)
        gpt.unit_params(u)[i] = base[u][i] + h * dirs[u][i];
    return gpt.forward(tokens.data(), targets.data(), B, T);
  };
  const float h = 1e-3f;
  double num = (double(loss_at(h)) - loss_at(-h)) / (2 * h);
  EXPECT_GT(std::abs(gd), 0.1);
  EXPECT_NEAR(num, gd, 0.01 * std::abs(gd)) << "numeric " << num << " analytic " << gd;
}

// loss_scale = 1/K over K micro-batches gives the gradient of the full batch's mean loss.
TEST_F(ModelTest, MicroBatchAccumulationEqualsFullBatch) {
  const GPTConfig cfg = micro();
  const int T = 6;
  GPT full(*dev, cfg, 5), acc(*dev, cfg, 5);
  auto tokens = random_tokens(2 * T, cfg.vocab_size, 12);
  auto targets = random_tokens(2 * T, cfg.vocab_size, 13);
  float lf = full.forward(tokens.data(), targets.data(), 2, T);
  full.backward();
  float l0 = acc.forward(tokens.data(), targets.data(), 1, T);
  acc.backward(0.5f);
  float l1 = acc.forward(tokens.data() + T, targets.data() + T, 1, T);
  acc.backward(0.5f);
  EXPECT_NEAR(lf, 0.5f * (l0 + l1), 1e-5);
  for (int u = 0; u < full.num_units(); ++u)
    for (int64_t i = 0; i < full.layout(u).numel; ++i)
      ASSERT_NEAR(acc.unit_grads(u)[i], full.unit_grads(u)[i], 1e-5)
          << "unit " << u << " elem " << i;
  acc.zero_grad();
  for (int u = 0; u < acc.num_units(); ++u) EXPECT_EQ(acc.unit_grads(u)[0], 0.0f);
}

TEST_F(ModelTest, ForwardChecksInputs) {
  const GPTConfig cfg = micro();
  GPT gpt(*dev, cfg, 1);
  std::vector<int> tokens(7, 1), targets(7, 2);
  EXPECT_THROW(gpt.forward(tokens.data(), targets.data(), 1, 7), InvalidArgument);  // T > max 6
  tokens[3] = cfg.vocab_size;
  EXPECT_THROW(gpt.forward(tokens.data(), targets.data(), 1, 6), InvalidArgument);
  tokens[3] = 0;
  EXPECT_EQ(gpt.forward(tokens.data(), nullptr, 1, 6), 0.0f);
  EXPECT_THROW(gpt.backward(), InvalidArgument);  // no targets
  EXPECT_GT(gpt.activation_bytes(), 0);
  EXPECT_EQ(gpt.activation_bytes(), tracker.current(MemCategory::activations));
}

// GradWrite::overwrite writes every parameter gradient of the call, whatever the buffer held
// (NaN here), with the bits of accumulating into zeros; for a block, and for the root unit's two
// calls (head_backward writes wte, embedding_backward adds to it and writes wpe, also the rows of
// positions past T).
TEST_F(ModelTest, OverwriteGivesTheBitsOfAccumulatingIntoZeros) {
  const GPTConfig cfg = micro();
  const int B = 2, T = 3, C = cfg.n_embd;  // T < max_seq_len: wpe has rows no position touches
  ASSERT_LT(T, cfg.max_seq_len);
  auto params = unit_params(cfg, 1, 31);
  auto x = ref::random_floats(B * T * C, 32), dy = ref::random_floats(B * T * C, 33);
  BlockActivations acts(*dev, cfg, B, T);
  std::vector<float> y(x.size());
  block_forward(*dev, cfg, y.data(), acts, x.data(), params.data(), B, T);
  std::vector<float> dx0(x.size()), dx1(x.size()), zeros(params.size(), 0.0f);
  std::vector<float> garbage(params.size(), std::nanf(""));
  block_backward(*dev, cfg, dx0.data(), zeros.data(), dy.data(), acts, x.data(), params.data(), B,
                 T);
  block_backward(*dev, cfg, dx1.data(), garbage.data(), dy.data(), acts, x.data(), params.data(), B,
                 T, GradWrite::overwrite);
  EXPECT_EQ(std::memcmp(garbage.data(), zeros.data(), zeros.size() * 4), 0);
  EXPECT_EQ(std::memcmp(dx1.data(), dx0.data(), dx0.size() * 4), 0);

  auto root = unit_params(cfg, 0, 34);
  auto tokens = random_tokens(B * T, cfg.vocab_size, 35);
  auto targets = random_tokens(B * T, cfg.vocab_size, 36);
  HeadActivations head(*dev, cfg, B, T);
  head_forward(*dev, cfg, head, x.data(), targets.data(), root.data(), B, T);
  std::vector<float> rzeros(root.size(), 0.0f), rgarbage(root.size(), std::nanf(""));
  for (GradWrite gw : {GradWrite::accumulate, GradWrite::overwrite}) {
    std::vector<float>& g = gw == GradWrite::accumulate ? rzeros : rgarbage;
    std::vector<float> dx(x.size());
    head_backward(*dev, cfg, dx.data(), g.data(), head, x.data(), targets.data(), root.data(), B, T,
                  0.5f, gw);
    embedding_backward(*dev, cfg, g.data(), tokens.data(), dx.data(), B, T, gw);
  }
  EXPECT_EQ(std::memcmp(rgarbage.data(), rzeros.data(), rzeros.size() * 4), 0);
}
