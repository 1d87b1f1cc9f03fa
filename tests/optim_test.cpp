// core/optim: AdamW and SGD against hand-computed steps (bias correction, decoupled weight decay,
// momentum), state tracking, and restoring state for an exact resume.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/base/cpu_simd.hpp"
#include "core/base/error.hpp"
#include "core/device/device.hpp"
#include "core/memory/tracker.hpp"
#include "core/optim/optimizer.hpp"

using namespace shardlab;

namespace {

struct Fixture {
  MemoryTracker tracker;
  std::unique_ptr<Device> dev = make_cpu_device(tracker);
};

OptimizerConfig adamw_cfg(float lr, float b1, float b2, float eps, float wd) {
  OptimizerConfig c;
  c.kind = OptimizerKind::adamw;
  c.lr = lr;
  c.beta1 = b1;
  c.beta2 = b2;
  c.eps = eps;
  c.weight_decay = wd;
  return c;
}

OptimizerConfig sgd_cfg(float lr, float momentum, float wd) {
  OptimizerConfig c;
  c.kind = OptimizerKind::sgd;
  c.lr = lr;
  c.momentum = momentum;
  c.weight_decay = wd;
  return c;
}

}  // namespace

TEST(AdamW, FirstTwoStepsMatchHandComputation) {
  // p0 = 1, g1 = 0.5, g2 = -0.25, lr 0.1, betas (0.9, 0.99), eps 1e-8, wd 0.1.
  // Step 1: m = 0.05, v = 0.0025; bias-corrected m^ = 0.5, v^ = 0.25, so the step is
  //   lr * (0.5 / (0.5 + eps) + wd * p0) = 0.1 * (1 - 2e-8) + 0.01  ->  p1 = 0.890000002
  // Step 2: m = 0.9*0.05 + 0.1*(-0.25) = 0.02, v = 0.99*0.0025 + 0.01*0.0625 = 0.0031;
  //   m^ = 0.02 / 0.19, v^ = 0.0031 / 0.0199;
  //   p2 = p1 - 0.1 * (m^ / (sqrt(v^) + eps) + 0.1 * p1) = 0.85443006
  Fixture f;
  AdamW opt(*f.dev, adamw_cfg(0.1f, 0.9f, 0.99f, 1e-8f, 0.1f), 1);
  float p = 1.0f, g = 0.5f;
  opt.step(&p, &g, 1);
  EXPECT_EQ(opt.step_count(), 1);
  EXPECT_NEAR(p, 0.890000002, 1e-6);
  EXPECT_NEAR(opt.m()[0], 0.05, 1e-7);
  EXPECT_NEAR(opt.v()[0], 0.0025, 1e-8);
  g = -0.25f;
  opt.step(&p, &g, 1);
  EXPECT_NEAR(p, 0.8544300597, 1e-6);
  EXPECT_NEAR(opt.m()[0], 0.02, 1e-7);
  EXPECT_NEAR(opt.v()[0], 0.0031, 1e-8);
}

TEST(AdamW, BiasCorrectionMakesTheFirstStepLrWhateverTheGradientScale) {
  // With bias correction, step 1 is -lr * g / (|g| + eps), which is -lr * sign(g) up to eps/|g|
  // for any gradient scale. Without it, the step would be lr * (1 - b1) / sqrt(1 - b2) = 3.16 lr
  // at betas (0.9, 0.999).
  Fixture f;
  std::vector<float> p = {0.0f, 0.0f, 0.0f, 0.0f}, g = {1e-3f, -2.0f, 100.0f, -5e4f};
  const double lr = 0.01, eps = 1e-8;
  AdamW opt(*f.dev, adamw_cfg(0.01f, 0.9f, 0.999f, 1e-8f, 0.0f), 4);
  opt.step(p.data(), g.data(), 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(p[i], -lr * g[i] / (std::fabs(g[i]) + eps), 3e-9) << i;  // ~3 float ulps at 0.01
    EXPECT_NEAR(std::fabs(p[i]), lr, 1e-6) << i;
  }
  // A constant gradient keeps the corrected moments at g and g^2: every step is again lr.
  std::vector<float> before = p;
  opt.step(p.data(), g.data(), 4);
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(p[i] - before[i], -lr * g[i] / (std::fabs(g[i]) + eps), 1e-8) << i;
}

TEST(AdamW, WeightDecayIsDecoupledFromTheMoments) {
  // With zero gradients the moments stay exactly 0 and p only decays: p_t = p0 (1 - lr wd)^t.
  // Coupled L2 (wd*p added to g) would fill m and v and move p by about lr per step instead.
  Fixture f;
  std::vector<float> p = {2.0f, -3.0f}, g = {0.0f, 0.0f};
  AdamW opt(*f.dev, adamw_cfg(0.1f, 0.9f, 0.999f, 1e-8f, 0.5f), 2);
  for (int t = 0; t < 3; ++t) opt.step(p.data(), g.data(), 2);
  EXPECT_NEAR(p[0], 2.0 * std::pow(0.95, 3), 1e-6);
  EXPECT_NEAR(p[1], -3.0 * std::pow(0.95, 3), 1e-6);
  EXPECT_EQ(opt.m()[0], 0.0f);
  EXPECT_EQ(opt.v()[1], 0.0f);
}

TEST(AdamW, StateIsTrackedAsOptimizerState) {
  Fixture f;
  {
    AdamW opt(*f.dev, OptimizerConfig{}, 1000);
    EXPECT_EQ(f.tracker.current(MemCategory::optimizer_state), 8000);
    EXPECT_EQ(opt.state_bytes(), 8000);
    auto s = opt.state();
    ASSERT_EQ(s.size(), 2u);
    EXPECT_EQ(s[0].name, "m");
    EXPECT_EQ(s[1].name, "v");
    EXPECT_EQ(s[0].numel, 1000);
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(s[0].data[i], 0.0f);
  }
  EXPECT_EQ(f.tracker.current(MemCategory::optimizer_state), 0);
}

TEST(AdamW, RestoredStateAndStepCountResumeExactly) {
  // What a checkpoint does: copy m, v and the step count into a fresh optimizer.
  Fixture f;
  const int n = 6;
  std::vector<float> p(n), g(n);
  for (int i = 0; i < n; ++i) p[i] = 0.1f * i - 0.2f;
  auto grad = [&](int t) {
    for (int i = 0; i < n; ++i) g[i] = std::sin(1.0f + i + 0.7f * t);
  };
  OptimizerConfig cfg = adamw_cfg(0.05f, 0.8f, 0.9f, 1e-6f, 0.01f);
  AdamW a(*f.dev, cfg, n);
  for (int t = 0; t < 3; ++t) grad(t), a.step(p.data(), g.data(), n);
  AdamW b(*f.dev, cfg, n);
  for (size_t k = 0; k < 2; ++k) f.dev->copy(b.state()[k].data, a.state()[k].data, n * 4);
  b.set_step_count(a.step_count());
  std::vector<float> pa = p, pb = p;
  grad(3);
  a.step(pa.data(), g.data(), n);
  b.step(pb.data(), g.data(), n);
  EXPECT_EQ(pa, pb);
  // Without the step count the bias correction differs, so the check above can fail.
  AdamW c(*f.dev, cfg, n);
  for (size_t k = 0; k < 2; ++k) f.dev->copy(c.state()[k].data, b.state()[k].data, n * 4);
  std::vector<float> pc = p;
  c.step(pc.data(), g.data(), n);
  EXPECT_NE(pc, pa);
}

TEST(AdamW, RejectsWrongSizeAndBadConfig) {
  Fixture f;
  AdamW opt(*f.dev, OptimizerConfig{}, 4);
  float p[8] = {}, g[8] = {};
  EXPECT_THROW(opt.step(p, g, 8), InvalidArgument);
  EXPECT_EQ(opt.step_count(), 0);
  EXPECT_THROW(AdamW(*f.dev, adamw_cfg(0.1f, 1.0f, 0.9f, 1e-8f, 0.0f), 4), InvalidArgument);
  EXPECT_THROW(AdamW(*f.dev, adamw_cfg(-0.1f, 0.9f, 0.9f, 1e-8f, 0.0f), 4), InvalidArgument);
  // eps = inf made every update m / (sqrt(v) + inf) = 0: training silently did nothing.
  EXPECT_THROW(AdamW(*f.dev, adamw_cfg(0.1f, 0.9f, 0.9f, INFINITY, 0.0f), 4), InvalidArgument);
  EXPECT_THROW(parse_optimizer_kind("lion"), InvalidArgument);
  EXPECT_EQ(parse_optimizer_kind("sgd"), OptimizerKind::sgd);
}

TEST(SGD, MomentumStepsMatchHandComputation) {
  // p0 = 1, g1 = 0.5, g2 = -0.25, lr 0.1, momentum 0.9, wd 0.01 (added to the gradient):
  // step 1: d = 0.5 + 0.01 = 0.51, buf = 0.51, p1 = 1 - 0.051 = 0.949
  // step 2: d = -0.25 + 0.00949 = -0.24051, buf = 0.9*0.51 - 0.24051 = 0.21849,
  //         p2 = 0.949 - 0.021849 = 0.927151
  Fixture f;
  SGD opt(*f.dev, sgd_cfg(0.1f, 0.9f, 0.01f), 1);
  EXPECT_EQ(f.tracker.current(MemCategory::optimizer_state), 4);
  float p = 1.0f, g = 0.5f;
  opt.step(&p, &g, 1);
  EXPECT_NEAR(p, 0.949, 1e-6);
  EXPECT_NEAR(opt.momentum_buffer()[0], 0.51, 1e-6);
  g = -0.25f;
  opt.step(&p, &g, 1);
  EXPECT_NEAR(opt.momentum_buffer()[0], 0.21849, 1e-6);
  EXPECT_NEAR(p, 0.927151, 1e-6);
  EXPECT_EQ(opt.step_count(), 2);
}

TEST(SGD, PlainSgdHasNoState) {
  Fixture f;
  auto opt = make_optimizer(*f.dev, sgd_cfg(0.5f, 0.0f, 0.0f), 3);
  EXPECT_EQ(f.tracker.current(MemCategory::optimizer_state), 0);
  EXPECT_TRUE(opt->state().empty());
  std::vector<float> p = {1, 2, 3}, g = {1, -1, 0.5f};
  opt->step(p.data(), g.data(), 3);
  opt->step(p.data(), g.data(), 3);
  EXPECT_EQ(p, (std::vector<float>{0.0f, 3.0f, 2.5f}));  // p - 2 * 0.5 * g, exact in binary
}

// The engine's step (core/fsdp/optim_step.cpp) runs AdamW through step_checked: on the CPU one
// pass over p, g, m, v, compiled at each vector level the CPU runs (core/base/cpu_simd.hpp). At
// every level and length (vector tails included) it must give the bits of the separate checks,
// clipping's scale and step() on the same values.
TEST(AdamW, CheckedStepIsBitIdenticalToTheSeparateSteps) {
  Fixture f;
  const OptimizerConfig cfg = adamw_cfg(3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f);
  for (int level = 0; level <= static_cast<int>(cpu_simd_supported()); ++level) {
    ScopedCpuSimd at(static_cast<CpuSimd>(level));
    SCOPED_TRACE(cpu_simd_name(static_cast<CpuSimd>(level)));
    for (int64_t n : {1, 3, 4, 7, 8, 17, 1029}) {
      for (float scale : {1.0f, 0.37f}) {
        AdamW fused(*f.dev, cfg, n), apart(*f.dev, cfg, n);
        std::vector<float> p1(n), p2(n), g(n), gs(n);
        for (int64_t i = 0; i < n; ++i) p1[i] = p2[i] = std::sin(0.7f * i) * 0.05f;
        for (int step = 1; step <= 3; ++step) {
          for (int64_t i = 0; i < n; ++i) g[i] = std::cos(1.3f * i + step) * 1e-2f * (i % 5 + 1);
          gs = g;
          const Optimizer::Checked c = fused.step_checked(p1.data(), g.data(), n, scale, true);
          EXPECT_FALSE(c.grads_nonfinite);
          EXPECT_FALSE(c.params_nonfinite);
          for (int64_t i = 0; i < n; ++i) gs[i] *= scale == 1.0f ? 1.0f : scale;
          apart.step(p2.data(), gs.data(), n);
          ASSERT_EQ(fused.step_count(), apart.step_count());
          for (int64_t i = 0; i < n; ++i) {
            ASSERT_EQ(p1[i], p2[i])
                << "n " << n << " scale " << scale << " step " << step << " i " << i;
            ASSERT_EQ(fused.m()[i], apart.m()[i]) << "n " << n << " i " << i;
            ASSERT_EQ(fused.v()[i], apart.v()[i]) << "n " << n << " i " << i;
          }
        }
      }
    }
  }
}

TEST(AdamW, CheckedStepNamesANonFiniteGradientOrParameter) {
  Fixture f;
  for (int64_t bad : {0, 5, 8, 16}) {  // in a vector of any width, and in the scalar tail
    const int64_t n = 17;
    AdamW opt(*f.dev, adamw_cfg(1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f), n);
    std::vector<float> p(n, 0.5f), g(n, 0.1f);
    g[bad] = std::nanf("");
    Optimizer::Checked c = opt.step_checked(p.data(), g.data(), n, 1.0f, true);
    EXPECT_TRUE(c.grads_nonfinite) << bad;
    // Not asked to check the gradients (clipping found their norm finite): the parameter it
    // poisoned is still caught.
    AdamW opt2(*f.dev, adamw_cfg(1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f), n);
    std::vector<float> p2(n, 0.5f);
    c = opt2.step_checked(p2.data(), g.data(), n, 1.0f, false);
    EXPECT_FALSE(c.grads_nonfinite) << bad;
    EXPECT_TRUE(c.params_nonfinite) << bad;
    // A finite gradient that an infinite parameter meets.
    AdamW opt3(*f.dev, adamw_cfg(1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f), n);
    std::vector<float> p3(n, 0.5f), g3(n, 0.1f);
    p3[bad] = INFINITY;
    c = opt3.step_checked(p3.data(), g3.data(), n, 1.0f, true);
    EXPECT_FALSE(c.grads_nonfinite) << bad;
    EXPECT_TRUE(c.params_nonfinite) << bad;
  }
}
