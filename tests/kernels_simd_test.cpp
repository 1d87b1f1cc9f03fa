// core/base/cpu_simd.hpp: the CPU loops of GELU, LayerNorm, the attention softmax and the
// residual family give the same bits at every vector level this CPU runs (baseline SSE2, AVX2,
// AVX-512), agree with the sequential row math of the kernel headers to rounding, and GELU's tanh
// against libm.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/base/cpu_simd.hpp"
#include "core/kernels/attention.hpp"
#include "core/kernels/gelu.hpp"
#include "core/kernels/layernorm.hpp"
#include "core/kernels/residual.hpp"

using namespace shardlab;

namespace {

struct SimdKernelTest : ::testing::Test {
  MemoryTracker tracker{0};
  std::unique_ptr<Device> dev = make_cpu_device(tracker);
  std::mt19937 rng{19};

  std::vector<float> randn(size_t n, float scale = 1.0f) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
  }
};

std::vector<CpuSimd> levels() {
  std::vector<CpuSimd> out;
  for (int l = 0; l <= static_cast<int>(cpu_simd_supported()); ++l) out.push_back(CpuSimd(l));
  return out;
}

// Every output of every kernel, one vector per level, compared bit for bit with the baseline's.
void expect_same_bits(const std::vector<std::vector<float>>& per_level, const char* what) {
  for (size_t l = 1; l < per_level.size(); ++l) {
    ASSERT_EQ(per_level[l].size(), per_level[0].size());
    EXPECT_EQ(std::memcmp(per_level[l].data(), per_level[0].data(), per_level[0].size() * 4), 0)
        << what << ": " << cpu_simd_name(CpuSimd(l)) << " differs from baseline";
  }
}

}  // namespace

TEST_F(SimdKernelTest, EveryLevelGivesTheBaselineBits) {
  std::printf("CPU vector level: %s\n", cpu_simd_name(cpu_simd_supported()));
  // Sizes that are not multiples of the 16 lanes or of any vector width, and short rows.
  const int N = 7;
  for (int C : {1, 5, 16, 17, 100, 256, 771}) {
    auto x = randn(static_cast<size_t>(N) * C, 3.0f);
    x[3] += 40.0f;  // a row with |mean| >> std
    auto w = randn(C), b = randn(C), dout = randn(static_cast<size_t>(N) * C);
    std::vector<std::vector<float>> ln_out, ln_grads, gelu_out;
    for (CpuSimd level : levels()) {
      ScopedCpuSimd at(level);
      std::vector<float> out(x.size()), mean(N), rstd(N);
      layernorm_forward(*dev, out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N,
                        C);
      out.insert(out.end(), mean.begin(), mean.end());
      out.insert(out.end(), rstd.begin(), rstd.end());
      ln_out.push_back(out);
      std::vector<float> dx(x.size(), 0.5f), dw(C, 0.25f), db(C, -1.0f);
      layernorm_backward(*dev, dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                         mean.data(), rstd.data(), N, C);
      dx.insert(dx.end(), dw.begin(), dw.end());
      dx.insert(dx.end(), db.begin(), db.end());
      ln_grads.push_back(dx);
      std::vector<float> g(x.size()), dg = dout;
      gelu_forward(*dev, g.data(), x.data(), static_cast<int64_t>(x.size()));
      gelu_backward(*dev, dg.data(), x.data(), dg.data(), static_cast<int64_t>(x.size()));
      g.insert(g.end(), dg.begin(), dg.end());
      gelu_out.push_back(g);
    }
    expect_same_bits(ln_out, "layernorm_forward");
    expect_same_bits(ln_grads, "layernorm_backward");
    expect_same_bits(gelu_out, "gelu");
  }
  for (int T : {1, 3, 16, 33, 128}) {
    const int BH = 3;
    auto s = randn(static_cast<size_t>(BH) * T * T, 4.0f), datt = randn(s.size());
    std::vector<std::vector<float>> probs, grads;
    for (CpuSimd level : levels()) {
      ScopedCpuSimd at(level);
      std::vector<float> p = s, d(s.size());
      attention_softmax_forward(*dev, p.data(), BH, T);
      attention_softmax_backward(*dev, d.data(), p.data(), datt.data(), BH, T);
      probs.push_back(p);
      grads.push_back(d);
    }
    expect_same_bits(probs, "softmax forward");
    expect_same_bits(grads, "softmax backward");
  }
}

// The lane sums change the order of the additions, not the math: the kernels agree with the
// headers' sequential row functions (what a GPU thread runs) to a few ulp of the row's scale.
TEST_F(SimdKernelTest, AgreeWithTheSequentialRowMath) {
  const int N = 5, C = 771;
  auto x = randn(static_cast<size_t>(N) * C, 2.0f), w = randn(C), b = randn(C);
  auto dout = randn(x.size());
  std::vector<float> out(x.size()), mean(N), rstd(N), dx(x.size(), 0.0f), dw(C, 0.0f), db(C, 0.0f);
  layernorm_forward(*dev, out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  layernorm_backward(*dev, dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                     mean.data(), rstd.data(), N, C);
  for (int i = 0; i < N; ++i) {
    std::vector<float> o(C), g(C, 0.0f);
    float m, s;
    layernorm_forward_row(o.data(), &m, &s, &x[i * C], w.data(), b.data(), C);
    EXPECT_NEAR(mean[i], m, 1e-6f);
    EXPECT_NEAR(rstd[i], s, 1e-6f * s);
    layernorm_backward_row(g.data(), &dout[i * C], &x[i * C], w.data(), m, s, C);
    for (int c = 0; c < C; ++c) {
      ASSERT_NEAR(out[i * C + c], o[c], 1e-5f) << "row " << i << " column " << c;
      ASSERT_NEAR(dx[i * C + c], g[c], 1e-5f) << "row " << i << " column " << c;
    }
  }
  const int T = 100;
  auto sc = randn(static_cast<size_t>(T) * T, 4.0f), datt = randn(sc.size());
  std::vector<float> p = sc, d(sc.size());
  attention_softmax_forward(*dev, p.data(), 1, T);
  attention_softmax_backward(*dev, d.data(), p.data(), datt.data(), 1, T);
  for (int t = 0; t < T; ++t) {
    std::vector<float> row(sc.begin() + t * T, sc.begin() + (t + 1) * T), drow(T);
    attention_softmax_row(row.data(), t, T);
    attention_softmax_backward_row(drow.data(), &p[t * T], &datt[t * T], t, T);
    for (int j = 0; j < T; ++j) {
      ASSERT_NEAR(p[t * T + j], row[j], 1e-6f) << "row " << t << " column " << j;
      ASSERT_NEAR(d[t * T + j], drow[j], 2e-6f) << "row " << t << " column " << j;
    }
  }
}

// GELU's tanh (fastmath.hpp's tanh_clamped, exp-based, in SIMD lanes) against libm's, and the
// kernels against GELU and its derivative computed in double with std::tanh.
TEST_F(SimdKernelTest, GeluAndItsTanhAgainstLibm) {
  double worst_tanh = 0;
  for (int i = 0; i <= 400000; ++i) {
    const float u = -10.0f + 20.0f * static_cast<float>(i) / 400000.0f;
    worst_tanh = std::max(worst_tanh, std::abs(double(tanh_clamped(u)) - std::tanh(double(u))));
  }
  std::printf("max |tanh_clamped - std::tanh| on [-10, 10]: %.3g\n", worst_tanh);
  EXPECT_LT(worst_tanh, 1.5e-7);  // measured 8.9e-8 (about one float ulp at 1)

  const int64_t n = 200001;
  std::vector<float> x(n), y(n), dy(n, 1.0f);
  for (int64_t i = 0; i < n; ++i) x[i] = -8.0f + 16.0f * static_cast<float>(i) / (n - 1);
  gelu_forward(*dev, y.data(), x.data(), n);
  gelu_backward(*dev, dy.data(), x.data(), dy.data(), n);
  double worst_f = 0, worst_b = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i], u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
    const double th = std::tanh(u);
    const double f = 0.5 * v * (1 + th);
    const double g =
        0.5 * (1 + th) + 0.5 * v * (1 - th * th) * 0.7978845608028654 * (1 + 3 * 0.044715 * v * v);
    worst_f = std::max(worst_f, std::abs(y[i] - f));
    worst_b = std::max(worst_b, std::abs(dy[i] - g));
  }
  std::printf("max abs error on [-8, 8]: gelu %.3g, gelu' %.3g\n", worst_f, worst_b);
  EXPECT_LT(worst_f, 1e-6);  // measured 5.2e-7: x times tanh's error, plus float rounding
  EXPECT_LT(worst_b, 2e-6);  // measured 1.0e-6
}

TEST(CpuSimd, ScopedLevelRestoresAndRefusesWhatTheCpuLacks) {
  const CpuSimd before = cpu_simd();
  {
    ScopedCpuSimd at(CpuSimd::baseline);
    EXPECT_EQ(cpu_simd(), CpuSimd::baseline);
  }
  EXPECT_EQ(cpu_simd(), before);
  if (cpu_simd_supported() != CpuSimd::avx512) {
    EXPECT_THROW(ScopedCpuSimd(CpuSimd::avx512), InvalidArgument);
  }
}

// The residual family at every level: the residual add, the bias broadcast (written and added)
// and the bias gradient's row sums give the baseline's bits.
TEST_F(SimdKernelTest, ResidualAndBiasKernelsGiveTheBaselineBits) {
  const int N = 7;
  for (int OC : {1, 5, 16, 17, 100, 771}) {
    const size_t n = static_cast<size_t>(N) * OC;
    auto a = randn(n, 3.0f), b = randn(n), bias = randn(OC), dout = randn(n);
    std::vector<std::vector<float>> outs;
    for (CpuSimd level : levels()) {
      ScopedCpuSimd at(level);
      std::vector<float> sum(n), set(n, 7.0f), added = a, dbias(OC, 0.5f);
      residual_forward(*dev, sum.data(), a.data(), b.data(), static_cast<int64_t>(n));
      bias_broadcast(*dev, set.data(), bias.data(), N, OC, false);
      bias_broadcast(*dev, added.data(), bias.data(), N, OC, true);
      bias_backward(*dev, dbias.data(), dout.data(), N, OC);
      for (const auto* v : {&set, &added, &dbias}) sum.insert(sum.end(), v->begin(), v->end());
      outs.push_back(sum);
    }
    expect_same_bits(outs, "residual, bias");
    // And the bias gradient agrees with the GPU's column walk (which adds the sum at the end).
    std::vector<float> dbias(OC, 0.5f), col(OC, 0.5f);
    bias_backward(*dev, dbias.data(), dout.data(), N, OC);
    for (int o = 0; o < OC; ++o) bias_grad_col(col.data(), dout.data(), N, OC, o);
    for (int o = 0; o < OC; ++o) EXPECT_NEAR(dbias[o], col[o], 1e-5f) << "column " << o;
  }
}
