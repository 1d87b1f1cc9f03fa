// core/kernels: each op family's forward against the fp64 reference (tests/model_reference.hpp)
// and its hand-written backward against central differences of that reference.
// Tolerance: scaled_max_error (max abs error / max abs gradient) below kGradTol; fp32 kernels land
// near 1e-6, a wrong term in a backward formula lands near 1e-1.
#include <gtest/gtest.h>

#include <cmath>

#include "core/kernels/attention.hpp"
#include "core/kernels/crossentropy.hpp"
#include "core/kernels/encoder.hpp"
#include "core/kernels/gelu.hpp"
#include "core/kernels/layernorm.hpp"
#include "core/kernels/linear.hpp"
#include "core/kernels/residual.hpp"
#include "tests/model_reference.hpp"

using namespace shardlab;
using ref::Vec;

namespace {

constexpr double kGradTol = 1e-4;

struct KernelTest : ::testing::Test {
  MemoryTracker tracker{0};
  std::unique_ptr<Device> dev = make_cpu_device(tracker);
};

void expect_close(const std::vector<float>& got, const Vec& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::abs(want[i]))) << what << " at " << i;
}

}  // namespace

TEST_F(KernelTest, LayerNormForwardAndBackward) {
  const int N = 6, C = 10;
  auto x = ref::random_floats(N * C, 1, 2.0f);
  for (int i = 0; i < N * C; ++i) x[i] += 3.0f;  // a large mean: the two-pass variance matters
  auto w = ref::random_floats(C, 2), b = ref::random_floats(C, 3),
       dout = ref::random_floats(N * C, 4);
  std::vector<float> out(N * C), mean(N), rstd(N);
  layernorm_forward(*dev, out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  Vec xd = ref::to_double(x), wd = ref::to_double(w), bd = ref::to_double(b);
  expect_close(out, ref::layernorm(xd, wd.data(), bd.data(), N, C), 1e-5, "out");

  // Gradients accumulate: start from 0.5 and subtract it afterwards.
  std::vector<float> dx(N * C, 0.5f), dw(C, 0.5f), db(C, 0.5f);
  layernorm_backward(*dev, dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                     mean.data(), rstd.data(), N, C);
  for (auto* v : {&dx, &dw, &db})
    for (float& g : *v) g -= 0.5f;
  auto loss = [&] {
    return ref::weighted_sum(ref::layernorm(xd, wd.data(), bd.data(), N, C), dout);
  };
  EXPECT_LT(ref::scaled_max_error(dx, ref::numeric_grad(xd, loss)), kGradTol);
  EXPECT_LT(ref::scaled_max_error(dw, ref::numeric_grad(wd, loss)), kGradTol);
  EXPECT_LT(ref::scaled_max_error(db, ref::numeric_grad(bd, loss)), kGradTol);

  // The one-thread-per-column variant (for GPUs) gives the same parameter gradients.
  std::vector<float> dw_col(C, 0.0f), db_col(C, 0.0f);
  for (int c = 0; c < C; ++c)
    layernorm_param_grad_col(dw_col.data(), db_col.data(), dout.data(), x.data(), mean.data(),
                             rstd.data(), N, C, c);
  for (int c = 0; c < C; ++c) {
    EXPECT_NEAR(dw_col[c], dw[c], 1e-5);
    EXPECT_NEAR(db_col[c], db[c], 1e-5);
  }
}

TEST_F(KernelTest, GeluMatchesReferenceAndDerivative) {
  const int n = 41;
  std::vector<float> x(n), out(n), dout(n, 1.0f), dx(n);
  for (int i = 0; i < n; ++i) x[i] = -5.0f + 0.25f * i;
  gelu_forward(*dev, out.data(), x.data(), n);
  gelu_backward(*dev, dx.data(), x.data(), dout.data(), n);
  for (int i = 0; i < n; ++i) {
    EXPECT_NEAR(out[i], ref::gelu(x[i]), 1e-6 * (1 + std::abs(x[i])));
    const double h = 1e-5;
    double num = (ref::gelu(x[i] + h) - ref::gelu(x[i] - h)) / (2 * h);
    EXPECT_NEAR(dx[i], num, 1e-5) << "x " << x[i];
  }
  // dx may alias dout.
  std::vector<float> g(n, 2.0f);
  gelu_backward(*dev, g.data(), x.data(), g.data(), n);
  for (int i = 0; i < n; ++i) EXPECT_FLOAT_EQ(g[i], 2.0f * dx[i]);
}

TEST_F(KernelTest, AttentionForwardAndBackward) {
  const int B = 2, T = 5, C = 8, NH = 2;
  auto qkv = ref::random_floats(B * T * 3 * C, 5);
  auto dout = ref::random_floats(B * T * C, 6);
  std::vector<float> out(B * T * C), att(B * NH * T * T), dqkv(B * T * 3 * C, 9.0f);
  attention_forward(*dev, out.data(), att.data(), qkv.data(), B, T, C, NH);
  Vec qd = ref::to_double(qkv);
  expect_close(out, ref::attention(qd, B, T, C, NH), 1e-5, "out");
  // Probabilities: rows sum to 1, the causal upper triangle is exactly 0.
  for (int r = 0; r < B * NH * T; ++r) {
    int t = r % T;
    double s = 0;
    for (int j = 0; j < T; ++j) {
      s += att[r * T + j];
      if (j > t) {
        EXPECT_EQ(att[r * T + j], 0.0f);
      }
    }
    EXPECT_NEAR(s, 1.0, 1e-6);
  }
  attention_backward(*dev, dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  auto loss = [&] { return ref::weighted_sum(ref::attention(qd, B, T, C, NH), dout); };
  EXPECT_LT(ref::scaled_max_error(dqkv, ref::numeric_grad(qd, loss)), kGradTol);
}

// The causal blocks (attention.hpp) against one block per sequence, at block sizes that do and do
// not divide T: the products only drop terms that are exactly 0, so the results agree to rounding.
TEST_F(KernelTest, AttentionCausalBlocksMatchWholeSequences) {
  const int B = 2, T = 7, C = 8, NH = 2;
  auto qkv = ref::random_floats(B * T * 3 * C, 11);
  auto dout = ref::random_floats(B * T * C, 12);
  auto run = [&](int block, std::vector<float>& out, std::vector<float>& att,
                 std::vector<float>& dqkv) {
    out.assign(B * T * C, 9.0f);
    att.assign(B * NH * T * T, 9.0f);
    dqkv.assign(B * T * 3 * C, 9.0f);
    attention_forward(*dev, out.data(), att.data(), qkv.data(), B, T, C, NH, block);
    attention_backward(*dev, dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, block);
  };
  std::vector<float> out, att, dqkv;
  run(T, out, att, dqkv);
  const Vec want_out(out.begin(), out.end()), want_att(att.begin(), att.end()),
      want_dqkv(dqkv.begin(), dqkv.end());
  for (int block : {1, 2, 3, 6}) {
    SCOPED_TRACE(block);
    EXPECT_EQ(attention_causal_block(*dev, T, block), block);
    run(block, out, att, dqkv);
    expect_close(out, want_out, 1e-6, "out");
    expect_close(att, want_att, 1e-6, "att");
    expect_close(dqkv, want_dqkv, 1e-6, "dqkv");
  }
  EXPECT_EQ(attention_causal_block(*dev, T, 100), T);
}

TEST_F(KernelTest, CrossEntropyLossAndLogitGradient) {
  const int N = 4, V = 7;
  auto logits = ref::random_floats(N * V, 7, 3.0f);
  std::vector<int> targets = {0, 6, 3, 3};
  std::vector<float> probs = logits, losses(N), dlogits(N * V);
  crossentropy_forward(*dev, probs.data(), losses.data(), targets.data(), N, V);
  Vec ld = ref::to_double(logits);
  EXPECT_NEAR(mean_loss(*dev, losses.data(), N), ref::crossentropy(ld, targets.data(), N, V), 1e-6);
  crossentropy_backward(*dev, dlogits.data(), probs.data(), targets.data(), 1.0f / N, N, V);
  auto loss = [&] { return ref::crossentropy(ld, targets.data(), N, V); };
  EXPECT_LT(ref::scaled_max_error(dlogits, ref::numeric_grad(ld, loss)), kGradTol);
  // Huge logits do not overflow (max subtraction).
  std::vector<float> big = {1000.0f, 0.0f, -1000.0f};
  float l = 0;
  int tgt = 0;
  crossentropy_forward(*dev, big.data(), &l, &tgt, 1, 3);
  EXPECT_NEAR(l, 0.0f, 1e-6);
  tgt = 7;
  EXPECT_THROW(crossentropy_forward(*dev, big.data(), &l, &tgt, 1, 3), InvalidArgument);
}

TEST_F(KernelTest, EncoderScatterAddsRepeatedTokens) {
  const int B = 2, T = 3, C = 4, V = 5, maxT = 4;
  std::vector<int> tokens = {1, 1, 4, 0, 1, 4};
  auto wte = ref::random_floats(V * C, 8), wpe = ref::random_floats(maxT * C, 9);
  auto dout = ref::random_floats(B * T * C, 10);
  std::vector<float> out(B * T * C), dwte(V * C, 0.0f), dwpe(maxT * C, 0.0f);
  encoder_forward(*dev, out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, V);
  for (int i = 0; i < B * T; ++i)
    for (int c = 0; c < C; ++c)
      EXPECT_EQ(out[i * C + c], wte[tokens[i] * C + c] + wpe[(i % T) * C + c]);
  encoder_backward(*dev, dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, V);
  // Closed form: dwte[v] = sum of dout rows whose token is v; dwpe[t] = sum over b of row (b, t).
  for (int v = 0; v < V; ++v)
    for (int c = 0; c < C; ++c) {
      double s = 0;
      for (int i = 0; i < B * T; ++i)
        if (tokens[i] == v) s += dout[i * C + c];
      EXPECT_NEAR(dwte[v * C + c], s, 1e-6);
    }
  for (int t = 0; t < maxT; ++t)
    for (int c = 0; c < C; ++c) {
      double s = 0;
      for (int b = 0; b < B && t < T; ++b) s += dout[(b * T + t) * C + c];
      EXPECT_NEAR(dwpe[t * C + c], s, 1e-6);
    }
  tokens[4] = V;
  EXPECT_THROW(encoder_forward(*dev, out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, V),
               InvalidArgument);
}

TEST_F(KernelTest, LinearForwardBackwardAndBias) {
  const int N = 5, IC = 6, OC = 4;
  auto inp = ref::random_floats(N * IC, 11), w = ref::random_floats(IC * OC, 12);
  auto b = ref::random_floats(OC, 13), dout = ref::random_floats(N * OC, 14);
  std::vector<float> out(N * OC, 100.0f);
  linear_forward(*dev, out.data(), inp.data(), w.data(), b.data(), N, IC, OC);
  Vec id = ref::to_double(inp), wd = ref::to_double(w), bd = ref::to_double(b);
  Vec want = ref::linear(id, wd.data(), bd.data(), N, IC, OC);
  expect_close(out, want, 1e-6, "out");
  // accumulate = true adds on top (the fused residual).
  linear_forward(*dev, out.data(), inp.data(), w.data(), b.data(), N, IC, OC, true);
  for (auto& v : want) v *= 2;
  expect_close(out, want, 1e-6, "out accumulated");
  // Without a bias.
  linear_forward(*dev, out.data(), inp.data(), w.data(), nullptr, N, IC, OC);
  expect_close(out, ref::linear(id, wd.data(), nullptr, N, IC, OC), 1e-6, "out without bias");

  std::vector<float> dinp(N * IC, 7.0f), dw(IC * OC, 0.0f), db(OC, 0.0f);
  linear_backward(*dev, dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, IC,
                  OC);
  auto loss = [&] {
    return ref::weighted_sum(ref::linear(id, wd.data(), bd.data(), N, IC, OC), dout);
  };
  EXPECT_LT(ref::scaled_max_error(dinp, ref::numeric_grad(id, loss)), kGradTol);
  EXPECT_LT(ref::scaled_max_error(dw, ref::numeric_grad(wd, loss)), kGradTol);
  EXPECT_LT(ref::scaled_max_error(db, ref::numeric_grad(bd, loss)), kGradTol);
  // The column variant of the bias gradient (for GPUs) agrees.
  std::vector<float> db_col(OC, 0.0f);
  for (int o = 0; o < OC; ++o) bias_grad_col(db_col.data(), dout.data(), N, OC, o);
  for (int o = 0; o < OC; ++o) EXPECT_NEAR(db_col[o], db[o], 1e-6);
}

TEST_F(KernelTest, ResidualAdds) {
  std::vector<float> a = {1, 2, 3}, b = {0.5f, -2, 10}, out(3);
  residual_forward(*dev, out.data(), a.data(), b.data(), 3);
  EXPECT_EQ(out, (std::vector<float>{1.5f, 0, 13}));
  residual_forward(*dev, a.data(), a.data(), b.data(), 3);  // in place
  EXPECT_EQ(a, out);
}
