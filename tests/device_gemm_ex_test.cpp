// Device::gemm_ex: GEMMs with bf16 and f16 inputs and fp32 accumulation (core/device/cpu_gemm.hpp
// on the CPU, the meta device's pricing), against an fp64 reference on the same 16-bit values.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/base/error.hpp"
#include "core/device/cpu_gemm.hpp"
#include "core/device/device.hpp"
#include "core/device/device_model.hpp"
#include "core/device/meta_device.hpp"

using namespace shardlab;

namespace {

// n values of type t, uniform in [-1, 1), as stored (16-bit bits or floats) and as fp32 values.
struct Matrix {
  std::vector<uint16_t> bits;
  std::vector<float> f32;  // the values the 16-bit bits stand for (or the fp32 values)
  const void* data(DType t) const {
    return t == DType::f32 ? static_cast<const void*>(f32.data()) : bits.data();
  }
};

Matrix random_matrix(int64_t n, DType t, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Matrix m;
  m.bits.resize(n);
  m.f32.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    const float x = u(gen);
    store_from_f32(m.bits.data(), i, t == DType::f32 ? DType::bf16 : t, x);
    m.f32[i] = t == DType::f32 ? x : load_as_f32(m.bits.data(), i, t);
  }
  return m;
}

// C(M,N) = alpha op(A) op(B) + beta C0 in double, and sum |alpha a b| + |beta c| per element (the
// scale of its fp32 rounding error).
void reference(bool ta, bool tb, int M, int N, int K, float alpha, const std::vector<float>& A,
               int lda, const std::vector<float>& B, int ldb, float beta,
               const std::vector<double>& C0, int ldc, std::vector<double>& C,
               std::vector<double>& mag) {
  C.assign(static_cast<size_t>(M) * ldc, 0.0);
  mag.assign(C.size(), 0.0);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double s = 0, a_s = 0;
      for (int k = 0; k < K; ++k) {
        const double a =
            ta ? A[static_cast<size_t>(k) * lda + m] : A[static_cast<size_t>(m) * lda + k];
        const double b =
            tb ? B[static_cast<size_t>(n) * ldb + k] : B[static_cast<size_t>(k) * ldb + n];
        s += a * b;
        a_s += std::abs(a * b);
      }
      const size_t i = static_cast<size_t>(m) * ldc + n;
      C[i] = alpha * s + (beta != 0.0f ? beta * C0[i] : 0.0);
      mag[i] = std::abs(alpha) * a_s + std::abs(beta * C0[i]);
    }
}

struct GemmCase {
  bool ta, tb;
  int M, N, K;
  float alpha, beta;
};

// Runs `gemm` (a gemm_ex of some path) on one case for inputs `ab` and output `c`, and checks it
// against the reference within fp32 rounding of the sums (plus one rounding to c).
template <class Gemm>
void check_case(Gemm gemm, const GemmCase& g, DType ab, DType c) {
  SCOPED_TRACE(::testing::Message()
               << "ta " << g.ta << " tb " << g.tb << " M " << g.M << " N " << g.N << " K " << g.K
               << " beta " << g.beta << " ab " << dtype_name(ab) << " c " << dtype_name(c));
  const int lda = (g.ta ? g.M : g.K) + 3, ldb = (g.tb ? g.K : g.N) + 5, ldc = g.N + 2;
  const Matrix A = random_matrix(static_cast<int64_t>(g.ta ? g.K : g.M) * lda, ab, 1);
  const Matrix B = random_matrix(static_cast<int64_t>(g.tb ? g.N : g.K) * ldb, ab, 2);
  const Matrix C0 = random_matrix(static_cast<int64_t>(g.M) * ldc, c, 3);
  std::vector<double> c0(C0.f32.begin(), C0.f32.end()), want, mag;
  reference(g.ta, g.tb, g.M, g.N, g.K, g.alpha, A.f32, lda, B.f32, ldb, g.beta, c0, ldc, want, mag);
  // C starts as C0 (beta reads it) in c's storage.
  std::vector<float> c32 = C0.f32;
  std::vector<uint16_t> c16 = C0.bits;
  void* C = c == DType::f32 ? static_cast<void*>(c32.data()) : c16.data();
  gemm(g.ta, g.tb, g.M, g.N, g.K, g.alpha, A.data(ab), lda, B.data(ab), ldb, ab, g.beta, C, ldc, c);
  const double eps = c == DType::f32 ? 0.0 : (c == DType::bf16 ? 1.0 / 256 : 1.0 / 2048);
  for (int m = 0; m < g.M; ++m)
    for (int n = 0; n < g.N; ++n) {
      const size_t i = static_cast<size_t>(m) * ldc + n;
      const double got = c == DType::f32 ? c32[i] : load_as_f32(c16.data(), i, c);
      const double tol = 4e-7 * (g.K + 2) * mag[i] + eps * std::abs(want[i]) + 1e-30;
      ASSERT_NEAR(got, want[i], tol) << "at (" << m << ", " << n << ")";
    }
  // Padding between rows is never written.
  for (int m = 0; m < g.M; ++m)
    for (int n = g.N; n < ldc; ++n) {
      const size_t i = static_cast<size_t>(m) * ldc + n;
      if (c == DType::f32)
        ASSERT_EQ(c32[i], C0.f32[i]);
      else
        ASSERT_EQ(c16[i], C0.bits[i]);
    }
}

// Shapes around and past the widen path's blocks (256 x 1024 x 256), odd sizes, K = 1.
std::vector<GemmCase> cases() {
  std::vector<GemmCase> v;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      v.push_back({ta, tb, 7, 5, 3, 1.0f, 0.0f});
      v.push_back({ta, tb, 300, 70, 270, 0.5f, 1.0f});
    }
  v.push_back({false, false, 33, 1100, 40, 1.0f, -2.0f});
  v.push_back({false, true, 1, 1, 1, 2.0f, 0.0f});
  v.push_back({true, false, 20, 30, 1, 1.0f, 0.5f});
  return v;
}

struct GemmExTest : ::testing::Test {
  MemoryTracker tracker{0};
  std::unique_ptr<Device> dev = make_cpu_device(tracker);
};

}  // namespace

TEST_F(GemmExTest, SixteenBitInputsAccumulateInFp32) {
  auto device = [this](auto... a) { dev->gemm_ex(a...); };
  for (DType ab : {DType::bf16, DType::f16})
    for (DType c : {DType::f32, ab})
      for (const GemmCase& g : cases()) check_case(device, g, ab, c);
  for (const GemmCase& g : cases()) check_case(device, g, DType::f32, DType::f32);
}

// A product of two bf16 values is exact in fp32, so where every partial sum is exact too (small
// integers) the 16-bit GEMM gives exactly the fp32 GEMM of the same values.
TEST_F(GemmExTest, ExactWhereTheSumsAreExact) {
  const int M = 9, N = 300, K = 513;
  std::vector<uint16_t> a(M * K), b(K * N);
  std::vector<float> af(M * K), bf(K * N);
  for (int i = 0; i < M * K; ++i) af[i] = static_cast<float>((i * 7) % 9 - 4);
  for (int i = 0; i < K * N; ++i) bf[i] = static_cast<float>((i * 5) % 7 - 3);
  for (int i = 0; i < M * K; ++i) a[i] = f32_to_bf16_bits(af[i]);
  for (int i = 0; i < K * N; ++i) b[i] = f32_to_bf16_bits(bf[i]);
  std::vector<float> want(M * N), got(M * N, std::numeric_limits<float>::quiet_NaN());
  dev->gemm(false, false, M, N, K, 1.0f, af.data(), K, bf.data(), N, 0.0f, want.data(), N);
  dev->gemm_ex(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, DType::bf16, 0.0f, got.data(),
               N, DType::f32);
  EXPECT_EQ(got, want);  // beta 0 also ignores the NaNs C held
}

TEST_F(GemmExTest, Fp32InputsAreGemmBitForBit) {
  const int M = 65, N = 40, K = 33;
  const Matrix A = random_matrix(M * K, DType::f32, 4), B = random_matrix(K * N, DType::f32, 5);
  std::vector<float> want(M * N, 0.25f), got(M * N, 0.25f);
  dev->gemm(true, false, M, N, K, 0.5f, A.f32.data(), M, B.f32.data(), N, 1.0f, want.data(), N);
  dev->gemm_ex(true, false, M, N, K, 0.5f, A.f32.data(), M, B.f32.data(), N, DType::f32, 1.0f,
               got.data(), N, DType::f32);
  EXPECT_EQ(got, want);
}

TEST_F(GemmExTest, BatchedIsOneGemmPerMatrix) {
  const int M = 5, N = 6, K = 7, batch = 3;
  const Matrix A = random_matrix(batch * M * K, DType::bf16, 6),
               B = random_matrix(batch * K * N, DType::bf16, 7);
  std::vector<float> want(batch * M * N), got(batch * M * N);
  for (int i = 0; i < batch; ++i)
    dev->gemm_ex(false, false, M, N, K, 1.0f, A.bits.data() + i * M * K, K,
                 B.bits.data() + i * K * N, N, DType::bf16, 0.0f, want.data() + i * M * N, N,
                 DType::f32);
  dev->gemm_ex_batched(false, false, M, N, K, 1.0f, A.bits.data(), K, M * K, B.bits.data(), N,
                       K * N, DType::bf16, 0.0f, got.data(), N, M * N, DType::f32, batch);
  EXPECT_EQ(got, want);
}

TEST_F(GemmExTest, RefusesAnOutputOfAnotherSixteenBitType) {
  std::vector<uint16_t> a(4), b(4), c(4);
  EXPECT_THROW(dev->gemm_ex(false, false, 2, 2, 2, 1.0f, a.data(), 2, b.data(), 2, DType::bf16,
                            0.0f, c.data(), 2, DType::f16),
               InvalidArgument);
}

TEST_F(GemmExTest, PathSaysWhatRuns) {
  EXPECT_EQ(dev->gemm_path(DType::f32), "OpenBLAS sgemm");
  const std::string why =
      cpu_has_avx512_bf16() ? "built without an AVX512_BF16 kernel" : "this CPU has no AVX512_BF16";
  EXPECT_EQ(dev->gemm_path(DType::bf16), "bf16 widened to fp32, OpenBLAS sgemm (" + why + ")");
  EXPECT_EQ(dev->gemm_path(DType::f16),
            "f16 widened to fp32, OpenBLAS sgemm (no f16 GEMM instructions on this CPU)");
}

// The meta device prices a GEMM at the math its inputs run: 16-bit at the bf16 peak with 2-byte
// operands, fp32 at the device's math.
TEST(GemmExMeta, ChargedAtTheInputsMath) {
  const ClusterSpec spec = load_cluster_spec("a100-40gb");
  MemoryTracker tracker(0);
  VirtualClock clock;
  MetaDevice dev(tracker, spec, clock, GemmMath::fp32);
  const int M = 4096, N = 4096, K = 4096;
  dev.gemm_ex(false, false, M, N, K, 1.0f, nullptr, K, nullptr, N, DType::bf16, 0.0f, nullptr, N,
              DType::f32);
  EXPECT_EQ(clock.now_ns, gemm_ns(spec, GemmMath::bf16, M, N, K, 1, 2, 4));
  const int64_t t0 = clock.now_ns;
  dev.gemm_ex(false, false, M, N, K, 1.0f, nullptr, K, nullptr, N, DType::f32, 0.0f, nullptr, N,
              DType::f32);
  EXPECT_EQ(clock.now_ns - t0, gemm_ns(spec, GemmMath::fp32, M, N, K));
  EXPECT_GT(clock.now_ns - t0, 10 * t0);  // fp32 peak 19.5 TFLOP/s against bf16's 312
  EXPECT_EQ(dev.gemm_flops(), 2 * 2.0 * M * N * K);
  // The old signature is the new one with equal element sizes, to the nanosecond.
  EXPECT_EQ(gemm_ns(spec, GemmMath::bf16, 300, 200, 100, 3),
            gemm_ns(spec, GemmMath::bf16, 300, 200, 100, 3, 2, 2));
}
