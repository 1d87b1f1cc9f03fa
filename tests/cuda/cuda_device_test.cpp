// CudaDevice against the CPU device: discovery without a GPU, tracked pool allocations, copies,
// SGEMM (every transpose case, strided rows, batches) and mixed-precision GemmEx.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "core/base/error.hpp"
#include "core/device/cuda/cuda_device.hpp"
#include "tests/cuda/cuda_test_util.hpp"

namespace shardlab {
namespace {

using testing::max_rel_error;
using testing::random_vector;
using testing::to_device;
using testing::to_host;

// ---- discovery: these run on every machine, GPU or not

TEST(CudaDiscovery, CountAndReasonAgree) {
  const int n = cuda_device_count();
  EXPECT_GE(n, 0);
  if (n == 0) {
    EXPECT_FALSE(cuda_unavailable_reason().empty());
  } else {
    EXPECT_EQ(cuda_unavailable_reason(), "");
  }
  EXPECT_EQ(cuda_device_count(), n);  // a failed query leaves no sticky error behind
}

TEST(CudaDiscovery, NoDeviceIsAClearError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present; this checks the no-GPU path";
  MemoryTracker tracker(0);
  try {
    make_cuda_device(tracker, 0);
    FAIL() << "make_cuda_device succeeded without a GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
  }
  EXPECT_EQ(tracker.total(), 0);
}

TEST(CudaDiscovery, BadOrdinalThrows) {
  SL_REQUIRE_CUDA();
  MemoryTracker tracker(0);
  EXPECT_THROW(make_cuda_device(tracker, cuda_device_count()), InvalidArgument);
  EXPECT_THROW(make_cuda_device(tracker, -1), InvalidArgument);
}

TEST(CudaDiscovery, CpuDeviceIsRejectedByCudaPaths) {
  MemoryTracker tracker(0);
  auto cpu = make_cpu_device(tracker);
  EXPECT_THROW(as_cuda(*cpu), InvalidArgument);
}

TEST(CudaPoolSizes, RoundingFollowsTheTwoClasses) {
  EXPECT_EQ(CudaPool::round_size(0), 512);
  EXPECT_EQ(CudaPool::round_size(1), 512);
  EXPECT_EQ(CudaPool::round_size(513), 1024);
  EXPECT_EQ(CudaPool::round_size(1 << 20), 1 << 20);
  EXPECT_EQ(CudaPool::round_size((1 << 20) + 1), 2 << 20);
  EXPECT_EQ(CudaPool::round_size((5 << 20) + 7), 6 << 20);
}

// An unrecoverable CUDA failure aborts naming the call, the file:line and the rank.
TEST(CudaCheckDeathTest, AbortsWithCallFileLineAndRank) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        set_thread_rank(3);
        CUDA_CHECK(cudaSetDevice(-1));
      },
      "rank 3: CUDA error: cudaSetDevice\\(-1\\) failed: "
      ".*\\(tests/cuda/cuda_device_test.cpp:[0-9]+\\)");
  EXPECT_DEATH(
      {
        set_thread_rank(1);
        CUBLAS_CHECK(CUBLAS_STATUS_INVALID_VALUE);
      },
      "rank 1: cuBLAS error: CUBLAS_STATUS_INVALID_VALUE failed: CUBLAS_STATUS_INVALID_VALUE");
}

// ---- memory

TEST(CudaDeviceMemory, AllocationsAreTrackedByCategoryAndPooled) {
  SL_REQUIRE_CUDA();
  MemoryTracker tracker(0);
  auto dev = make_cuda_device(tracker, 0);
  CudaDevice& cuda = as_cuda(*dev);
  const int64_t base = tracker.total();  // cuBLAS workspace, charged to `workspace`
  EXPECT_EQ(tracker.current(MemCategory::workspace), base);
  void* first = nullptr;
  {
    Buffer p = dev->alloc(1000, MemCategory::params);
    Buffer g = dev->alloc(3 << 20, MemCategory::grads);
    EXPECT_EQ(tracker.current(MemCategory::params), 1000);
    EXPECT_EQ(tracker.current(MemCategory::grads), 3 << 20);
    EXPECT_GE(cuda.reserved_bytes(), base + 1024 + (4 << 20));  // rounded sizes
    first = p.data();
  }
  EXPECT_EQ(tracker.total(), base);                  // the tracker sees requests...
  EXPECT_GE(cuda.cached_bytes(), 1024 + (4 << 20));  // ...the pool keeps the memory
  Buffer again = dev->alloc(900, MemCategory::activations);
  EXPECT_EQ(again.data(), first);  // same size class, compute stream only: reused at once
  again.reset();
  cuda.empty_cache();
  EXPECT_EQ(cuda.cached_bytes(), 0);
  EXPECT_EQ(cuda.reserved_bytes(), base);
}

TEST(CudaDeviceMemory, CapacityThrowsOutOfMemoryWithoutLeaking) {
  SL_REQUIRE_CUDA();
  MemoryTracker tracker(0);
  auto dev = make_cuda_device(tracker, 0);
  tracker.set_capacity(tracker.total() + (1 << 20));
  EXPECT_THROW(dev->alloc(2 << 20, MemCategory::activations), OutOfMemory);
  EXPECT_EQ(tracker.current(MemCategory::activations), 0);
}

// The cuBLAS workspace is tracked: a limit below it fails construction cleanly.
TEST(CudaDeviceMemory, LimitBelowTheCublasWorkspaceFailsConstruction) {
  SL_REQUIRE_CUDA();
  MemoryTracker tracker(0, /*capacity=*/1 << 20);
  EXPECT_THROW(make_cuda_device(tracker, 0), OutOfMemory);
  EXPECT_EQ(tracker.total(), 0);
  tracker.set_capacity(0);
  auto dev = make_cuda_device(tracker, 0);  // nothing leaked that stops a second try
  EXPECT_GE(tracker.current(MemCategory::workspace), 4 << 20);
}

// A block the comm stream still uses is not handed out again until that work is done.
TEST(CudaDeviceMemory, BlockUsedByCommStreamWaitsForItsEvent) {
  SL_REQUIRE_CUDA();
  MemoryTracker tracker(0);
  auto dev = make_cuda_device(tracker, 0);
  CudaDevice& cuda = as_cuda(*dev);
  CudaDeviceGuard guard(cuda.ordinal());
  // Two blocks of one size class, taken before the comm stream is held (no cudaMalloc after).
  Buffer a = dev->alloc(4096, MemCategory::comm_buffers);
  Buffer b = dev->alloc(4096, MemCategory::comm_buffers);
  void* const pa = a.data();
  void* const pb = b.data();
  b.reset();  // compute stream only: reusable at once
  // Hold the comm stream behind a host callback until `release` is set.
  static std::atomic<bool> release;
  release = false;
  CUDA_CHECK(cudaLaunchHostFunc(
      cuda.comm_stream(),
      [](void*) {
        while (!release.load()) std::this_thread::yield();
      },
      nullptr));
  cuda.record_stream(static_cast<char*>(pa) + 100, cuda.comm_stream());  // inside the block
  a.reset();  // pending: the comm stream has not passed it
  Buffer c = dev->alloc(4096, MemCategory::comm_buffers);
  EXPECT_EQ(c.data(), pb);  // the free block, not the pending one
  release = true;
  cuda.synchronize();
  Buffer d = dev->alloc(4096, MemCategory::comm_buffers);
  EXPECT_EQ(d.data(), pa);  // its event has passed: back in the pool
}

TEST(CudaDeviceMemory, CopiesRoundTripAndFillZero) {
  SL_REQUIRE_CUDA();
  MemoryTracker tracker(0);
  auto dev = make_cuda_device(tracker, 0);
  const auto host = random_vector(12345, 7);
  Buffer a = to_device(*dev, host);
  Buffer b = dev->alloc(a.bytes(), MemCategory::workspace);
  dev->copy(b.data(), a.data(), a.bytes());
  EXPECT_EQ(to_host(*dev, b.data(), 12345), host);
  dev->fill_zero(b.f32() + 100, 200 * 4);
  auto back = to_host(*dev, b.data(), 12345);
  for (int i = 0; i < 12345; ++i) EXPECT_EQ(back[i], (i >= 100 && i < 300) ? 0.0f : host[i]);
}

// ---- GEMM against the CPU device

struct GemmCase {
  bool ta, tb;
  int M, N, K;
};

TEST(CudaGemm, EveryTransposeMatchesCpu) {
  SL_REQUIRE_CUDA();
  MemoryTracker t_cpu(0), t_gpu(0);
  auto cpu = make_cpu_device(t_cpu);
  auto gpu = make_cuda_device(t_gpu, 0);
  const GemmCase cases[] = {{false, false, 37, 53, 29},
                            {true, false, 64, 17, 128},
                            {false, true, 5, 96, 33},
                            {true, true, 70, 70, 1},
                            {false, false, 256, 384, 768}};
  for (const GemmCase& g : cases) {
    SCOPED_TRACE(std::string(g.ta ? "T" : "N") + (g.tb ? "T" : "N") + " " + std::to_string(g.M) +
                 "x" + std::to_string(g.N) + "x" + std::to_string(g.K));
    // Stored shapes with padded rows (ld > columns) to exercise the strides.
    const int a_rows = g.ta ? g.K : g.M, a_cols = g.ta ? g.M : g.K;
    const int b_rows = g.tb ? g.N : g.K, b_cols = g.tb ? g.K : g.N;
    const int lda = a_cols + 3, ldb = b_cols + 1, ldc = g.N + 2;
    const auto A = random_vector(static_cast<int64_t>(a_rows) * lda, 1);
    const auto B = random_vector(static_cast<int64_t>(b_rows) * ldb, 2);
    auto C = random_vector(static_cast<int64_t>(g.M) * ldc, 3);
    Buffer dA = to_device(*gpu, A), dB = to_device(*gpu, B), dC = to_device(*gpu, C);
    gpu->gemm(g.ta, g.tb, g.M, g.N, g.K, 0.75f, dA.f32(), lda, dB.f32(), ldb, 0.5f, dC.f32(), ldc);
    cpu->gemm(g.ta, g.tb, g.M, g.N, g.K, 0.75f, A.data(), lda, B.data(), ldb, 0.5f, C.data(), ldc);
    EXPECT_LT(max_rel_error(to_host(*gpu, dC.data(), static_cast<int64_t>(C.size())), C), 1e-5);
  }
}

TEST(CudaGemmBatched, StridedBatchesMatchCpu) {
  SL_REQUIRE_CUDA();
  MemoryTracker t_cpu(0), t_gpu(0);
  auto cpu = make_cpu_device(t_cpu);
  auto gpu = make_cuda_device(t_gpu, 0);
  // Attention's shape: per head, S(T,T) = Q(T,hs) K(T,hs)^T with rows strided through (T, 3C).
  const int batch = 4, T = 33, hs = 16, ld = 3 * batch * hs;
  const auto qkv = random_vector(static_cast<int64_t>(T) * ld, 11);
  std::vector<float> S(static_cast<size_t>(batch) * T * T, 0.0f);
  Buffer dqkv = to_device(*gpu, qkv), dS = to_device(*gpu, S);
  const int64_t k_off = batch * hs;
  gpu->gemm_batched(false, true, T, T, hs, 0.25f, dqkv.f32(), ld, hs, dqkv.f32() + k_off, ld, hs,
                    0.0f, dS.f32(), T, static_cast<int64_t>(T) * T, batch);
  cpu->gemm_batched(false, true, T, T, hs, 0.25f, qkv.data(), ld, hs, qkv.data() + k_off, ld, hs,
                    0.0f, S.data(), T, static_cast<int64_t>(T) * T, batch);
  EXPECT_LT(max_rel_error(to_host(*gpu, dS.data(), static_cast<int64_t>(S.size())), S), 1e-5);
}

// bf16/f16 inputs, f32 accumulate: the reference is the CPU f32 GEMM on the rounded inputs, so
// only summation order and (for 16-bit C) the output rounding differ.
TEST(CudaGemmEx, HalfInputsAccumulateInF32) {
  SL_REQUIRE_CUDA();
  MemoryTracker t_cpu(0), t_gpu(0);
  auto cpu = make_cpu_device(t_cpu);
  auto gpu = make_cuda_device(t_gpu, 0);
  CudaDevice& cuda = as_cuda(*gpu);
  const int M = 48, N = 40, K = 256;
  for (DType t : {DType::bf16, DType::f16}) {
    for (DType c_type : {DType::f32, t}) {
      auto A = random_vector(static_cast<int64_t>(M) * K, 21);
      auto B = random_vector(static_cast<int64_t>(K) * N, 22);
      std::vector<uint16_t> A16(A.size()), B16(B.size());
      for (size_t i = 0; i < A.size(); ++i) {
        store_from_f32(A16.data(), i, t, A[i]);
        A[i] = load_as_f32(A16.data(), i, t);
      }
      for (size_t i = 0; i < B.size(); ++i) {
        store_from_f32(B16.data(), i, t, B[i]);
        B[i] = load_as_f32(B16.data(), i, t);
      }
      std::vector<float> C(static_cast<size_t>(M) * N, 0.0f);
      // B stored (N, K) and transposed: the layout of a linear layer's weight in backward.
      cpu->gemm(false, true, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, C.data(), N);
      Buffer dA = testing::to_device_as(*gpu, A16), dB = testing::to_device_as(*gpu, B16);
      Buffer dC = gpu->alloc_zeros(static_cast<int64_t>(C.size()) * dtype_size(c_type),
                                   MemCategory::workspace);
      cuda.gemm_ex(false, true, M, N, K, 1.0f, dA.data(), K, dB.data(), K, t, 0.0f, dC.data(), N,
                   c_type);
      std::vector<uint16_t> raw(C.size() * 2);
      gpu->copy_to_host(raw.data(), dC.data(), dC.bytes());
      std::vector<float> got(C.size());
      for (size_t i = 0; i < C.size(); ++i) got[i] = load_as_f32(raw.data(), i, c_type);
      const double tol = c_type == DType::f32 ? 1e-5 : (c_type == DType::bf16 ? 8e-3 : 1e-3);
      EXPECT_LT(max_rel_error(got, C), tol) << dtype_name(t) << " -> " << dtype_name(c_type);
    }
  }
  EXPECT_THROW(cuda.gemm_ex(false, false, 1, 1, 1, 1.0f, nullptr, 1, nullptr, 1, DType::bf16, 0.0f,
                            nullptr, 1, DType::f16),
               InvalidArgument);
}

}  // namespace
}  // namespace shardlab
