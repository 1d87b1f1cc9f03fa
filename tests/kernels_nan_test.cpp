// core/kernels: NaN and Inf go through every kernel family as they go through the fp64 reference
// math (tests/model_reference.hpp, libm), so that a diverged model shows a non-finite loss instead
// of a plausible finite one. Before fastmath propagated NaN, its clamp turned a NaN score into
// e^-87: a NaN row came out of the softmax as a uniform distribution and the loss as ln V.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/kernels/attention.hpp"
#include "core/kernels/crossentropy.hpp"
#include "core/kernels/elementwise.hpp"
#include "core/kernels/fastmath.hpp"
#include "core/kernels/gelu.hpp"
#include "core/kernels/layernorm.hpp"
#include "core/kernels/optim.hpp"
#include "core/kernels/residual.hpp"
#include "tests/model_reference.hpp"

using namespace shardlab;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

struct NanKernelTest : ::testing::Test {
  MemoryTracker tracker{0};
  std::unique_ptr<Device> dev = make_cpu_device(tracker);
};

// got[i] is NaN exactly where want[i] is, and finite where want[i] is.
void expect_nan_where(const std::vector<float>& got, const ref::Vec& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(std::isnan(got[i]), std::isnan(want[i])) << what << " at " << i;
    if (std::isfinite(want[i])) {
      EXPECT_TRUE(std::isfinite(got[i])) << what << " at " << i;
    }
  }
}

}  // namespace

TEST(FastMathNan, ExpAndTanhPropagateNaNAsLibm) {
  EXPECT_TRUE(std::isnan(exp_nonpos_approx(kNaN)));
  EXPECT_TRUE(std::isnan(exp_nonpos_approx(-kNaN)));
  EXPECT_TRUE(std::isnan(tanh_approx(kNaN)));
  EXPECT_TRUE(std::isnan(tanh_approx(-kNaN)));
  // Infinities keep their limits (exp(-inf) = 0 up to the clamp's 1.6e-38).
  EXPECT_LT(exp_nonpos_approx(-kInf), 2e-38f);
  EXPECT_GE(exp_nonpos_approx(-kInf), 0.0f);
  EXPECT_EQ(tanh_approx(kInf), 1.0f);
  EXPECT_EQ(tanh_approx(-kInf), -1.0f);
  // The select does not disturb ordinary values.
  EXPECT_EQ(exp_nonpos_approx(0.0f), 1.0f);
  EXPECT_NEAR(exp_nonpos_approx(-1.0f), std::exp(-1.0), 1e-7);
}

TEST_F(NanKernelTest, SoftmaxRowsWithNaNComeOutNaNOthersUntouched) {
  // (BH = 1, T = 3, T): row 1 holds a NaN in its unmasked part, row 0 one in its masked part.
  std::vector<float> att = {0.1f, kNaN, 0.3f,   // row 0: only [0] counts, the NaN is masked
                            0.2f, kNaN, 0.5f,   // row 1: [0, 1] count
                            0.3f, 0.1f, 0.2f};  // row 2
  attention_softmax_forward(*dev, att.data(), 1, 3);
  EXPECT_EQ(att[0], 1.0f);
  EXPECT_EQ(att[1], 0.0f);
  EXPECT_EQ(att[2], 0.0f);
  EXPECT_TRUE(std::isnan(att[3]));
  EXPECT_TRUE(std::isnan(att[4]));
  EXPECT_EQ(att[5], 0.0f);  // masked
  for (int j = 6; j < 9; ++j) EXPECT_TRUE(std::isfinite(att[j])) << j;

  // Backward: NaN probabilities give NaN score gradients on their row only.
  std::vector<float> datt(9, 1.0f), dpre(9);
  attention_softmax_backward(*dev, dpre.data(), att.data(), datt.data(), 1, 3);
  EXPECT_TRUE(std::isnan(dpre[3]));
  for (int j : {0, 1, 2, 5, 6, 7, 8}) EXPECT_TRUE(std::isfinite(dpre[j])) << j;
}

TEST_F(NanKernelTest, AttentionMatchesReferenceNaNPattern) {
  const int B = 1, T = 4, C = 4, NH = 2;
  std::vector<float> qkv = ref::random_floats(static_cast<size_t>(B) * T * 3 * C, 7);
  qkv[2 * 3 * C + 1] = kNaN;  // q of position 2, head 0: only that output row and head
  std::vector<float> out(static_cast<size_t>(B) * T * C), att(static_cast<size_t>(B) * NH * T * T);
  attention_forward(*dev, out.data(), att.data(), qkv.data(), B, T, C, NH);
  expect_nan_where(out, ref::attention(ref::to_double(qkv), B, T, C, NH), "attention out");
}

TEST_F(NanKernelTest, CrossEntropyLossIsNaNForANaNOrInfLogit) {
  const int N = 3, V = 5;
  std::vector<float> logits = ref::random_floats(N * V, 3);
  logits[1 * V + 2] = kNaN;  // row 1, not its target
  logits[2 * V + 4] = kInf;  // row 2: inf - inf in the max subtraction, as in the reference
  const std::vector<int> targets = {0, 1, 3};
  std::vector<float> probs = logits, losses(N);
  crossentropy_forward(*dev, probs.data(), losses.data(), targets.data(), N, V);
  EXPECT_TRUE(std::isfinite(losses[0]));
  EXPECT_TRUE(std::isnan(losses[1]));  // before: -log(1e-30 guard) or ln V, finite
  EXPECT_TRUE(std::isnan(losses[2]));
  EXPECT_TRUE(std::isnan(mean_loss(*dev, losses.data(), N)));
  EXPECT_TRUE(std::isnan(ref::crossentropy(ref::to_double(logits), targets.data(), N, V)));

  // -inf logits are a probability of 0, not a NaN.
  std::vector<float> masked = {0.5f, -kInf, 0.25f};
  float l = 0;
  const int t0 = 0;
  crossentropy_forward(*dev, masked.data(), &l, &t0, 1, 3);
  EXPECT_TRUE(std::isfinite(l));
  EXPECT_LT(masked[1], 1e-30f);

  std::vector<float> dlogits(N * V);
  crossentropy_backward(*dev, dlogits.data(), probs.data(), targets.data(), 1.0f / N, N, V);
  for (int v = 0; v < V; ++v) {
    EXPECT_TRUE(std::isfinite(dlogits[v])) << v;
    EXPECT_TRUE(std::isnan(dlogits[V + v])) << v;
  }
}

TEST_F(NanKernelTest, LayerNormMatchesReferenceNaNPattern) {
  const int N = 3, C = 6;
  std::vector<float> x = ref::random_floats(N * C, 11), w = ref::random_floats(C, 12),
                     b = ref::random_floats(C, 13);
  x[1 * C + 4] = kNaN;
  x[2 * C + 0] = kInf;
  std::vector<float> out(N * C), mean(N), rstd(N);
  layernorm_forward(*dev, out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  const ref::Vec xd = ref::to_double(x), wd = ref::to_double(w), bd = ref::to_double(b);
  expect_nan_where(out, ref::layernorm(xd, wd.data(), bd.data(), N, C), "layernorm out");

  std::vector<float> dout(N * C, 0.5f), dx(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
  layernorm_backward(*dev, dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                     mean.data(), rstd.data(), N, C);
  for (int c = 0; c < C; ++c) {
    EXPECT_TRUE(std::isfinite(dx[c])) << c;
    EXPECT_TRUE(std::isnan(dx[C + c])) << c;
    EXPECT_TRUE(std::isnan(dw[c])) << c;  // summed over rows, one of them NaN
  }
}

TEST_F(NanKernelTest, GeluMatchesReference) {
  const std::vector<float> x = {kNaN, -kNaN, kInf, 1.5f, -2.0f};
  std::vector<float> out(x.size()), dx(x.size());
  gelu_forward(*dev, out.data(), x.data(), static_cast<int64_t>(x.size()));
  ref::Vec want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = ref::gelu(x[i]);
  expect_nan_where(out, want, "gelu");
  EXPECT_EQ(out[2], kInf);
  const std::vector<float> dout(x.size(), 1.0f);
  gelu_backward(*dev, dx.data(), x.data(), dout.data(), static_cast<int64_t>(x.size()));
  EXPECT_TRUE(std::isnan(dx[0]));
  EXPECT_TRUE(std::isnan(dx[1]));
  EXPECT_TRUE(std::isfinite(dx[3]));
  // A NaN upstream gradient on a finite input.
  const std::vector<float> one = {0.7f}, nan_dout = {kNaN};
  float d = 0;
  gelu_backward(*dev, &d, one.data(), nan_dout.data(), 1);
  EXPECT_TRUE(std::isnan(d));
}

TEST_F(NanKernelTest, OptimizerUpdatesPropagateNaNGradients) {
  std::vector<float> p = {1.0f, 2.0f}, g = {kNaN, 0.5f}, m(2, 0.0f), v(2, 0.0f);
  adamw_update(*dev, p.data(), g.data(), m.data(), v.data(), 2, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f,
               1);
  EXPECT_TRUE(std::isnan(p[0]));
  EXPECT_TRUE(std::isnan(m[0]));
  EXPECT_TRUE(std::isfinite(p[1]));

  std::vector<float> q = {1.0f, 2.0f}, h = {0.5f, kInf}, buf(2, 0.0f);
  sgd_update(*dev, q.data(), h.data(), buf.data(), 2, 0.1f, 0.9f, 0.0f);
  EXPECT_TRUE(std::isfinite(q[0]));
  EXPECT_TRUE(std::isinf(q[1]));
  std::vector<float> r = {1.0f}, nan_g = {kNaN};
  sgd_update(*dev, r.data(), nan_g.data(), nullptr, 1, 0.1f, 0.0f, 0.0f);
  EXPECT_TRUE(std::isnan(r[0]));
}

TEST_F(NanKernelTest, ResidualAndElementwisePropagateAndAllFiniteFindsThem) {
  std::vector<float> a = {1.0f, kNaN, 3.0f}, b = {kInf, 1.0f, 2.0f}, out(3);
  residual_forward(*dev, out.data(), a.data(), b.data(), 3);
  EXPECT_TRUE(std::isinf(out[0]));
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_EQ(out[2], 5.0f);
  std::vector<float> dbias(3, 0.0f);
  bias_backward(*dev, dbias.data(), a.data(), 1, 3);
  EXPECT_TRUE(std::isnan(dbias[1]));
  axpy(*dev, b.data(), 2.0f, a.data(), 3);
  EXPECT_TRUE(std::isnan(b[1]));
  EXPECT_TRUE(std::isnan(sum_squares(*dev, a.data(), 3)));

  // all_finite over every dtype, at every position of a vectorised loop's body and tail.
  for (int n : {1, 7, 64, 67})
    for (int at = 0; at < n; ++at)
      for (float bad : {kNaN, kInf, -kInf}) {
        std::vector<float> x(static_cast<size_t>(n), 0.25f);
        EXPECT_TRUE(all_finite(*dev, x.data(), DType::f32, n));
        x[static_cast<size_t>(at)] = bad;
        EXPECT_FALSE(all_finite(*dev, x.data(), DType::f32, n)) << n << " " << at;
        for (DType t : {DType::bf16, DType::f16}) {
          std::vector<uint16_t> h(static_cast<size_t>(n));
          cast_from_f32(*dev, h.data(), t, x.data(), n);
          EXPECT_FALSE(all_finite(*dev, h.data(), t, n)) << dtype_name(t) << " " << n << " " << at;
          x[static_cast<size_t>(at)] = 65504.0f;  // the largest f16: finite in both
          cast_from_f32(*dev, h.data(), t, x.data(), n);
          EXPECT_TRUE(all_finite(*dev, h.data(), t, n)) << dtype_name(t) << " " << n << " " << at;
          x[static_cast<size_t>(at)] = bad;
        }
      }
  EXPECT_TRUE(all_finite(*dev, nullptr, DType::f32, 0));
}
