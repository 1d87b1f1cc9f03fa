// Every CUDA kernel against its CPU twin on random inputs: the same dispatching function runs once
// on the CPU device and once on the CUDA device. Bounds are relative to the largest reference
// value (max_rel_error): exact where the GPU does the same single float operation, 1e-6..1e-4
// where it may fuse multiply-adds, use its own expf/tanhf, or sum in another order.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/kernels/attention.hpp"
#include "core/kernels/crossentropy.hpp"
#include "core/kernels/elementwise.hpp"
#include "core/kernels/encoder.hpp"
#include "core/kernels/flash_attention.hpp"
#include "core/kernels/gelu.hpp"
#include "core/kernels/kernel_table.hpp"
#include "core/kernels/layernorm.hpp"
#include "core/kernels/linear.hpp"
#include "core/kernels/optim.hpp"
#include "core/kernels/residual.hpp"
#include "tests/cuda/cuda_test_util.hpp"

namespace shardlab {
namespace {

using testing::max_rel_error;
using testing::random_vector;
using testing::to_device;
using testing::to_device_as;
using testing::to_host;

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) return;
    cpu = make_cpu_device(t_cpu);
    gpu = make_cuda_device(t_gpu, 0);
  }
  // The GPU copy of a host vector, and the GPU result back.
  Buffer up(const std::vector<float>& v) { return to_device(*gpu, v); }
  std::vector<float> down(const Buffer& b) { return to_host(*gpu, b.data(), b.bytes() / 4); }

  MemoryTracker t_cpu{0}, t_gpu{0};
  std::unique_ptr<Device> cpu, gpu;
};

std::vector<int> random_ints(int n, int hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int> v(static_cast<size_t>(n));
  for (int& x : v) x = static_cast<int>(gen() % static_cast<uint32_t>(hi));
  return v;
}

TEST_F(CudaKernels, ElementwiseArrays) {
  SL_REQUIRE_CUDA();
  const int64_t n = 100003;  // not a multiple of the block size
  auto x = random_vector(n, 1), y = random_vector(n, 2);
  Buffer dx = up(x), dy = up(y);

  fill_array(*gpu, dx.f32(), 0.375f, 1000);
  fill_array(*cpu, x.data(), 0.375f, 1000);
  EXPECT_EQ(down(dx), x);
  scale_array(*gpu, dx.f32(), -1.5f, n);
  scale_array(*cpu, x.data(), -1.5f, n);
  EXPECT_EQ(down(dx), x);
  axpy(*gpu, dy.f32(), 0.3f, dx.f32(), n);
  axpy(*cpu, y.data(), 0.3f, x.data(), n);
  EXPECT_LT(max_rel_error(down(dy), y), 1e-6);  // y + a*x may become one FMA on the GPU

  // The sum of squares of the GPU's own y (it may differ from the CPU's in the last bit above):
  // double partials in another order than the CPU's loop, so equal to ~1e-15, not bit for bit.
  std::vector<float> gy = down(dy);
  const double want = sum_squares(*cpu, gy.data(), n);
  EXPECT_NEAR(sum_squares(*gpu, dy.f32(), n), want, 1e-12 * want);
}

TEST_F(CudaKernels, CastsRoundExactlyAsTheCpu) {
  SL_REQUIRE_CUDA();
  const int64_t n = 70001;
  auto x = random_vector(n, 3, -70000.0f, 70000.0f);  // past f16's range: Inf on both sides
  auto small = random_vector(n, 4, -1e-6f, 1e-6f);    // f16 subnormals
  x.insert(x.end(), small.begin(), small.end());
  x.push_back(NAN);
  const int64_t m = static_cast<int64_t>(x.size());
  Buffer dx = up(x);
  for (DType t : {DType::bf16, DType::f16, DType::f32}) {
    std::vector<uint16_t> host_cast(static_cast<size_t>(m) * 2);
    cast_from_f32(*cpu, host_cast.data(), t, x.data(), m);
    Buffer d16 = gpu->alloc(m * dtype_size(t), MemCategory::workspace);
    cast_from_f32(*gpu, d16.data(), t, dx.f32(), m);
    std::vector<uint16_t> gpu_cast(host_cast.size());
    gpu->copy_to_host(gpu_cast.data(), d16.data(), d16.bytes());
    EXPECT_EQ(std::memcmp(gpu_cast.data(), host_cast.data(), d16.bytes()), 0) << dtype_name(t);

    std::vector<float> back_cpu(static_cast<size_t>(m));
    cast_to_f32(*cpu, back_cpu.data(), host_cast.data(), t, m);
    Buffer back = gpu->alloc(m * 4, MemCategory::workspace);
    cast_to_f32(*gpu, back.f32(), d16.data(), t, m);
    auto back_gpu = down(back);
    EXPECT_EQ(std::memcmp(back_gpu.data(), back_cpu.data(), m * 4), 0) << dtype_name(t);
  }
}

TEST_F(CudaKernels, GeluAndResidual) {
  SL_REQUIRE_CUDA();
  const int64_t n = 65537;
  auto x = random_vector(n, 5, -4.0f, 4.0f), dout = random_vector(n, 6);
  std::vector<float> out(n), dx(n);
  Buffer dx_in = up(x), d_dout = up(dout), d_out = gpu->alloc(n * 4, MemCategory::workspace);
  gelu_forward(*cpu, out.data(), x.data(), n);
  gelu_forward(*gpu, d_out.f32(), dx_in.f32(), n);
  EXPECT_LT(max_rel_error(down(d_out), out), 1e-5);
  gelu_backward(*cpu, dx.data(), x.data(), dout.data(), n);
  gelu_backward(*gpu, d_dout.f32(), dx_in.f32(), d_dout.f32(), n);  // dx aliases dout
  EXPECT_LT(max_rel_error(down(d_dout), dx), 1e-5);

  residual_forward(*cpu, out.data(), out.data(), x.data(), n);
  residual_forward(*gpu, d_out.f32(), d_out.f32(), dx_in.f32(), n);
  EXPECT_LT(max_rel_error(down(d_out), out), 1e-5);
}

TEST_F(CudaKernels, BiasBroadcastAndBackward) {
  SL_REQUIRE_CUDA();
  const int N = 300, OC = 77;
  auto bias = random_vector(OC, 7), out = random_vector(N * OC, 8), dout = random_vector(N * OC, 9);
  auto dbias = random_vector(OC, 10);
  Buffer d_bias = up(bias), d_out = up(out), d_dout = up(dout), d_dbias = up(dbias);
  for (bool acc : {true, false}) {
    bias_broadcast(*cpu, out.data(), bias.data(), N, OC, acc);
    bias_broadcast(*gpu, d_out.f32(), d_bias.f32(), N, OC, acc);
    EXPECT_EQ(down(d_out), out) << "accumulate " << acc;
  }
  bias_backward(*cpu, dbias.data(), dout.data(), N, OC);
  bias_backward(*gpu, d_dbias.f32(), d_dout.f32(), N, OC);
  EXPECT_LT(max_rel_error(down(d_dbias), dbias), 1e-5);
}

TEST_F(CudaKernels, LayerNormForwardAndBackward) {
  SL_REQUIRE_CUDA();
  const int N = 513, C = 96;
  auto x = random_vector(N * C, 11, -2.0f, 3.0f), w = random_vector(C, 12),
       b = random_vector(C, 13);
  auto dout = random_vector(N * C, 14);
  std::vector<float> out(N * C), mean(N), rstd(N);
  auto dx = random_vector(N * C, 15), dw = random_vector(C, 16), db = random_vector(C, 17);
  Buffer d_x = up(x), d_w = up(w), d_b = up(b), d_dout = up(dout);
  Buffer d_out = up(out), d_mean = up(mean), d_rstd = up(rstd);
  Buffer d_dx = up(dx), d_dw = up(dw), d_db = up(db);
  layernorm_forward(*cpu, out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  layernorm_forward(*gpu, d_out.f32(), d_mean.f32(), d_rstd.f32(), d_x.f32(), d_w.f32(), d_b.f32(),
                    N, C);
  EXPECT_LT(max_rel_error(down(d_out), out), 1e-5);
  EXPECT_LT(max_rel_error(down(d_mean), mean), 1e-5);
  EXPECT_LT(max_rel_error(down(d_rstd), rstd), 1e-5);
  // Backward accumulates (+=) into non-zero gradients.
  layernorm_backward(*cpu, dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                     mean.data(), rstd.data(), N, C);
  layernorm_backward(*gpu, d_dx.f32(), d_dw.f32(), d_db.f32(), d_dout.f32(), d_x.f32(), d_w.f32(),
                     d_mean.f32(), d_rstd.f32(), N, C);
  EXPECT_LT(max_rel_error(down(d_dx), dx), 1e-5);
  EXPECT_LT(max_rel_error(down(d_dw), dw), 1e-4);
  EXPECT_LT(max_rel_error(down(d_db), db), 1e-4);
}

TEST_F(CudaKernels, AttentionForwardAndBackward) {
  SL_REQUIRE_CUDA();
  const int B = 2, T = 37, C = 48, NH = 3;
  auto qkv = random_vector(B * T * 3 * C, 21), dout = random_vector(B * T * C, 22);
  std::vector<float> out(B * T * C), att(B * NH * T * T), dqkv(qkv.size());
  Buffer d_qkv = up(qkv), d_dout = up(dout), d_out = up(out), d_att = up(att), d_dqkv = up(dqkv);
  attention_forward(*cpu, out.data(), att.data(), qkv.data(), B, T, C, NH);
  attention_forward(*gpu, d_out.f32(), d_att.f32(), d_qkv.f32(), B, T, C, NH);
  EXPECT_LT(max_rel_error(down(d_att), att), 1e-5);
  EXPECT_LT(max_rel_error(down(d_out), out), 1e-5);
  // The causal mask: exact zeros above the diagonal.
  auto g_att = down(d_att);
  for (int t = 0; t < T; ++t)
    for (int j = t + 1; j < T; ++j) ASSERT_EQ(g_att[static_cast<size_t>(t) * T + j], 0.0f);
  attention_backward(*cpu, dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  attention_backward(*gpu, d_dqkv.f32(), d_dout.f32(), d_qkv.f32(), d_att.f32(), B, T, C, NH);
  EXPECT_LT(max_rel_error(down(d_dqkv), dqkv), 1e-4);
}

// Flash attention's CUDA kernels against the CPU's on random inputs: T of one position, past
// several tiles and not a multiple of any, GPT-2's heads (12 of 64) as packed qkv views (row
// stride 3C), grouped and multi-query heads; f32, bf16 and f16 tensors. Forward: out and lse from
// the same inputs. Backward: the GPU's kernels on the CPU's out and lse, so each direction is
// checked alone. Both sides sum in fp32 in another order; a 16-bit result is then rounded once on
// each side, so two results are at most one unit in the last place apart: 2^-7 of the value for
// bf16, 2^-10 for f16 (bounds below relative to the largest reference value).
TEST_F(CudaKernels, FlashAttentionForwardAndBackward) {
  SL_REQUIRE_CUDA();
  struct Case {
    int B, T, NH, NKV, hs;
    bool packed;  // q, k, v as views of one (B, T, 3C) buffer, dq, dk, dv likewise
  };
  const Case cases[] = {{1, 1, 1, 1, 8, false},
                        {2, 150, 4, 2, 32, false},
                        {1, 300, 12, 12, 64, true},
                        {2, 70, 4, 1, 16, false}};
  for (const Case& c : cases)
    for (DType t : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(::testing::Message()
                   << dtype_name(t) << " B " << c.B << " T " << c.T << " NH " << c.NH << " NKV "
                   << c.NKV << " hs " << c.hs << (c.packed ? " packed" : ""));
      const FlashShape s{c.B, c.T, c.NH, c.NKV, c.hs, t};
      const int64_t rows = static_cast<int64_t>(s.B) * s.T;
      const int64_t qc = static_cast<int64_t>(s.NH) * s.hs, kc = static_cast<int64_t>(s.NKV) * s.hs;
      const int64_t es = static_cast<int64_t>(dtype_size(t));
      // Where q, k, v (and dq, dk, dv) sit in their buffer, in elements, and their row strides.
      const int64_t ldq = c.packed ? qc + 2 * kc : qc, ldk = c.packed ? qc + 2 * kc : kc;
      const int64_t q_at = 0, k_at = c.packed ? qc : 0, v_at = c.packed ? qc + kc : 0;
      auto bytes_of = [&](int64_t n, uint32_t seed) {  // n random values of t, as stored
        const auto v = random_vector(n, seed);
        std::vector<char> b(static_cast<size_t>(n * es));
        for (int64_t i = 0; i < n; ++i) store_from_f32(b.data(), static_cast<size_t>(i), t, v[i]);
        return b;
      };
      std::vector<char> q, k, v;
      if (c.packed) {
        q = bytes_of(rows * ldq, 41);
      } else {
        q = bytes_of(rows * qc, 41);
        k = bytes_of(rows * kc, 42);
        v = bytes_of(rows * kc, 43);
      }
      const std::vector<char> dout = bytes_of(rows * qc, 44);
      std::vector<char>& kbuf = c.packed ? q : k;
      std::vector<char>& vbuf = c.packed ? q : v;
      auto in = [&](const void* base, int64_t at, int64_t ld) {
        return RowsIn{static_cast<const char*>(base) + at * es, ld};
      };
      auto io = [&](void* base, int64_t at, int64_t ld) {
        return RowsOut{static_cast<char*>(base) + at * es, ld};
      };
      // CPU
      std::vector<char> out(static_cast<size_t>(rows * qc * es)), dq(q.size(), 0),
          dk(kbuf.size(), 0), dv(vbuf.size(), 0);
      std::vector<float> lse(static_cast<size_t>(s.B) * s.NH * s.T);
      flash_attention_forward(*cpu, s, io(out.data(), 0, qc), lse.data(), in(q.data(), q_at, ldq),
                              in(kbuf.data(), k_at, ldk), in(vbuf.data(), v_at, ldk));
      std::vector<char>& dkbuf = c.packed ? dq : dk;
      std::vector<char>& dvbuf = c.packed ? dq : dv;
      flash_attention_backward(*cpu, s, io(dq.data(), q_at, ldq), io(dkbuf.data(), k_at, ldk),
                               io(dvbuf.data(), v_at, ldk), in(dout.data(), 0, qc),
                               in(q.data(), q_at, ldq), in(kbuf.data(), k_at, ldk),
                               in(vbuf.data(), v_at, ldk), in(out.data(), 0, qc), lse.data());
      // GPU
      Buffer g_q = to_device_as(*gpu, q), g_do = to_device_as(*gpu, dout);
      Buffer g_k = c.packed ? Buffer() : to_device_as(*gpu, k);
      Buffer g_v = c.packed ? Buffer() : to_device_as(*gpu, v);
      void* gk = c.packed ? g_q.data() : g_k.data();
      void* gv = c.packed ? g_q.data() : g_v.data();
      Buffer g_out = gpu->alloc(static_cast<int64_t>(out.size()), MemCategory::workspace);
      Buffer g_lse = gpu->alloc(static_cast<int64_t>(lse.size() * 4), MemCategory::workspace);
      flash_attention_forward(*gpu, s, io(g_out.data(), 0, qc), g_lse.f32(),
                              in(g_q.data(), q_at, ldq), in(gk, k_at, ldk), in(gv, v_at, ldk));
      Buffer c_out = to_device_as(*gpu, out), c_lse = to_device_as(*gpu, lse);
      Buffer g_dq = gpu->alloc_zeros(static_cast<int64_t>(dq.size()), MemCategory::workspace);
      Buffer g_dk = c.packed
                        ? Buffer()
                        : gpu->alloc_zeros(static_cast<int64_t>(dk.size()), MemCategory::workspace);
      Buffer g_dv = c.packed
                        ? Buffer()
                        : gpu->alloc_zeros(static_cast<int64_t>(dv.size()), MemCategory::workspace);
      void* gdk = c.packed ? g_dq.data() : g_dk.data();
      void* gdv = c.packed ? g_dq.data() : g_dv.data();
      flash_attention_backward(*gpu, s, io(g_dq.data(), q_at, ldq), io(gdk, k_at, ldk),
                               io(gdv, v_at, ldk), in(g_do.data(), 0, qc),
                               in(g_q.data(), q_at, ldq), in(gk, k_at, ldk), in(gv, v_at, ldk),
                               in(c_out.data(), 0, qc), c_lse.f32());
      // Compared as fp32 values, each side widened from t.
      auto widen = [&](const std::vector<char>& b) {
        std::vector<float> f(b.size() / static_cast<size_t>(es));
        for (size_t i = 0; i < f.size(); ++i) f[i] = load_as_f32(b.data(), i, t);
        return f;
      };
      auto widen_gpu = [&](const Buffer& b) {
        std::vector<char> h(static_cast<size_t>(b.bytes()));
        gpu->copy_to_host(h.data(), b.data(), b.bytes());
        return widen(h);
      };
      const double tol_out = t == DType::f32 ? 1e-5 : t == DType::bf16 ? 1e-2 : 2e-3;
      const double tol_grad = t == DType::f32 ? 1e-4 : tol_out;
      EXPECT_LT(max_rel_error(widen_gpu(g_out), widen(out)), tol_out) << "out";
      EXPECT_LT(max_rel_error(down(g_lse), lse), 1e-5) << "lse";  // fp32 in every case
      EXPECT_LT(max_rel_error(widen_gpu(g_dq), widen(dq)), tol_grad) << "dq";
      if (!c.packed) {
        EXPECT_LT(max_rel_error(widen_gpu(g_dk), widen(dk)), tol_grad) << "dk";
        EXPECT_LT(max_rel_error(widen_gpu(g_dv), widen(dv)), tol_grad) << "dv";
      }
    }
}

// Device::gemm_ex with 16-bit inputs: cuBLAS GemmEx against the CPU's widened GEMM
// (core/device/cpu_gemm.hpp) on the same values, every transpose, beta 0 and 1, C in f32 or the
// inputs' dtype (beta reads C as stored). Both sum exact products in fp32 in another order (1e-5
// of the largest value at K = 300); a 16-bit C is rounded once on each side (one unit in the last
// place apart at most: 2^-7 for bf16, 2^-10 for f16).
TEST_F(CudaKernels, GemmExMatchesTheCpu) {
  SL_REQUIRE_CUDA();
  const int M = 70, N = 45, K = 300;
  for (DType ab : {DType::bf16, DType::f16})
    for (DType c : {DType::f32, ab})
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (float beta : {0.0f, 1.0f}) {
            SCOPED_TRACE(::testing::Message() << dtype_name(ab) << " -> " << dtype_name(c) << " ta "
                                              << ta << " tb " << tb << " beta " << beta);
            const int lda = ta ? M : K, ldb = tb ? K : N;
            auto as16 = [](const std::vector<float>& f, DType t) {
              std::vector<uint16_t> b(f.size());
              for (size_t i = 0; i < f.size(); ++i) store_from_f32(b.data(), i, t, f[i]);
              return b;
            };
            const auto a = as16(random_vector(static_cast<int64_t>(M) * K, 61), ab);
            const auto b = as16(random_vector(static_cast<int64_t>(K) * N, 62), ab);
            const auto c0 = random_vector(static_cast<int64_t>(M) * N, 63);
            std::vector<float> c32 = c0;
            std::vector<uint16_t> c16 = as16(c0, c == DType::f32 ? ab : c);
            void* cc = c == DType::f32 ? static_cast<void*>(c32.data()) : c16.data();
            Buffer ga = to_device_as(*gpu, a), gb = to_device_as(*gpu, b);
            Buffer gc = c == DType::f32 ? to_device_as(*gpu, c32) : to_device_as(*gpu, c16);
            cpu->gemm_ex(ta, tb, M, N, K, 0.5f, a.data(), lda, b.data(), ldb, ab, beta, cc, N, c);
            gpu->gemm_ex(ta, tb, M, N, K, 0.5f, ga.data(), lda, gb.data(), ldb, ab, beta, gc.data(),
                         N, c);
            std::vector<float> want(c32.size()), got(c32.size());
            std::vector<char> raw(static_cast<size_t>(gc.bytes()));
            gpu->copy_to_host(raw.data(), gc.data(), gc.bytes());
            for (size_t i = 0; i < want.size(); ++i) {
              want[i] = c == DType::f32 ? c32[i] : load_as_f32(c16.data(), i, c);
              got[i] = load_as_f32(raw.data(), i, c);
            }
            const double tol = c == DType::f32 ? 1e-5 : c == DType::bf16 ? 1e-2 : 2e-3;
            EXPECT_LT(max_rel_error(got, want), tol);
          }
  EXPECT_EQ(gpu->gemm_path(DType::f32), "cuBLAS sgemm");
  EXPECT_EQ(gpu->gemm_path(DType::bf16), "cuBLAS GemmEx, bf16 inputs, CUBLAS_COMPUTE_32F");
}

// The batched form (cublasGemmStridedBatchedEx) against the CPU's, bf16 inputs, f32 C.
TEST_F(CudaKernels, GemmExBatchedBf16) {
  SL_REQUIRE_CUDA();
  const int M = 33, N = 65, K = 130, batch = 3;
  auto a = random_vector(batch * M * K, 51), b = random_vector(batch * K * N, 52);
  std::vector<uint16_t> a16(a.size()), b16(b.size());
  for (size_t i = 0; i < a.size(); ++i) a16[i] = f32_to_bf16_bits(a[i]);
  for (size_t i = 0; i < b.size(); ++i) b16[i] = f32_to_bf16_bits(b[i]);
  std::vector<float> c(static_cast<size_t>(batch) * M * N);
  cpu->gemm_ex_batched(false, true, M, N, K, 1.0f, a16.data(), K, M * K, b16.data(), K, K * N,
                       DType::bf16, 0.0f, c.data(), N, M * N, DType::f32, batch);
  Buffer ga = to_device_as(*gpu, a16), gb = to_device_as(*gpu, b16), gc = up(c);
  gpu->gemm_ex_batched(false, true, M, N, K, 1.0f, ga.data(), K, M * K, gb.data(), K, K * N,
                       DType::bf16, 0.0f, gc.data(), N, M * N, DType::f32, batch);
  EXPECT_LT(max_rel_error(down(gc), c), 1e-5);
}

TEST_F(CudaKernels, CrossEntropyForwardAndBackward) {
  SL_REQUIRE_CUDA();
  const int N = 129, V = 1000;
  auto logits = random_vector(N * V, 31, -8.0f, 8.0f);
  auto targets = random_ints(N, V, 32);
  std::vector<float> probs = logits, losses(N), dlogits(N * V);
  Buffer d_probs = up(logits), d_losses = up(losses), d_dlogits = up(dlogits);
  Buffer d_targets = to_device_as(*gpu, targets);
  crossentropy_forward(*cpu, probs.data(), losses.data(), targets.data(), N, V);
  crossentropy_forward(*gpu, d_probs.f32(), d_losses.f32(), d_targets.as<int>(), N, V);
  EXPECT_LT(max_rel_error(down(d_probs), probs), 1e-5);
  EXPECT_LT(max_rel_error(down(d_losses), losses), 1e-5);
  EXPECT_NEAR(mean_loss(*gpu, d_losses.f32(), N), mean_loss(*cpu, losses.data(), N), 1e-5);
  crossentropy_backward(*cpu, dlogits.data(), probs.data(), targets.data(), 1.0f / N, N, V);
  crossentropy_backward(*gpu, d_dlogits.f32(), d_probs.f32(), d_targets.as<int>(), 1.0f / N, N, V);
  EXPECT_LT(max_rel_error(down(d_dlogits), dlogits), 1e-5);

  // Softmax only (no targets): losses untouched.
  Buffer d_soft = up(logits);
  crossentropy_forward(*gpu, d_soft.f32(), nullptr, nullptr, N, V);
  EXPECT_LT(max_rel_error(down(d_soft), probs), 1e-5);

  // A target outside the vocabulary cannot throw on the GPU: its loss is NaN, the others stand.
  targets[5] = V;
  Buffer d_bad = to_device_as(*gpu, targets), d_p2 = up(logits);
  crossentropy_forward(*gpu, d_p2.f32(), d_losses.f32(), d_bad.as<int>(), N, V);
  auto got = down(d_losses);
  EXPECT_TRUE(std::isnan(got[5]));
  EXPECT_NEAR(got[4], losses[4], 1e-5 * std::fabs(losses[4]));
}

TEST_F(CudaKernels, EncoderIsBitIdenticalToTheCpu) {
  SL_REQUIRE_CUDA();
  const int B = 3, T = 50, C = 40, V = 17;  // few tokens: many rows share a wte row
  auto wte = random_vector(V * C, 41), wpe = random_vector(T * C, 42);
  auto dout = random_vector(B * T * C, 43);
  auto tokens = random_ints(B * T, V, 44);
  auto dwte = random_vector(V * C, 45), dwpe = random_vector(T * C, 46);
  std::vector<float> out(B * T * C);
  Buffer d_wte = up(wte), d_wpe = up(wpe), d_dout = up(dout), d_out = up(out);
  Buffer d_dwte = up(dwte), d_dwpe = up(dwpe), d_tokens = to_device_as(*gpu, tokens);
  encoder_forward(*cpu, out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, V);
  encoder_forward(*gpu, d_out.f32(), d_tokens.as<int>(), d_wte.f32(), d_wpe.f32(), B, T, C, V);
  EXPECT_EQ(down(d_out), out);
  encoder_backward(*cpu, dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, V);
  encoder_backward(*gpu, d_dwte.f32(), d_dwpe.f32(), d_dout.f32(), d_tokens.as<int>(), B, T, C, V);
  EXPECT_EQ(down(d_dwte), dwte);  // same additions in the same order
  EXPECT_EQ(down(d_dwpe), dwpe);
}

TEST_F(CudaKernels, LinearThroughCublasAndBiasKernels) {
  SL_REQUIRE_CUDA();
  const int N = 200, IC = 64, OC = 96;
  auto inp = random_vector(N * IC, 51), w = random_vector(IC * OC, 52), b = random_vector(OC, 53);
  auto out = random_vector(N * OC, 54), dout = random_vector(N * OC, 55);
  std::vector<float> dinp(N * IC);
  auto dw = random_vector(IC * OC, 56), db = random_vector(OC, 57);
  Buffer d_inp = up(inp), d_w = up(w), d_b = up(b), d_out = up(out), d_dout = up(dout);
  Buffer d_dinp = up(dinp), d_dw = up(dw), d_db = up(db);
  linear_forward(*cpu, out.data(), inp.data(), w.data(), b.data(), N, IC, OC, true);
  linear_forward(*gpu, d_out.f32(), d_inp.f32(), d_w.f32(), d_b.f32(), N, IC, OC, true);
  EXPECT_LT(max_rel_error(down(d_out), out), 1e-5);
  linear_backward(*cpu, dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, IC,
                  OC);
  linear_backward(*gpu, d_dinp.f32(), d_dw.f32(), d_db.f32(), d_dout.f32(), d_inp.f32(), d_w.f32(),
                  N, IC, OC);
  EXPECT_LT(max_rel_error(down(d_dinp), dinp), 1e-5);
  EXPECT_LT(max_rel_error(down(d_dw), dw), 1e-5);
  EXPECT_LT(max_rel_error(down(d_db), db), 1e-5);
}

TEST_F(CudaKernels, AdamWAndSgdSteps) {
  SL_REQUIRE_CUDA();
  const int64_t n = 50001;
  auto p = random_vector(n, 61), g = random_vector(n, 62), m = random_vector(n, 63, 0.0f, 0.1f);
  auto v = random_vector(n, 64, 0.0f, 0.01f);
  Buffer dp = up(p), dg = up(g), dm = up(m), dv = up(v);
  for (int t = 1; t <= 3; ++t) {
    adamw_update(*cpu, p.data(), g.data(), m.data(), v.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
                 t);
    adamw_update(*gpu, dp.f32(), dg.f32(), dm.f32(), dv.f32(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
                 t);
  }
  EXPECT_LT(max_rel_error(down(dp), p), 1e-6);
  EXPECT_LT(max_rel_error(down(dm), m), 1e-6);
  EXPECT_LT(max_rel_error(down(dv), v), 1e-6);

  auto buf = random_vector(n, 65);
  Buffer dbuf = up(buf);
  sgd_update(*cpu, p.data(), g.data(), buf.data(), n, 0.05f, 0.9f, 0.01f);
  sgd_update(*gpu, dp.f32(), dg.f32(), dbuf.f32(), n, 0.05f, 0.9f, 0.01f);
  sgd_update(*cpu, p.data(), g.data(), nullptr, n, 0.05f, 0.0f, 0.0f);
  sgd_update(*gpu, dp.f32(), dg.f32(), nullptr, n, 0.05f, 0.0f, 0.0f);
  EXPECT_LT(max_rel_error(down(dp), p), 1e-6);
  EXPECT_LT(max_rel_error(down(dbuf), buf), 1e-6);
}

// The CUDA table's launchers refuse a CPU device instead of handing host pointers to a kernel.
TEST(CudaKernelsDispatch, LaunchersRejectACpuDevice) {
  MemoryTracker tracker(0);
  auto cpu = make_cpu_device(tracker);
  float x[4] = {1, 2, 3, 4};
  const KernelTable& cuda = cuda_kernel_table();
  EXPECT_THROW(cuda.gelu->forward(*cpu, x, x, 4), InvalidArgument);
  EXPECT_THROW(cuda.elementwise->fill(*cpu, x, 0.0f, 4), InvalidArgument);
  EXPECT_EQ(x[0], 1.0f);
}

// NaN goes through the GPU's softmax as through the CPU's (the shared fastmath exp), and
// all_finite finds a NaN or Inf on the GPU (through sum_squares) for every dtype.
TEST_F(CudaKernels, NaNPropagatesAndAllFiniteFindsIt) {
  SL_REQUIRE_CUDA();
  const int N = 4, V = 33;
  auto logits = random_vector(N * V, 91);
  logits[2 * V + 7] = std::nanf("");
  std::vector<int> targets = {0, 1, 2, 3};
  std::vector<float> losses(N);
  Buffer d_probs = up(logits), d_losses = up(losses), d_targets = to_device_as(*gpu, targets);
  crossentropy_forward(*gpu, d_probs.f32(), d_losses.f32(), d_targets.as<int>(), N, V);
  auto got = down(d_losses);
  EXPECT_TRUE(std::isfinite(got[1]));
  EXPECT_TRUE(std::isnan(got[2]));

  const int64_t n = 100003;
  auto x = random_vector(n, 92);
  Buffer dx = up(x);
  EXPECT_TRUE(all_finite(*gpu, dx.data(), DType::f32, n));
  for (float bad : {std::nanf(""), INFINITY}) {
    x[n - 1] = bad;
    dx = up(x);
    EXPECT_FALSE(all_finite(*gpu, dx.data(), DType::f32, n));
    Buffer half = gpu->alloc(n * 2, MemCategory::workspace);
    cast_from_f32(*gpu, half.data(), DType::bf16, dx.f32(), n);
    EXPECT_FALSE(all_finite(*gpu, half.data(), DType::bf16, n));
  }
}

}  // namespace
}  // namespace shardlab
