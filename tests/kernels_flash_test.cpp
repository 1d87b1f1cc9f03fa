// core/kernels/flash_attention: flash attention against naive attention (attention.hpp) on every
// shape class (T of one position, below, at and past the tiles, several head counts, grouped
// query heads), its backward against central differences of the fp64 reference, 16-bit inputs
// against fp32 on the same values, its memory (what it saves and its scratch, O(T)), the CUDA
// kernels' row arithmetic run on the host, and the meta device's charge.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/base/error.hpp"
#include "core/device/device_model.hpp"
#include "core/device/meta_device.hpp"
#include "core/kernels/attention.hpp"
#include "core/kernels/flash_attention.hpp"
#include "tests/model_reference.hpp"

using namespace shardlab;
using ref::Vec;

namespace {

struct FlashTest : ::testing::Test {
  MemoryTracker tracker{0};
  std::unique_ptr<Device> dev = make_cpu_device(tracker);
};

// Separate q (B, T, NH hs), k and v (B, T, NKV hs), and their MHA expansion as naive attention's
// packed qkv (B, T, 3 NH hs): kv head g copied to query heads g G .. g G + G - 1.
struct Inputs {
  FlashShape s;
  std::vector<float> q, k, v, qkv;
};

Inputs make_inputs(int B, int T, int NH, int NKV, int hs, uint32_t seed, float spread = 1.0f) {
  Inputs in;
  in.s = FlashShape{B, T, NH, NKV, hs};
  const int64_t rows = static_cast<int64_t>(B) * T;
  in.q = ref::random_floats(rows * NH * hs, seed, spread);
  in.k = ref::random_floats(rows * NKV * hs, seed + 1, spread);
  in.v = ref::random_floats(rows * NKV * hs, seed + 2);
  const int C = NH * hs, G = NH / NKV;
  in.qkv.resize(rows * 3 * C);
  for (int64_t r = 0; r < rows; ++r)
    for (int h = 0; h < NH; ++h)
      for (int d = 0; d < hs; ++d) {
        const int64_t kv = (r * NKV + h / G) * hs + d;
        in.qkv[r * 3 * C + h * hs + d] = in.q[(r * NH + h) * hs + d];
        in.qkv[r * 3 * C + C + h * hs + d] = in.k[kv];
        in.qkv[r * 3 * C + 2 * C + h * hs + d] = in.v[kv];
      }
  return in;
}

struct FlashResult {
  std::vector<float> out, lse, dq, dk, dv;
};

FlashResult run_flash(Device& dev, const Inputs& in, const std::vector<float>& dout) {
  const FlashShape& s = in.s;
  const int64_t rows = static_cast<int64_t>(s.B) * s.T;
  const int64_t qc = static_cast<int64_t>(s.NH) * s.hs, kc = static_cast<int64_t>(s.NKV) * s.hs;
  FlashResult r;
  r.out.assign(rows * qc, 7.0f);
  r.lse.assign(static_cast<size_t>(s.B) * s.NH * s.T, 7.0f);
  flash_attention_forward(dev, s, {r.out.data(), qc}, r.lse.data(), {in.q.data(), qc},
                          {in.k.data(), kc}, {in.v.data(), kc});
  r.dq.assign(rows * qc, 7.0f);
  r.dk.assign(rows * kc, 7.0f);
  r.dv.assign(rows * kc, 7.0f);
  flash_attention_backward(dev, s, {r.dq.data(), qc}, {r.dk.data(), kc}, {r.dv.data(), kc},
                           {dout.data(), qc}, {in.q.data(), qc}, {in.k.data(), kc},
                           {in.v.data(), kc}, {r.out.data(), qc}, r.lse.data());
  return r;
}

// Naive attention on the MHA expansion, its gradients summed back over each kv head's group.
FlashResult run_naive(Device& dev, const Inputs& in, const std::vector<float>& dout) {
  const FlashShape& s = in.s;
  const int C = s.NH * s.hs, G = s.group();
  const int64_t rows = static_cast<int64_t>(s.B) * s.T;
  std::vector<float> att(static_cast<size_t>(s.B) * s.NH * s.T * s.T), dqkv(rows * 3 * C);
  FlashResult r;
  r.out.resize(rows * C);
  attention_forward(dev, r.out.data(), att.data(), in.qkv.data(), s.B, s.T, C, s.NH);
  attention_backward(dev, dqkv.data(), dout.data(), in.qkv.data(), att.data(), s.B, s.T, C, s.NH);
  r.dq.resize(rows * C);
  r.dk.assign(rows * s.NKV * s.hs, 0.0f);
  r.dv.assign(rows * s.NKV * s.hs, 0.0f);
  for (int64_t t = 0; t < rows; ++t)
    for (int h = 0; h < s.NH; ++h)
      for (int d = 0; d < s.hs; ++d) {
        const int64_t kv = (t * s.NKV + h / G) * s.hs + d;
        r.dq[t * C + h * s.hs + d] = dqkv[t * 3 * C + h * s.hs + d];
        r.dk[kv] += dqkv[t * 3 * C + C + h * s.hs + d];
        r.dv[kv] += dqkv[t * 3 * C + 2 * C + h * s.hs + d];
      }
  // lse from the probabilities' own definition is not what naive keeps; the fp64 one:
  r.lse.resize(static_cast<size_t>(s.B) * s.NH * s.T);
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.hs));
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int t = 0; t < s.T; ++t) {
        std::vector<double> sc(t + 1);
        double mx = -1e300;
        for (int j = 0; j <= t; ++j) {
          double dot = 0;
          for (int d = 0; d < s.hs; ++d)
            dot += static_cast<double>(
                       in.qkv[(static_cast<int64_t>(b) * s.T + t) * 3 * C + h * s.hs + d]) *
                   in.qkv[(static_cast<int64_t>(b) * s.T + j) * 3 * C + C + h * s.hs + d];
          sc[j] = dot * scale;
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (double x : sc) sum += std::exp(x - mx);
        r.lse[(static_cast<size_t>(b) * s.NH + h) * s.T + t] =
            static_cast<float>(mx + std::log(sum));
      }
  return r;
}

// max |a - b| / max |b| over a tensor: fp32 rounding of these sums stays near 1e-7.
double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num = std::max(num, std::abs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::abs(static_cast<double>(b[i])));
  }
  return den == 0 ? num : num / den;
}

constexpr double kRounding = 2e-6;

}  // namespace

// Every shape class: T = 1; T below, at and one past the query tile (64) and the key tile (128);
// T not a multiple of either; one, two and three heads; grouped and multi-query heads.
TEST_F(FlashTest, EqualsNaiveToFp32RoundingOnEveryShape) {
  struct Shape {
    int B, T, NH, NKV, hs;
  };
  const Shape shapes[] = {{1, 1, 1, 1, 8},    {2, 5, 2, 2, 8},   {1, 63, 3, 3, 16},
                          {1, 64, 2, 2, 8},   {2, 65, 1, 1, 16}, {1, 129, 2, 2, 8},
                          {1, 200, 3, 3, 32}, {2, 77, 4, 2, 16}, {1, 130, 4, 1, 8},
                          {1, 1, 6, 2, 8}};
  uint32_t seed = 100;
  for (const Shape& sh : shapes) {
    SCOPED_TRACE(::testing::Message() << "B " << sh.B << " T " << sh.T << " NH " << sh.NH << " NKV "
                                      << sh.NKV << " hs " << sh.hs);
    const Inputs in = make_inputs(sh.B, sh.T, sh.NH, sh.NKV, sh.hs, seed += 10, 2.0f);
    const auto dout = ref::random_floats(in.q.size(), seed + 5);
    const FlashResult f = run_flash(*dev, in, dout), n = run_naive(*dev, in, dout);
    EXPECT_LT(rel_error(f.out, n.out), kRounding) << "out";
    EXPECT_LT(rel_error(f.lse, n.lse), kRounding) << "lse";
    EXPECT_LT(rel_error(f.dq, n.dq), kRounding) << "dq";
    EXPECT_LT(rel_error(f.dk, n.dk), kRounding) << "dk";
    EXPECT_LT(rel_error(f.dv, n.dv), kRounding) << "dv";
  }
}

// The backward against central differences of the fp64 reference (tests/model_reference.hpp's
// attention on the packed layout), for the q, k and v of a grouped-query shape.
TEST_F(FlashTest, BackwardMatchesFiniteDifferences) {
  const int B = 2, T = 7, NH = 4, NKV = 2, hs = 4, C = NH * hs;
  const Inputs in = make_inputs(B, T, NH, NKV, hs, 31);
  const auto dout = ref::random_floats(in.q.size(), 32);
  const FlashResult f = run_flash(*dev, in, dout);
  // The reference sees the packed MHA layout; a kv element moves every copy of it at once.
  Vec qd = ref::to_double(in.q), kd = ref::to_double(in.k), vd = ref::to_double(in.v);
  auto loss = [&] {
    Vec qkv(static_cast<size_t>(B) * T * 3 * C);
    for (int t = 0; t < B * T; ++t)
      for (int h = 0; h < NH; ++h)
        for (int d = 0; d < hs; ++d) {
          const size_t kv = (static_cast<size_t>(t) * NKV + h / (NH / NKV)) * hs + d;
          qkv[static_cast<size_t>(t) * 3 * C + h * hs + d] =
              qd[(static_cast<size_t>(t) * NH + h) * hs + d];
          qkv[static_cast<size_t>(t) * 3 * C + C + h * hs + d] = kd[kv];
          qkv[static_cast<size_t>(t) * 3 * C + 2 * C + h * hs + d] = vd[kv];
        }
    return ref::weighted_sum(ref::attention(qkv, B, T, C, NH), dout);
  };
  EXPECT_LT(ref::scaled_max_error(f.dq, ref::numeric_grad(qd, loss)), 1e-4);
  EXPECT_LT(ref::scaled_max_error(f.dk, ref::numeric_grad(kd, loss)), 1e-4);
  EXPECT_LT(ref::scaled_max_error(f.dv, ref::numeric_grad(vd, loss)), 1e-4);
}

// GPT-2's packed qkv as three views (ld 3C) and dqkv likewise: no copies, the same numbers.
TEST_F(FlashTest, PackedQkvViewsGiveTheSeparateTensorsResult) {
  const int B = 2, T = 70, NH = 3, hs = 8, C = NH * hs;
  const Inputs in = make_inputs(B, T, NH, NH, hs, 41);
  const auto dout = ref::random_floats(in.q.size(), 42);
  const FlashResult sep = run_flash(*dev, in, dout);
  const FlashShape s{B, T, NH, NH, hs};
  std::vector<float> out(B * T * C), lse(B * NH * T), dqkv(B * T * 3 * C, 5.0f);
  const float* qkv = in.qkv.data();
  flash_attention_forward(*dev, s, {out.data(), C}, lse.data(), {qkv, 3 * C}, {qkv + C, 3 * C},
                          {qkv + 2 * C, 3 * C});
  flash_attention_backward(*dev, s, {dqkv.data(), 3 * C}, {dqkv.data() + C, 3 * C},
                           {dqkv.data() + 2 * C, 3 * C}, {dout.data(), C}, {qkv, 3 * C},
                           {qkv + C, 3 * C}, {qkv + 2 * C, 3 * C}, {out.data(), C}, lse.data());
  EXPECT_EQ(out, sep.out);
  EXPECT_EQ(lse, sep.lse);
  for (int t = 0; t < B * T; ++t)
    for (int c = 0; c < C; ++c) {
      ASSERT_EQ(dqkv[t * 3 * C + c], sep.dq[t * C + c]);
      ASSERT_EQ(dqkv[t * 3 * C + C + c], sep.dk[t * C + c]);
      ASSERT_EQ(dqkv[t * 3 * C + 2 * C + c], sep.dv[t * C + c]);
    }
}

// 16-bit inputs are widened exactly and every sum runs in fp32, so a bf16 (or f16) call gives
// exactly the fp32 call's results on the same values, rounded once to the dtype.
TEST_F(FlashTest, SixteenBitInputsAreFp32MathRoundedOnce) {
  const int B = 1, T = 150, NH = 4, NKV = 2, hs = 16;
  for (DType t : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(t));
    Inputs in = make_inputs(B, T, NH, NKV, hs, 51);
    auto dout = ref::random_floats(in.q.size(), 52);
    auto to16 = [t](std::vector<float>& v) {
      std::vector<uint16_t> bits(v.size());
      for (size_t i = 0; i < v.size(); ++i) {
        store_from_f32(bits.data(), i, t, v[i]);
        v[i] = load_as_f32(bits.data(), i, t);  // v keeps the values the bits stand for
      }
      return bits;
    };
    const auto q16 = to16(in.q), k16 = to16(in.k), v16 = to16(in.v), do16 = to16(dout);
    const int qc = NH * hs, kc = NKV * hs;
    FlashShape s{B, T, NH, NKV, hs, t};
    std::vector<uint16_t> out16(in.q.size()), dq16(in.q.size()), dk16(in.k.size()),
        dv16(in.k.size());
    std::vector<float> lse(B * NH * T);
    flash_attention_forward(*dev, s, {out16.data(), qc}, lse.data(), {q16.data(), qc},
                            {k16.data(), kc}, {v16.data(), kc});
    flash_attention_backward(*dev, s, {dq16.data(), qc}, {dk16.data(), kc}, {dv16.data(), kc},
                             {do16.data(), qc}, {q16.data(), qc}, {k16.data(), kc},
                             {v16.data(), kc}, {out16.data(), qc}, lse.data());
    // fp32 on the same values: forward as is; backward with the output the 16-bit call saved.
    FlashShape s32 = s;
    s32.dtype = DType::f32;
    std::vector<float> out(in.q.size()), lse32(lse.size());
    flash_attention_forward(*dev, s32, {out.data(), qc}, lse32.data(), {in.q.data(), qc},
                            {in.k.data(), kc}, {in.v.data(), kc});
    EXPECT_EQ(lse32, lse);
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_EQ(out16[i], t == DType::bf16 ? f32_to_bf16_bits(out[i]) : f32_to_f16_bits(out[i]))
          << i;
      out[i] = load_as_f32(out16.data(), i, t);
    }
    std::vector<float> dq(in.q.size()), dk(in.k.size()), dv(in.k.size());
    flash_attention_backward(*dev, s32, {dq.data(), qc}, {dk.data(), kc}, {dv.data(), kc},
                             {dout.data(), qc}, {in.q.data(), qc}, {in.k.data(), kc},
                             {in.v.data(), kc}, {out.data(), qc}, lse.data());
    auto round = [t](float x) {
      return t == DType::bf16 ? f32_to_bf16_bits(x) : f32_to_f16_bits(x);
    };
    for (size_t i = 0; i < dq.size(); ++i) ASSERT_EQ(dq16[i], round(dq[i])) << "dq " << i;
    for (size_t i = 0; i < dk.size(); ++i) {
      ASSERT_EQ(dk16[i], round(dk[i])) << "dk " << i;
      ASSERT_EQ(dv16[i], round(dv[i])) << "dv " << i;
    }
  }
}

// What flash attention holds: it saves one fp32 logsumexp per row (naive: the T x T
// probabilities), and its scratch is O(1) in T forward and O(T) backward, all of it through the
// tracker (the peak of one call is its workspace, exactly the formula).
TEST_F(FlashTest, SavesAndHoldsOrderTBytes) {
  FlashShape s{2, 1024, 12, 12, 64};
  EXPECT_EQ(flash_attention_saved_bytes(s), 4LL * 2 * 12 * 1024);
  auto at_T = [&](int T, bool backward) {
    FlashShape x = s;
    x.T = T;
    return flash_attention_workspace_bytes(x, backward);
  };
  EXPECT_EQ(at_T(512, false), at_T(2048, false));  // forward: the tiles only
  // backward: affine in T (the tiles plus D and dQ per position), not quadratic
  EXPECT_EQ(at_T(4096, true) - at_T(1024, true), 3 * (at_T(2048, true) - at_T(1024, true)));
  EXPECT_EQ(at_T(2048, true) - at_T(1024, true), 4LL * 1024 * (2 * 12 + 64));
  // Against the naive forward's saved probabilities at T = 1024: 4 B NH T^2, 1024x the lse.
  EXPECT_EQ(4LL * 2 * 12 * 1024 * 1024 / flash_attention_saved_bytes(s), 1024);

  // A real call takes exactly the formula's workspace, and nothing else.
  const Inputs in = make_inputs(1, 300, 2, 1, 16, 61);
  const auto dout = ref::random_floats(in.q.size(), 62);
  ASSERT_EQ(tracker.peak_total(), 0);
  run_flash(*dev, in, dout);
  EXPECT_EQ(tracker.total(), 0);
  EXPECT_EQ(tracker.peak_total(), flash_attention_workspace_bytes(in.s, true));
  EXPECT_GT(flash_attention_workspace_bytes(in.s, true),
            flash_attention_workspace_bytes(in.s, false));
}

// The CUDA kernels' arithmetic (flash_forward_row_tile, flash_backward_pair: one thread per row,
// kTile = 16 rows of the other side at a time) run on the host in the kernels' loop order gives
// the CPU implementation's results to fp32 rounding.
TEST_F(FlashTest, CudaRowArithmeticMatchesOnTheHost) {
  const int B = 1, T = 37, NH = 4, NKV = 2, hs = 8, G = NH / NKV, kTile = 16;
  const Inputs in = make_inputs(B, T, NH, NKV, hs, 71, 2.0f);
  const auto dout = ref::random_floats(in.q.size(), 72);
  const FlashResult cpu = run_flash(*dev, in, dout);
  const float scale = in.s.score_scale();
  const int qc = NH * hs, kc = NKV * hs;
  std::vector<float> out(in.q.size()), lse(NH * T), D(NH * T), dq(in.q.size()), dk(in.k.size()),
      dv(in.k.size());
  for (int h = 0; h < NH; ++h)
    for (int t = 0; t < T; ++t) {
      std::vector<float> o(hs, 0.0f), sc(kTile);
      float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
      for (int c0 = 0; c0 <= t; c0 += kTile) {
        const int n = std::min(kTile, t - c0 + 1);
        flash_forward_row_tile(o.data(), &m, &l, sc.data(), &in.q[t * qc + h * hs],
                               &in.k[c0 * kc + h / G * hs], &in.v[c0 * kc + h / G * hs], kc, n, hs,
                               scale);
      }
      lse[h * T + t] = flash_forward_row_finish(o.data(), m, l, hs);
      for (int d = 0; d < hs; ++d) out[t * qc + h * hs + d] = o[d];
      float acc = 0.0f;
      for (int d = 0; d < hs; ++d) acc += dout[t * qc + h * hs + d] * o[d];
      D[h * T + t] = acc;
    }
  EXPECT_LT(rel_error(out, cpu.out), kRounding);
  EXPECT_LT(rel_error(lse, cpu.lse), kRounding);
  for (int g = 0; g < NKV; ++g)
    for (int j = 0; j < T; ++j)
      for (int h = g * G; h < g * G + G; ++h)
        for (int t = j; t < T; ++t)
          flash_backward_pair(nullptr, &dk[j * kc + g * hs], &dv[j * kc + g * hs],
                              &in.q[t * qc + h * hs], &in.k[j * kc + g * hs],
                              &in.v[j * kc + g * hs], &dout[t * qc + h * hs], lse[h * T + t],
                              D[h * T + t], hs, scale);
  for (int h = 0; h < NH; ++h)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c <= t; ++c)
        flash_backward_pair(&dq[t * qc + h * hs], nullptr, nullptr, &in.q[t * qc + h * hs],
                            &in.k[c * kc + h / G * hs], &in.v[c * kc + h / G * hs],
                            &dout[t * qc + h * hs], lse[h * T + t], D[h * T + t], hs, scale);
  EXPECT_LT(rel_error(dq, cpu.dq), 1e-5);
  EXPECT_LT(rel_error(dk, cpu.dk), 1e-5);
  EXPECT_LT(rel_error(dv, cpu.dv), 1e-5);
}

TEST_F(FlashTest, NanInOneQueryRowStaysInItsRows) {
  Inputs in = make_inputs(1, 20, 1, 1, 8, 81);
  in.q[5 * 8 + 3] = std::numeric_limits<float>::quiet_NaN();  // query t = 5
  const auto dout = ref::random_floats(in.q.size(), 82);
  const FlashResult f = run_flash(*dev, in, dout);
  for (int t = 0; t < 20; ++t) {
    EXPECT_EQ(std::isnan(f.out[t * 8]), t == 5) << t;
    EXPECT_EQ(std::isnan(f.lse[t]), t == 5) << t;
  }
}

TEST_F(FlashTest, RefusesShapesNoKernelRuns) {
  EXPECT_THROW(check_flash_shape(FlashShape{1, 8, 6, 4, 8}),
               InvalidArgument);  // 4 does not divide 6
  EXPECT_THROW(check_flash_shape(FlashShape{1, 0, 2, 2, 8}), InvalidArgument);
  EXPECT_THROW(check_flash_shape(FlashShape{1, 8, 2, 2, kFlashMaxHeadSize + 1}), InvalidArgument);
  std::vector<float> x(64), lse(8);
  EXPECT_THROW(flash_attention_forward(*dev, FlashShape{1, 4, 2, 2, 8}, {x.data(), 8}, lse.data(),
                                       {x.data(), 16}, {x.data(), 16}, {x.data(), 16}),
               InvalidArgument);  // out's rows are narrower than its 2 heads of 8
}

// The meta device charges the fused kernel's FLOPs at its inputs' math, or its bytes at the
// memory bandwidth, whichever is longer, and counts the FLOPs with the GEMMs'.
TEST(FlashMeta, ChargesFlopsAtTheInputsMathAndItsBytes) {
  const ClusterSpec spec = load_cluster_spec("h100-sxm");
  MemoryTracker tracker(0);
  VirtualClock clock;
  MetaDevice dev(tracker, spec, clock, GemmMath::fp32);
  const FlashShape s{8, 1024, 12, 12, 64, DType::bf16};
  const double eff = gemm_efficiency(spec.cost, 1024, 1024, 64);
  // Meta addresses stand for every tensor (nothing is read or written).
  Buffer any = dev.alloc(256, MemCategory::activations);
  void* p = any.data();
  float* lse = any.as<float>();
  flash_attention_forward(dev, s, {p, 768}, lse, {p, 768}, {p, 768}, {p, 768});
  const int64_t fwd = clock.now_ns;
  EXPECT_EQ(fwd, fused_ns(spec, GemmMath::bf16, flash_attention_flops(s, false), eff,
                          flash_attention_bytes(s, false)));
  EXPECT_DOUBLE_EQ(flash_attention_flops(s, false), 4.0 * 8 * 12 * 64 * (1024.0 * 1025 / 2));
  EXPECT_DOUBLE_EQ(dev.gemm_flops(), flash_attention_flops(s, false));
  // The tracker saw the forward's workspace come and go.
  EXPECT_EQ(tracker.peak_total(), 256 + flash_attention_workspace_bytes(s, false));
  EXPECT_EQ(tracker.total(), 256);
  flash_attention_backward(dev, s, {p, 768}, {p, 768}, {p, 768}, {p, 768}, {p, 768}, {p, 768},
                           {p, 768}, {p, 768}, lse);
  EXPECT_EQ(clock.now_ns - fwd, fused_ns(spec, GemmMath::bf16, flash_attention_flops(s, true), eff,
                                         flash_attention_bytes(s, true)));
  EXPECT_GT(clock.now_ns - fwd, 2 * fwd);  // 2.5x the FLOPs
}
