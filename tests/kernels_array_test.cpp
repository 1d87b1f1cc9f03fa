// core/kernels: element-wise array kernels (casts, axpy, sum of squares) and the optimizer updates
// against closed forms computed in double here.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/kernels/elementwise.hpp"
#include "core/kernels/optim.hpp"

using namespace shardlab;

namespace {
struct ArrayKernelTest : ::testing::Test {
  MemoryTracker tracker{0};
  std::unique_ptr<Device> dev = make_cpu_device(tracker);
};
}  // namespace

TEST_F(ArrayKernelTest, FillScaleAxpySumSquares) {
  std::vector<float> x(5), y = {1, 2, 3, 4, 5};
  fill_array(*dev, x.data(), 2.0f, 5);
  EXPECT_EQ(x, std::vector<float>(5, 2.0f));
  axpy(*dev, y.data(), -0.5f, x.data(), 5);
  EXPECT_EQ(y, (std::vector<float>{0, 1, 2, 3, 4}));
  scale_array(*dev, y.data(), 3.0f, 5);
  EXPECT_EQ(y, (std::vector<float>{0, 3, 6, 9, 12}));
  EXPECT_DOUBLE_EQ(sum_squares(*dev, y.data(), 5), 9.0 + 36 + 81 + 144);
  // Accumulated in double: 1e6 copies of 1e-4 squared sum to 1e-2 without fp32 drift (a float
  // accumulator is off by ~1e-3 relative here, a double one by ~1e-11).
  std::vector<float> small(1000000, 1e-4f);
  double want = 1e6 * static_cast<double>(1e-4f) * static_cast<double>(1e-4f);
  EXPECT_NEAR(sum_squares(*dev, small.data(), 1000000), want, want * 1e-9);
}

TEST_F(ArrayKernelTest, CastsRoundToNearestEvenAndWidenExactly) {
  std::vector<float> src = {1.0f, 1.00390625f, 1.01171875f, -3.5f, 65520.0f, 1e-8f};
  std::vector<uint16_t> bf(src.size()), hf(src.size());
  cast_from_f32(*dev, bf.data(), DType::bf16, src.data(), 6);
  cast_from_f32(*dev, hf.data(), DType::f16, src.data(), 6);
  for (size_t i = 0; i < src.size(); ++i) {
    EXPECT_EQ(bf[i], f32_to_bf16_bits(src[i])) << i;
    EXPECT_EQ(hf[i], f32_to_f16_bits(src[i])) << i;
  }
  EXPECT_EQ(bf[1], 0x3f80);  // tie to even
  EXPECT_EQ(hf[4], 0x7c00);  // overflow to Inf
  std::vector<float> back(src.size());
  cast_to_f32(*dev, back.data(), bf.data(), DType::bf16, 6);
  for (size_t i = 0; i < src.size(); ++i) EXPECT_EQ(back[i], round_to(DType::bf16, src[i]));
  cast_to_f32(*dev, back.data(), hf.data(), DType::f16, 6);
  for (size_t i = 0; i < src.size(); ++i) EXPECT_EQ(back[i], round_to(DType::f16, src[i]));
  std::vector<float> copy(6);
  cast_from_f32(*dev, copy.data(), DType::f32, src.data(), 6);
  EXPECT_EQ(copy, src);
}

TEST_F(ArrayKernelTest, AdamWMatchesClosedFormOverSteps) {
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  std::vector<float> p = {0.5f, -1.0f, 2.0f}, m(3, 0.0f), v(3, 0.0f);
  std::vector<double> pd(p.begin(), p.end()), md(3, 0.0), vd(3, 0.0);
  const std::vector<std::vector<float>> grads = {{0.1f, -0.2f, 0.0f}, {0.3f, 0.1f, -1.0f}, {-0.2f, 0.0f, 0.5f}};
  for (int t = 1; t <= 3; ++t) {
    const auto& g = grads[t - 1];
    adamw_update(*dev, p.data(), g.data(), m.data(), v.data(), 3, lr, b1, b2, eps, wd, t);
    for (int i = 0; i < 3; ++i) {
      md[i] = b1 * md[i] + (1 - b1) * g[i];
      vd[i] = b2 * vd[i] + (1 - b2) * g[i] * g[i];
      double mh = md[i] / (1 - std::pow(double(b1), t)), vh = vd[i] / (1 - std::pow(double(b2), t));
      pd[i] -= lr * (mh / (std::sqrt(vh) + eps) + wd * pd[i]);
    }
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(p[i], pd[i], 1e-6) << "step " << t << " elem " << i;
  }
  // Step 1 with bias correction moves each weight by lr * sign(g) (plus decay): Adam's hallmark.
  std::vector<float> q = {1.0f}, mq = {0}, vq = {0}, gq = {1e-3f};
  adamw_update(*dev, q.data(), gq.data(), mq.data(), vq.data(), 1, 0.1f, b1, b2, 0.0f, 0.0f, 1);
  EXPECT_NEAR(q[0], 0.9f, 1e-6);
  EXPECT_THROW(adamw_update(*dev, q.data(), gq.data(), mq.data(), vq.data(), 1, 0.1f, b1, b2, eps, 0, 0),
               InvalidArgument);
}

TEST_F(ArrayKernelTest, SgdMomentumMatchesClosedForm) {
  const float lr = 0.1f, mom = 0.9f, wd = 0.01f;
  std::vector<float> p = {1.0f, -2.0f}, buf(2, 0.0f);
  std::vector<double> pd = {1.0, -2.0}, bd(2, 0.0);
  const std::vector<float> g = {0.5f, 0.25f};
  for (int step = 0; step < 3; ++step) {
    sgd_update(*dev, p.data(), g.data(), buf.data(), 2, lr, mom, wd);
    for (int i = 0; i < 2; ++i) {
      double d = g[i] + wd * pd[i];
      bd[i] = mom * bd[i] + d;
      pd[i] -= lr * bd[i];
      EXPECT_NEAR(p[i], pd[i], 1e-6);
    }
  }
  std::vector<float> q = {1.0f};
  sgd_update(*dev, q.data(), g.data(), nullptr, 1, lr, 0.0f, 0.0f);
  EXPECT_FLOAT_EQ(q[0], 0.95f);
  EXPECT_THROW(sgd_update(*dev, q.data(), g.data(), nullptr, 1, lr, 0.9f, 0.0f), InvalidArgument);
}
