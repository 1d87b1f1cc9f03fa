// core/kernels: the Llama families (RMSNorm, RoPE, SwiGLU) and grouped-query attention, each
// forward against the fp64 reference of tests/llama_reference.hpp and each hand-written backward
// against central differences of that reference; the CPU loops' bits at every vector level; NaN
// carried through; the meta table's charges.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "core/base/cpu_simd.hpp"
#include "core/base/error.hpp"
#include "core/device/meta_device.hpp"
#include "core/kernels/attention.hpp"
#include "core/kernels/rmsnorm.hpp"
#include "core/kernels/rope.hpp"
#include "core/kernels/swiglu.hpp"
#include "tests/llama_reference.hpp"

using namespace shardlab;
using ref::Vec;

namespace {

constexpr double kGradTol = 1e-4;

struct LlamaKernelTest : ::testing::Test {
  MemoryTracker tracker{0};
  std::unique_ptr<Device> dev = make_cpu_device(tracker);
};

void expect_close(const std::vector<float>& got, const Vec& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::abs(want[i]))) << what << " at " << i;
}

}  // namespace

// ---- RMSNorm ----------------------------------------------------------------------------------

TEST_F(LlamaKernelTest, RmsNormForwardAndBackward) {
  const int N = 6, C = 19;
  const float eps = 1e-5f;
  auto x = ref::random_floats(N * C, 21, 2.0f);
  for (int c = 0; c < C; ++c) x[c] *= 1e-3f;  // a small row: eps matters
  auto w = ref::random_floats(C, 22), dout = ref::random_floats(N * C, 23);
  std::vector<float> out(N * C), rstd(N);
  rmsnorm_forward(*dev, out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
  Vec xd = ref::to_double(x), wd = ref::to_double(w);
  expect_close(out, ref::rmsnorm(xd, wd.data(), N, C, eps), 1e-5, "out");

  // Gradients accumulate: start from 0.5 and subtract it afterwards.
  std::vector<float> dx(N * C, 0.5f), dw(C, 0.5f);
  rmsnorm_backward(*dev, dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  for (auto* v : {&dx, &dw})
    for (float& g : *v) g -= 0.5f;
  auto loss = [&] { return ref::weighted_sum(ref::rmsnorm(xd, wd.data(), N, C, eps), dout); };
  EXPECT_LT(ref::scaled_max_error(dx, ref::numeric_grad(xd, loss)), kGradTol);
  EXPECT_LT(ref::scaled_max_error(dw, ref::numeric_grad(wd, loss)), kGradTol);

  // The GPU's one-thread-per-column weight gradient and per-row math give the same values.
  std::vector<float> dw_col(C, 0.0f), dx_row(N * C, 0.0f), out_row(N * C);
  for (int c = 0; c < C; ++c)
    rmsnorm_weight_grad_col(dw_col.data(), dout.data(), x.data(), rstd.data(), N, C, c);
  for (int i = 0; i < N; ++i) {
    float s = 0;
    rmsnorm_forward_row(out_row.data() + i * C, &s, x.data() + i * C, w.data(), C, eps);
    EXPECT_NEAR(s, rstd[i], 1e-6 * rstd[i]);
    rmsnorm_backward_row(dx_row.data() + i * C, dout.data() + i * C, x.data() + i * C, w.data(),
                         rstd[i], C);
  }
  for (int c = 0; c < C; ++c) EXPECT_NEAR(dw_col[c], dw[c], 1e-5);
  for (int i = 0; i < N * C; ++i) {
    EXPECT_NEAR(out_row[i], out[i], 1e-6);
    EXPECT_NEAR(dx_row[i], dx[i], 1e-5);
  }
}

// ---- RoPE -------------------------------------------------------------------------------------

TEST_F(LlamaKernelTest, RopeTableIsCosThenSinOfPositionTimesInvFreq) {
  const int T = 9, hs = 8;
  RopeParams p;
  p.theta = 500000.0f;
  std::vector<float> cs(T * hs);
  rope_table(*dev, cs.data(), T, hs, p);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < hs / 2; ++i) {
      const double a = t * ref::rope_inv_freq(i, hs, p.theta);
      EXPECT_NEAR(cs[t * hs + i], std::cos(a), 2e-6) << t << " " << i;
      EXPECT_NEAR(cs[t * hs + hs / 2 + i], std::sin(a), 2e-6) << t << " " << i;
    }
  EXPECT_THROW(rope_table(*dev, cs.data(), T, 7, p), Error);  // an odd head size has no halves
}

// Llama 3.1's rope_scaling (rope_type "llama3"): low frequencies divided by the factor, high ones
// kept, the band between interpolated; the formula of transformers' _compute_llama3_parameters.
TEST(RopeInvFreq, Llama3ScalingAgainstItsFormulaInDouble) {
  RopeParams p;
  p.theta = 500000.0f;
  p.scaling = RopeScaling::llama3;  // factor 8, low 1, high 4, original 8192: Llama 3.1's
  const int hs = 128;
  int low = 0, high = 0, mid = 0;
  for (int i = 0; i < hs / 2; ++i) {
    const double f = ref::rope_inv_freq(i, hs, 500000.0);
    const double wavelen = 2 * M_PI / f, low_wl = 8192.0 / 1, high_wl = 8192.0 / 4;
    double want = f;
    if (wavelen > low_wl) {
      want = f / 8, ++low;
    } else if (wavelen >= high_wl) {
      const double smooth = (8192.0 / wavelen - 1) / (4 - 1);
      want = (1 - smooth) * f / 8 + smooth * f, ++mid;
    } else {
      ++high;
    }
    EXPECT_NEAR(rope_inv_freq(i, hs, p), want, 1e-5 * want) << i;
  }
  EXPECT_GT(low, 0);  // every branch taken
  EXPECT_GT(mid, 0);
  EXPECT_GT(high, 0);
}

TEST_F(LlamaKernelTest, RopeForwardMatchesRotateHalfAndBackwardItsGradient) {
  // q | k | v rows: 3 query heads and 1 K/V head of 6 turn (n_heads 4), v's head stays.
  const int B = 2, T = 5, hs = 6, n_heads = 4, ld = 5 * hs;
  RopeParams p;
  p.theta = 100.0f;  // large angles at these few positions
  std::vector<float> cs(T * hs);
  rope_table(*dev, cs.data(), T, hs, p);
  std::vector<double> inv_freq(hs / 2);
  for (int i = 0; i < hs / 2; ++i) inv_freq[i] = rope_inv_freq(i, hs, p);

  auto x = ref::random_floats(B * T * ld, 31);
  std::vector<float> y = x;
  rope_forward(*dev, y.data(), cs.data(), B, T, n_heads, hs, ld);
  Vec xd = ref::to_double(x);
  expect_close(y, ref::rope(xd, inv_freq, B, T, n_heads, hs, ld), 1e-6, "rope");
  for (int r = 0; r < B * T; ++r)  // past the turned heads: the same bits
    for (int c = n_heads * hs; c < ld; ++c) ASSERT_EQ(y[r * ld + c], x[r * ld + c]);

  // Backward in place on dout: the gradient of sum(dout * rope(x)).
  auto dout = ref::random_floats(B * T * ld, 32);
  std::vector<float> dx = dout;
  rope_backward(*dev, dx.data(), cs.data(), B, T, n_heads, hs, ld);
  auto loss = [&] {
    return ref::weighted_sum(ref::rope(xd, inv_freq, B, T, n_heads, hs, ld), dout);
  };
  EXPECT_LT(ref::scaled_max_error(dx, ref::numeric_grad(xd, loss)), kGradTol);
  // Backward undoes forward (the rotation is orthogonal).
  rope_backward(*dev, y.data(), cs.data(), B, T, n_heads, hs, ld);
  for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], x[i], 1e-6);
  EXPECT_THROW(rope_forward(*dev, y.data(), cs.data(), B, T, 6, hs, ld), Error);  // 36 > 30
}

// ---- SwiGLU -----------------------------------------------------------------------------------

TEST_F(LlamaKernelTest, SwiGluForwardAndBackward) {
  const int N = 5, F = 13;
  auto gu = ref::random_floats(N * 2 * F, 41, 4.0f);
  gu[0] = 0.0f, gu[1] = -0.0f, gu[2] = 30.0f, gu[3] = -30.0f;
  auto dout = ref::random_floats(N * F, 42);
  std::vector<float> out(N * F), dgu(N * 2 * F, 7.0f);
  swiglu_forward(*dev, out.data(), gu.data(), N, F);
  Vec gud = ref::to_double(gu);
  expect_close(out, ref::swiglu(gud, N, F), 1e-6, "out");
  swiglu_backward(*dev, dgu.data(), dout.data(), gu.data(), N, F);  // overwrites the 7s
  auto loss = [&] { return ref::weighted_sum(ref::swiglu(gud, N, F), dout); };
  EXPECT_LT(ref::scaled_max_error(dgu, ref::numeric_grad(gud, loss)), kGradTol);
}

TEST(SigmoidApprox, AgainstLibmOverTheWholeRange) {
  for (float x = -100.0f; x <= 100.0f; x += 0.0625f) {
    const double want = 1.0 / (1.0 + std::exp(-static_cast<double>(x)));
    ASSERT_NEAR(sigmoid_approx(x), want, 4e-7 * want + 1e-37) << x;
  }
  EXPECT_EQ(sigmoid_approx(0.0f), 0.5f);
  EXPECT_EQ(sigmoid_approx(-0.0f), 0.5f);
  EXPECT_EQ(sigmoid_approx(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_LT(sigmoid_approx(-std::numeric_limits<float>::infinity()), 2e-38f);
  EXPECT_TRUE(std::isnan(sigmoid_approx(std::numeric_limits<float>::quiet_NaN())));
}

// ---- grouped-query attention ------------------------------------------------------------------

struct GqaCase {
  int NH, NKV;
};

class GqaAttentionTest : public LlamaKernelTest, public ::testing::WithParamInterface<GqaCase> {};

// MHA (NKV = NH), GQA and MQA (NKV = 1): forward against repeat_kv + eager attention, backward
// (q, k and v: the K/V gradients summed over each group) against its central differences, at
// causal blocks that do and do not divide T.
TEST_P(GqaAttentionTest, ForwardAndBackwardAgainstRepeatKv) {
  const int B = 2, T = 7, hs = 4, NH = GetParam().NH, NKV = GetParam().NKV;
  const AttentionDims d{B, T, NH, NKV, hs};
  const int ld = static_cast<int>(d.qkv_cols()), lo = static_cast<int>(d.q_cols());
  auto qkv = ref::random_floats(B * T * ld, 51);
  auto dout = ref::random_floats(B * T * lo, 52);
  Vec qd = ref::to_double(qkv);
  const Vec want = ref::gqa_attention(qd, B, T, NH, NKV, hs);
  auto loss = [&] { return ref::weighted_sum(ref::gqa_attention(qd, B, T, NH, NKV, hs), dout); };
  const Vec num = ref::numeric_grad(qd, loss);
  for (int block : {T, 3}) {
    SCOPED_TRACE(block);
    std::vector<float> out(B * T * lo), att(B * NH * T * T), dqkv(B * T * ld, 9.0f);
    attention_forward(*dev, out.data(), att.data(), qkv.data(), d, block);
    expect_close(out, want, 1e-5, "out");
    attention_backward(*dev, dqkv.data(), dout.data(), qkv.data(), att.data(), d, block);
    EXPECT_LT(ref::scaled_max_error(dqkv, num), kGradTol);
  }
}

INSTANTIATE_TEST_SUITE_P(Heads, GqaAttentionTest,
                         ::testing::Values(GqaCase{4, 4}, GqaCase{4, 2}, GqaCase{6, 2},
                                           GqaCase{4, 1}),
                         [](const auto& info) {
                           return "nh" + std::to_string(info.param.NH) + "_nkv" +
                                  std::to_string(info.param.NKV);
                         });

// GQA against MHA on K/V heads repeated by hand (repeat_kv as a copy): the same outputs, and each
// shared K/V head's gradient the sum of its copies' gradients.
TEST_F(LlamaKernelTest, GqaEqualsMhaOnRepeatedHeads) {
  const int B = 1, T = 6, hs = 4, NH = 6, NKV = 2, G = NH / NKV;
  const AttentionDims g{B, T, NH, NKV, hs}, m{B, T, NH, NH, hs};
  auto qkv = ref::random_floats(B * T * g.qkv_cols(), 61);
  std::vector<float> rep(B * T * m.qkv_cols());
  for (int r = 0; r < B * T; ++r) {
    const float* src = &qkv[r * g.qkv_cols()];
    float* dst = &rep[r * m.qkv_cols()];
    std::memcpy(dst, src, NH * hs * 4);  // q
    for (int h = 0; h < NH; ++h) {
      std::memcpy(dst + NH * hs + h * hs, src + NH * hs + (h / G) * hs, hs * 4);  // k
      std::memcpy(dst + 2 * NH * hs + h * hs, src + (NH + NKV) * hs + (h / G) * hs, hs * 4);
    }
  }
  auto dout = ref::random_floats(B * T * NH * hs, 62);
  std::vector<float> out_g(B * T * NH * hs), out_m(out_g.size()), att_g(B * NH * T * T),
      att_m(att_g.size()), dg(qkv.size()), dm(rep.size());
  attention_forward(*dev, out_g.data(), att_g.data(), qkv.data(), g);
  attention_forward(*dev, out_m.data(), att_m.data(), rep.data(), m);
  for (size_t i = 0; i < out_g.size(); ++i) ASSERT_NEAR(out_g[i], out_m[i], 1e-6) << i;
  attention_backward(*dev, dg.data(), dout.data(), qkv.data(), att_g.data(), g);
  attention_backward(*dev, dm.data(), dout.data(), rep.data(), att_m.data(), m);
  for (int r = 0; r < B * T; ++r) {
    for (int c = 0; c < NH * hs; ++c)
      ASSERT_NEAR(dg[r * g.qkv_cols() + c], dm[r * m.qkv_cols() + c], 1e-6);  // dq
    for (int part = 1; part <= 2; ++part)                                     // dk, dv
      for (int j = 0; j < NKV; ++j)
        for (int e = 0; e < hs; ++e) {
          double sum = 0;
          for (int h = j * G; h < (j + 1) * G; ++h)
            sum += dm[r * m.qkv_cols() + part * NH * hs + h * hs + e];
          ASSERT_NEAR(dg[r * g.qkv_cols() + NH * hs + (part - 1) * NKV * hs + j * hs + e], sum,
                      1e-5);
        }
  }
}

TEST_F(LlamaKernelTest, AttentionRefusesKvHeadsThatDoNotDivide) {
  const AttentionDims d{1, 2, 4, 3, 2};
  std::vector<float> qkv(2 * d.qkv_cols()), out(2 * d.q_cols()), att(4 * 4);
  try {
    attention_forward(*dev, out.data(), att.data(), qkv.data(), d);
    FAIL() << "no throw";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("n_kv_heads 3 does not divide n_head 4"),
              std::string::npos)
        << e.what();
  }
}

// ---- every CPU vector level gives the same bits; NaN is carried --------------------------------

TEST_F(LlamaKernelTest, EveryVectorLevelGivesTheBaselineBits) {
  std::mt19937 rng(71);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  auto randn = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = nd(rng);
    return v;
  };
  const int N = 5, C = 771, hs = 64, n_heads = 2, F = 37;
  auto x = randn(N * C), w = randn(C), dout = randn(N * C), gu = randn(N * 2 * F),
       dsw = randn(N * F), xr = randn(N * 3 * hs);
  std::vector<float> cs(N * hs);
  rope_table(*dev, cs.data(), N, hs, RopeParams{});
  std::vector<std::vector<float>> results;
  for (int l = 0; l <= static_cast<int>(cpu_simd_supported()); ++l) {
    ScopedCpuSimd level{CpuSimd(l)};
    std::vector<float> out(N * C), rstd(N), dx(N * C, 0.0f), dw(C, 0.0f), sw(N * F), dgu(N * 2 * F),
        r = xr;
    rmsnorm_forward(*dev, out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
    rmsnorm_backward(*dev, dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N,
                     C);
    swiglu_forward(*dev, sw.data(), gu.data(), N, F);
    swiglu_backward(*dev, dgu.data(), dsw.data(), gu.data(), N, F);
    rope_forward(*dev, r.data(), cs.data(), 1, N, n_heads, hs, 3 * hs);
    std::vector<float> all;
    for (auto* v : {&out, &rstd, &dx, &dw, &sw, &dgu, &r})
      all.insert(all.end(), v->begin(), v->end());
    results.push_back(all);
  }
  for (size_t l = 1; l < results.size(); ++l)
    EXPECT_EQ(std::memcmp(results[l].data(), results[0].data(), results[0].size() * 4), 0)
        << cpu_simd_name(CpuSimd(l)) << " differs from baseline";
}

TEST_F(LlamaKernelTest, NaNGoesThroughAsTheReferenceDoes) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int N = 3, C = 4;
  std::vector<float> x(N * C, 1.0f), w(C, 1.0f), out(N * C), rstd(N);
  x[C + 2] = nan;  // row 1
  rmsnorm_forward(*dev, out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
  for (int i = 0; i < N * C; ++i) EXPECT_EQ(std::isnan(out[i]), i / C == 1) << i;
  std::vector<float> gu = {1.0f, nan, 2.0f, 3.0f}, sw(2);  // N 1, F 2: gate (1, NaN), up (2, 3)
  swiglu_forward(*dev, sw.data(), gu.data(), 1, 2);
  EXPECT_TRUE(std::isfinite(sw[0]));
  EXPECT_TRUE(std::isnan(sw[1]));
}

// ---- the meta table charges what the CPU loops move --------------------------------------------

TEST(LlamaMetaKernels, ChargeTheirBytes) {
  MemoryTracker tracker(0);
  ClusterSpec spec;
  spec.memory_bandwidth = 1e9;  // 1 byte per ns
  spec.cost.memory_efficiency = 1.0;
  spec.cost.kernel_launch_us = 0;
  VirtualClock clock;
  MetaDevice meta(tracker, spec, clock, GemmMath::fp32);
  auto charged = [&](auto fn) {
    const int64_t t0 = clock.now_ns;
    fn();
    return clock.now_ns - t0;
  };
  const int N = 1000, C = 100, F = 250, T = 10, hs = 8;
  EXPECT_EQ(
      charged([&] { rmsnorm_forward(meta, nullptr, nullptr, nullptr, nullptr, N, C, 1e-5f); }),
      4 * (2 * N * C + C + N));
  EXPECT_EQ(charged([&] { swiglu_forward(meta, nullptr, nullptr, N, F); }), 4 * 3 * N * F);
  EXPECT_EQ(charged([&] { rope_forward(meta, nullptr, nullptr, 2, T, 3, hs, 5 * hs); }),
            4 * (2 * 2 * T * 3 * hs + T * hs));
}
