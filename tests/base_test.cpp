// core/base and core/memory: error messages, dtype conversions on edge cases, the memory tracker.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include "core/base/dtype.hpp"
#include "core/base/error.hpp"
#include "core/device/device.hpp"
#include "core/memory/tracker.hpp"

using namespace shardlab;

TEST(Error, CheckNamesExpressionFileAndRank) {
  set_thread_rank(3);
  try {
    int count = 1001;
    SL_CHECK(count % 4 == 0, "all_gather: count ", count, " not divisible by 4");
    FAIL() << "no throw";
  } catch (const InvalidArgument& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("rank 3: all_gather: count 1001 not divisible by 4"), std::string::npos) << m;
    EXPECT_NE(m.find("count % 4 == 0"), std::string::npos) << m;
    EXPECT_NE(m.find("tests/base_test.cpp:"), std::string::npos) << m;
  }
  set_thread_rank(-1);
  EXPECT_THROW(SL_CHECK(false), InvalidArgument);
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16_bits(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly half way between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(f32_to_bf16_bits(1.00390625f), 0x3f80);
  // 1 + 3*2^-8 is half way between 1.0078125 (odd mantissa) and 1.015625: rounds up to even.
  EXPECT_EQ(f32_to_bf16_bits(1.01171875f), 0x3f82);
  EXPECT_EQ(f32_to_bf16_bits(1.00390637f), 0x3f81);  // just above the tie
  EXPECT_EQ(f32_to_bf16_bits(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(f32_to_bf16_bits(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_TRUE(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(std::nanf("")))));
  // The largest finite f32 rounds to Inf in bf16 (its mantissa rounds up past the top).
  EXPECT_EQ(f32_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80);
  // f32 subnormals keep their top bits.
  float sub = std::numeric_limits<float>::denorm_min() * 65536.0f;
  EXPECT_EQ(bf16_bits_to_f32(f32_to_bf16_bits(sub)), sub);
  EXPECT_EQ(f32_to_bf16_bits(-0.0f), 0x8000);
}

TEST(DType, F16EdgeCases) {
  EXPECT_EQ(f32_to_f16_bits(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16_bits(65504.0f), 0x7bff);  // largest finite
  EXPECT_EQ(f32_to_f16_bits(65519.0f), 0x7bff);  // rounds down
  EXPECT_EQ(f32_to_f16_bits(65520.0f), 0x7c00);  // tie rounds to even: Inf
  EXPECT_EQ(f32_to_f16_bits(1e9f), 0x7c00);
  EXPECT_EQ(f32_to_f16_bits(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_TRUE(std::isnan(f16_bits_to_f32(f32_to_f16_bits(std::nanf("")))));
  const float tiny = 5.9604644775390625e-8f;  // 2^-24, the smallest subnormal
  EXPECT_EQ(f32_to_f16_bits(tiny), 0x0001);
  EXPECT_EQ(f32_to_f16_bits(tiny * 0.5f), 0x0000);  // tie between 0 and 1 ulp: even (0)
  EXPECT_EQ(f32_to_f16_bits(tiny * 1.5f), 0x0002);  // tie between 1 and 2 ulps: even (2)
  EXPECT_EQ(f32_to_f16_bits(tiny * 0.75f), 0x0001);
  EXPECT_EQ(f16_bits_to_f32(0x03ff), 1023 * tiny);         // largest subnormal
  EXPECT_EQ(f32_to_f16_bits(1.0f + 1.0f / 2048), 0x3c00);  // tie: even
  EXPECT_EQ(f32_to_f16_bits(1.0f + 3.0f / 2048), 0x3c02);  // tie: even (up)
  // Every f16 value round-trips exactly through f32.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_bits_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16_bits(f), h) << std::hex << h;
  }
}

TEST(DType, ParseNames) {
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_EQ(parse_dtype("fp16"), DType::f16);
  EXPECT_EQ(parse_dtype("float32"), DType::f32);
  EXPECT_THROW(parse_dtype("int8"), InvalidArgument);
}

TEST(MemoryTracker, CurrentPeakAndBreakdown) {
  MemoryTracker t(2);
  t.allocate(MemCategory::params, 100);
  t.allocate(MemCategory::activations, 50);
  t.release(MemCategory::activations, 50);
  t.allocate(MemCategory::grads, 30);
  EXPECT_EQ(t.current(MemCategory::params), 100);
  EXPECT_EQ(t.peak(MemCategory::activations), 50);
  EXPECT_EQ(t.current(MemCategory::activations), 0);
  EXPECT_EQ(t.total(), 130);
  EXPECT_EQ(t.peak_total(), 150);
  EXPECT_EQ(t.at_peak()[static_cast<int>(MemCategory::activations)], 50);
}

TEST(MemoryTracker, CapacityThrowsWithBreakdownAndChangesNothing) {
  MemoryTracker t(1, 1000);
  t.allocate(MemCategory::params, 600);
  try {
    t.allocate(MemCategory::optimizer_state, 500);
    FAIL() << "no throw";
  } catch (const OutOfMemory& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
    EXPECT_NE(m.find("optimizer_state requested 500 B"), std::string::npos) << m;
    EXPECT_NE(m.find("params 600 B"), std::string::npos) << m;
  }
  EXPECT_EQ(t.total(), 600);
  EXPECT_EQ(t.current(MemCategory::optimizer_state), 0);
}

TEST(MemoryTracker, ParseAndFormatBytes) {
  EXPECT_EQ(parse_bytes("512MiB"), 512ll << 20);
  EXPECT_EQ(parse_bytes("1.5GiB"), 3ll << 29);
  EXPECT_EQ(parse_bytes("1GB"), 1000000000ll);
  EXPECT_EQ(parse_bytes("4096"), 4096);
  EXPECT_THROW(parse_bytes("12 parsecs"), InvalidArgument);
  EXPECT_THROW(parse_bytes("-5MiB"), InvalidArgument);
  EXPECT_EQ(parse_bytes("0"), 0);
  EXPECT_EQ(parse_bytes("0.6"), 1);
  EXPECT_EQ(parse_bytes("1TiB"), 1ll << 40);
  // Past int64: llround is undefined there (it came back as INT64_MIN, a "negative limit").
  EXPECT_THROW(parse_bytes("1e20"), InvalidArgument);
  EXPECT_THROW(parse_bytes("9000000TiB"), InvalidArgument);
  // A nonzero limit must not round to 0, which means "no limit".
  EXPECT_THROW(parse_bytes("0.4"), InvalidArgument);
  EXPECT_THROW(parse_bytes("1e-30"), InvalidArgument);
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  // Beyond int64: refused naming the option (llround gave INT64_MIN, printed as
  // -9223372036854775808), not wrapped.
  EXPECT_EQ(parse_bytes("8589934591GiB"), 8589934591ll << 30);  // just below 2^63
  for (const char* big : {"99999999999999999999999GiB", "8589934592GiB", "1e19", "1e300TB"}) {
    try {
      parse_bytes(big, "--mem-limit");
      ADD_FAILURE() << big << ": no throw";
    } catch (const InvalidArgument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(std::string("--mem-limit '") + big + "'"), std::string::npos) << m;
      EXPECT_NE(m.find("more than the largest size"), std::string::npos) << m;
    }
  }
  try {
    parse_bytes("lots", "--mem-limit");
    ADD_FAILURE() << "no throw";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--mem-limit cannot read 'lots'"), std::string::npos);
  }
}

TEST(CpuDevice, BuffersAreTrackedAndMoveOnly) {
  MemoryTracker t(0);
  auto dev = make_cpu_device(t);
  {
    Buffer a = dev->alloc_zeros(256, MemCategory::grads);
    EXPECT_EQ(t.current(MemCategory::grads), 256);
    EXPECT_EQ(a.f32()[63], 0.0f);
    Buffer b = std::move(a);
    EXPECT_TRUE(a.empty());
    EXPECT_EQ(t.current(MemCategory::grads), 256);
  }
  EXPECT_EQ(t.current(MemCategory::grads), 0);
  EXPECT_EQ(t.peak(MemCategory::grads), 256);
}

// Why this process's CPU devices have no pool (core/device/cpu_device.cpp), or "" when they do:
// the pool's own tests skip then.
namespace {
std::string cpu_pool_off() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return "sanitizer build: no pool";
#endif
  if (const char* e = std::getenv("SHARDLAB_CPU_POOL"); e && std::string(e) == "0")
    return "SHARDLAB_CPU_POOL=0: no pool";
  return "";
}
}  // namespace

// The CPU device keeps freed blocks in a pool below the tracker (core/device/cpu_device.cpp):
// the tracker still sees every alloc and free at the bytes asked for, and a later request of
// the same size class gets the same memory back instead of faulting fresh pages in.
TEST(CpuDevice, FreedMemoryIsReusedAndStillTrackedByTheBytesAsked) {
  if (const std::string why = cpu_pool_off(); !why.empty()) GTEST_SKIP() << why;
  MemoryTracker t(0);
  auto dev = make_cpu_device(t);
  const int64_t big = 8 << 20;  // above glibc's mmap threshold: freed to the kernel without a pool
  void* first = nullptr;
  {
    Buffer a = dev->alloc(big, MemCategory::activations);
    first = a.data();
    std::memset(a.data(), 1, static_cast<size_t>(big));
    EXPECT_EQ(t.current(MemCategory::activations), big);
  }
  EXPECT_EQ(t.current(MemCategory::activations), 0);
  {
    rusage before{};
    getrusage(RUSAGE_SELF, &before);
    Buffer b = dev->alloc(big - 100, MemCategory::workspace);  // the same size class
    std::memset(b.data(), 2, static_cast<size_t>(big - 100));
    rusage after{};
    getrusage(RUSAGE_SELF, &after);
    // Without the pool the 8 MiB went back to the kernel: 2048 fresh 4 KiB pages to fault in.
    EXPECT_LT(after.ru_minflt - before.ru_minflt, 64);
    EXPECT_EQ(b.data(), first);
    EXPECT_EQ(t.current(MemCategory::workspace), big - 100);
    EXPECT_EQ(t.current(MemCategory::activations), 0);
    Buffer c = dev->alloc(big, MemCategory::workspace);  // the cached block is taken: a new one
    EXPECT_NE(c.data(), first);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(c.data()) % 64, 0u);
    EXPECT_EQ(t.current(MemCategory::workspace), 2 * big - 100);
  }
  EXPECT_EQ(t.current(MemCategory::workspace), 0);
  EXPECT_EQ(t.peak(MemCategory::workspace), 2 * big - 100);
  // The tracker's limit still refuses before any memory is taken, pooled or not.
  MemoryTracker small(0, 1 << 20);
  auto dev2 = make_cpu_device(small);
  EXPECT_THROW(dev2->alloc(big, MemCategory::workspace), OutOfMemory);
  EXPECT_EQ(small.current(MemCategory::workspace), 0);
}

// Large pooled blocks start at different cache lines of their first page, so that buffers
// streamed side by side (two ranks' sends, a send and its recv) do not share their low address
// bits (core/device/cpu_device.cpp; docs/collectives.md, "Buffer placement").
TEST(CpuDevice, LargeBlocksStartAtDifferentLinesOfTheirPage) {
  if (const std::string why = cpu_pool_off(); !why.empty()) GTEST_SKIP() << why;
  MemoryTracker t(0);
  auto dev = make_cpu_device(t);
  std::vector<Buffer> blocks;
  std::set<uintptr_t> lines;
  for (int i = 0; i < 4; ++i) {
    blocks.push_back(dev->alloc(1 << 20, MemCategory::workspace));
    const uintptr_t at = reinterpret_cast<uintptr_t>(blocks.back().data());
    EXPECT_EQ(at % 64, 0u);
    std::memset(blocks.back().data(), i, size_t{1} << 20);  // every byte of the block is ours
    lines.insert(at % 4096 / 64);
  }
  EXPECT_EQ(lines.size(), 4u) << "four blocks in a row start at the same line of their page";
}

TEST(CpuDevice, GemmTransposesMatchNaive) {
  MemoryTracker t(0);
  auto dev = make_cpu_device(t);
  const int M = 5, N = 7, K = 3;
  std::vector<float> A(M * K), B(K * N), C(M * N, 1.0f), ref(M * N);
  for (int i = 0; i < M * K; ++i) A[i] = 0.1f * i - 0.5f;
  for (int i = 0; i < K * N; ++i) B[i] = 0.05f * i + 0.2f;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float s = 0;
      for (int k = 0; k < K; ++k) s += A[i * K + k] * B[k * N + j];
      ref[i * N + j] = 2.0f * s + 0.5f;
    }
  dev->gemm(false, false, M, N, K, 2.0f, A.data(), K, B.data(), N, 0.5f, C.data(), N);
  for (int i = 0; i < M * N; ++i) EXPECT_NEAR(C[i], ref[i], 1e-5f);
  // A^T stored (K, M) and B^T stored (N, K) give the same product.
  std::vector<float> At(K * M), Bt(N * K), C2(M * N, 1.0f);
  for (int i = 0; i < M; ++i)
    for (int k = 0; k < K; ++k) At[k * M + i] = A[i * K + k];
  for (int k = 0; k < K; ++k)
    for (int j = 0; j < N; ++j) Bt[j * K + k] = B[k * N + j];
  dev->gemm(true, true, M, N, K, 2.0f, At.data(), M, Bt.data(), K, 0.5f, C2.data(), N);
  for (int i = 0; i < M * N; ++i) EXPECT_NEAR(C2[i], ref[i], 1e-5f);
}
