// Model compute on one rank with one BLAS thread: a training step (forward + backward) of a preset,
// against OpenBLAS sgemm 2048^3 as the machine's ceiling. The ratio of the two FLOP/s counters is
// the step's efficiency.
//
// Model FLOPs per step (PaLM appendix B style, counting what the kernels compute):
//   6 * P * B * T             every parameter in one multiply-add forward, two backward
//                             (P = all parameters; wte does the tied head's matmul; wpe, biases
//                             and LayerNorm, ~1% of P for `medium`, are counted but do no matmul)
// + 12 * L * B * T^2 * C      attention QK^T and PV, forward 4 B T^2 C per layer, backward twice
// that
//                             (over the full T x T by convention; the GEMMs skip the causal
//                             blocks above the diagonal, attention.hpp, and compute fewer)
//
// Rates are per CPU time of the benchmark thread: with one BLAS thread all the work runs on it, so
// other processes sharing the machine do not inflate the figures (wall time is reported too).
//
// BM_StepGemms runs only the GEMMs of a step, at the model's own shapes: the ceiling at those
// shapes, which small GEMMs keep below the 2048^3 rate (docs/bench/perf-notes.md). BM_FmaPeak is
// the core's own ceiling: fused multiply-adds with no memory traffic at all, 256 and 512 bits wide,
// which no GEMM reaches (packing, loads, the edges of small matrices).
//
//   build/bin/bench_model --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "bench/flags.hpp"
#include "core/base/cpu_simd.hpp"  // SL_CPU_SIMD_DISPATCH: x86-64 with GCC or Clang
#include "core/kernels/attention.hpp"
#include "core/model/gpt.hpp"

#if SL_CPU_SIMD_DISPATCH
#include <immintrin.h>
#endif

using namespace shardlab;

namespace {

double step_flops(const GPTConfig& c, int B, int T) {
  return 6.0 * static_cast<double>(c.num_params()) * B * T +
         12.0 * c.n_layer * B * static_cast<double>(T) * T * c.n_embd;
}

void BM_TrainStep(benchmark::State& state, const char* preset) {
  set_blas_threads(1);
  const int B = static_cast<int>(state.range(0)), T = static_cast<int>(state.range(1));
  MemoryTracker tracker(0);
  auto dev = make_cpu_device(tracker);
  GPTConfig cfg = GPTConfig::preset(preset);
  if (T > cfg.max_seq_len) {
    state.SkipWithError("T exceeds the preset's max_seq_len");
    return;
  }
  GPT gpt(*dev, cfg, 1);
  std::mt19937 gen(2);
  std::vector<int> tokens(static_cast<size_t>(B) * T), targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int>(gen() % static_cast<unsigned>(cfg.vocab_size));
    targets[i] = static_cast<int>(gen() % static_cast<unsigned>(cfg.vocab_size));
  }
  float loss = 0;
  for (auto _ : state) {
    gpt.zero_grad();
    loss = gpt.forward(tokens.data(), targets.data(), B, T);
    gpt.backward();
    benchmark::DoNotOptimize(loss);
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(step_flops(cfg, B, T), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(B) * T, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["params"] = static_cast<double>(cfg.num_params());
  state.counters["loss"] = loss;
  state.counters["peak_MiB"] =
      benchmark::Counter(static_cast<double>(tracker.peak_total()) / (1 << 20));
}

void BM_Sgemm(benchmark::State& state) {
  set_blas_threads(1);
  const int n = static_cast<int>(state.range(0));
  MemoryTracker tracker(0);
  auto dev = make_cpu_device(tracker);
  const int64_t bytes = static_cast<int64_t>(n) * n * 4;
  Buffer a = dev->alloc(bytes, MemCategory::workspace),
         b = dev->alloc(bytes, MemCategory::workspace);
  Buffer c = dev->alloc_zeros(bytes, MemCategory::workspace);
  for (int64_t i = 0; i < static_cast<int64_t>(n) * n; ++i) {
    a.f32()[i] = static_cast<float>(i % 7) * 0.1f;
    b.f32()[i] = static_cast<float>(i % 5) * 0.1f;
  }
  for (auto _ : state) {
    dev->gemm(false, false, n, n, n, 1.0f, a.f32(), n, b.f32(), n, 0.0f, c.f32(), n);
    benchmark::DoNotOptimize(c.f32()[0]);
  }
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * n * n * static_cast<double>(n),
                                                benchmark::Counter::kIsIterationInvariantRate);
}

#if SL_CPU_SIMD_DISPATCH
// The core's fp32 FMA rate: 12 independent chains acc = acc * b + c (more than the FMA units'
// latency times their count on current x86 cores, so the chains never wait on each other), no
// loads or stores in the loop. The empty asm keeps every accumulator live and in a register.
#define SL_FMA_PEAK_LOOP(V, SET1, FMADD)                                                           \
  V a0 = SET1(seed), a1 = SET1(seed + 1), a2 = SET1(seed + 2), a3 = SET1(seed + 3);                \
  V a4 = SET1(seed + 4), a5 = SET1(seed + 5), a6 = SET1(seed + 6), a7 = SET1(seed + 7);            \
  V a8 = SET1(seed + 8), a9 = SET1(seed + 9), a10 = SET1(seed + 10), a11 = SET1(seed + 11);        \
  const V b = SET1(0.999999f), c = SET1(1e-7f);                                                    \
  for (int64_t i = 0; i < iters; ++i) {                                                            \
    a0 = FMADD(a0, b, c), a1 = FMADD(a1, b, c), a2 = FMADD(a2, b, c);                              \
    a3 = FMADD(a3, b, c), a4 = FMADD(a4, b, c), a5 = FMADD(a5, b, c);                              \
    a6 = FMADD(a6, b, c), a7 = FMADD(a7, b, c), a8 = FMADD(a8, b, c);                              \
    a9 = FMADD(a9, b, c), a10 = FMADD(a10, b, c), a11 = FMADD(a11, b, c);                          \
    asm volatile(""                                                                                \
                 : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(a6), "+x"(a7), \
                   "+x"(a8), "+x"(a9), "+x"(a10), "+x"(a11));                                      \
  }                                                                                                \
  V s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;                               \
  return s[0];

__attribute__((target("avx2,fma"))) float fma_chains_256(int64_t iters, float seed) {
  SL_FMA_PEAK_LOOP(__m256, _mm256_set1_ps, _mm256_fmadd_ps)
}
__attribute__((target("avx512f"))) float fma_chains_512(int64_t iters, float seed) {
  SL_FMA_PEAK_LOOP(__m512, _mm512_set1_ps, _mm512_fmadd_ps)
}
#undef SL_FMA_PEAK_LOOP
#endif

void BM_FmaPeak(benchmark::State& state) {
  const int bits = static_cast<int>(state.range(0));
#if SL_CPU_SIMD_DISPATCH
  const bool ok = bits == 256 ? __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
                              : __builtin_cpu_supports("avx512f");
  if (!ok) {
    state.SkipWithError(bits == 256 ? "this CPU has no AVX2 FMA" : "this CPU has no AVX-512F");
    return;
  }
  constexpr int64_t kIters = 1 << 22;  // 7 ms (256 bits) or 14 ms (512) at 115 GFLOP/s
  float sink = 0;
  for (auto _ : state) {
    sink += bits == 256 ? fma_chains_256(kIters, 1.0f) : fma_chains_512(kIters, 1.0f);
  }
  benchmark::DoNotOptimize(sink);
  const double flops = 12.0 * kIters * (bits / 32) * 2;  // 12 chains, lanes, multiply + add
  state.counters["FLOP/s"] =
      benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
#else
  state.SkipWithError("the FMA peak is measured on x86-64 only (AVX2 FMA, AVX-512F)");
#endif
}

// The GEMMs alone of one training step of a preset: every Device::gemm and gemm_batched call
// that the model's forward and backward make (block.cpp's linears, attention.cpp's per-head
// products, head.cpp's tied head), with their shapes, transposes, strides and betas, run back to
// back on one thread. Its counters bound what a whole step can reach when everything outside
// GEMM costs nothing:
//   gemm_gflops    FLOP/s of the GEMMs as computed (2 M N K each; attention's causal blocks)
//   model_gflops   the step's model FLOPs (bench_train_step's 6 Psi + 12 L C T per token, times
//                  B T) over the time of these GEMMs: the best model_gflops a step of this shape
//                  can show on this machine, to compare with BM_Sgemm's 2048^3 rate
struct GemmCall {
  bool ta, tb;
  int m, n, k;
  int lda, ldb, ldc;
  int64_t sa, sb, sc;  // batch strides; batch 0 is a plain gemm
  int batch;
  float beta;
  int repeat;  // calls of this form in one step
};

std::vector<GemmCall> step_gemms(const GPTConfig& c, int B, int T, int block) {
  const int N = B * T, C = c.n_embd, V = c.vocab_size, NH = c.n_head, hs = C / NH;
  const int L = c.n_layer;
  const int64_t tt = static_cast<int64_t>(T) * T;
  std::vector<GemmCall> g;
  // linear.cpp, per (in, out) of the block: forward, dinp, dweight (+=).
  for (auto [ic, oc] : {std::pair{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}}) {
    g.push_back({false, false, N, oc, ic, ic, oc, oc, 0, 0, 0, 0, 0.0f, L});
    g.push_back({false, true, N, ic, oc, oc, oc, ic, 0, 0, 0, 0, 0.0f, L});
    g.push_back({true, false, ic, oc, N, ic, oc, oc, 0, 0, 0, 0, 1.0f, L});
  }
  // attention.cpp, per layer and sequence, NH heads per call, per causal block: query block
  // [r0, r1) against keys [0, r1), key block [r0, r1) against queries [r0, T).
  const int rB = L * B;
  for (int r0 = 0; r0 < T; r0 += block) {
    const int r1 = std::min(T, r0 + block), m = r1 - r0, q = T - r0;
    g.push_back({false, true, m, r1, hs, 3 * C, 3 * C, T, hs, hs, tt, NH, 0.0f, rB});   // S = QK^T
    g.push_back({false, false, m, hs, r1, T, 3 * C, C, tt, hs, hs, NH, 0.0f, rB});      // P V
    g.push_back({false, true, m, r1, hs, C, 3 * C, T, hs, hs, tt, NH, 0.0f, rB});       // dP
    g.push_back({true, false, m, hs, q, T, C, 3 * C, tt, hs, hs, NH, 0.0f, rB});        // dV
    g.push_back({false, false, m, hs, r1, T, 3 * C, 3 * C, tt, hs, hs, NH, 0.0f, rB});  // dQ
    g.push_back({true, false, m, hs, q, T, 3 * C, 3 * C, tt, hs, hs, NH, 0.0f, rB});    // dK
  }
  // head.cpp: logits, dwte (+=), dlnf.
  g.push_back({false, true, N, V, C, C, C, V, 0, 0, 0, 0, 0.0f, 1});
  g.push_back({true, false, V, C, N, V, C, C, 0, 0, 0, 0, 1.0f, 1});
  g.push_back({false, false, N, C, V, V, C, C, 0, 0, 0, 0, 0.0f, 1});
  return g;
}

void BM_StepGemms(benchmark::State& state, const char* preset) {
  set_blas_threads(1);
  const int B = static_cast<int>(state.range(0)), T = static_cast<int>(state.range(1));
  MemoryTracker tracker(0);
  auto dev = make_cpu_device(tracker);
  const GPTConfig cfg = GPTConfig::preset(preset);
  // block 0: the CPU's own causal block (attention_causal_block); T: whole sequences.
  const int block = attention_causal_block(*dev, T, static_cast<int>(state.range(2)));
  const std::vector<GemmCall> calls = step_gemms(cfg, B, T, block);
  // One buffer per operand, as large as the largest call reads or writes (every view of a call
  // stays inside: rows * ld elements, per batch entry stride apart).
  int64_t need = 0;
  double flops = 0;
  for (const GemmCall& g : calls) {
    const int64_t rows_a = g.ta ? g.k : g.m, rows_b = g.tb ? g.n : g.k;
    const int64_t nb = g.batch > 0 ? g.batch : 1;
    need = std::max({need, rows_a * g.lda + (nb - 1) * g.sa, rows_b * g.ldb + (nb - 1) * g.sb,
                     static_cast<int64_t>(g.m) * g.ldc + (nb - 1) * g.sc});
    flops += 2.0 * g.m * g.n * static_cast<double>(g.k) * nb * g.repeat;
  }
  Buffer a = dev->alloc(need * 4, MemCategory::workspace),
         b = dev->alloc(need * 4, MemCategory::workspace);
  Buffer c = dev->alloc_zeros(need * 4, MemCategory::workspace);
  for (int64_t i = 0; i < need; ++i) {
    a.f32()[i] = static_cast<float>(i % 7) * 0.01f;
    b.f32()[i] = static_cast<float>(i % 5) * 0.01f;
  }
  for (auto _ : state) {
    for (const GemmCall& g : calls) {
      for (int r = 0; r < g.repeat; ++r) {
        if (g.batch > 0) {
          dev->gemm_batched(g.ta, g.tb, g.m, g.n, g.k, 1.0f, a.f32(), g.lda, g.sa, b.f32(), g.ldb,
                            g.sb, g.beta, c.f32(), g.ldc, g.sc, g.batch);
        } else {
          dev->gemm(g.ta, g.tb, g.m, g.n, g.k, 1.0f, a.f32(), g.lda, b.f32(), g.ldb, g.beta,
                    c.f32(), g.ldc);
        }
      }
    }
    benchmark::DoNotOptimize(c.f32()[0]);
  }
  const double model_flops = cfg.flops_per_token(T) * B * T;
  state.counters["gemm_gflops"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["model_gflops"] =
      benchmark::Counter(model_flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

BENCHMARK_CAPTURE(BM_StepGemms, small, "small")
    ->ArgNames({"B", "T", "block"})
    ->ArgsProduct({{4}, {128}, {0, 128, 64, 16}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_StepGemms, medium, "medium")
    ->ArgNames({"B", "T", "block"})
    ->ArgsProduct({{4}, {128}, {0, 128}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TrainStep, medium, "medium")
    ->ArgNames({"B", "T"})
    ->Args({4, 256})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TrainStep, small, "small")
    ->ArgNames({"B", "T"})
    ->Args({8, 256})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Sgemm)->ArgNames({"n"})->Arg(2048)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FmaPeak)->ArgNames({"bits"})->Arg(256)->Arg(512)->Unit(benchmark::kMillisecond);

// BENCHMARK_MAIN(), with bench/flags.hpp's --help and library notice.
int main(int argc, char** argv) {
  shardlab::bench::initialize(&argc, argv, "bench_model",
                              "one rank's training step of a preset against OpenBLAS sgemm "
                              "2048^3 and the core's FMA peak (model FLOP/s); the step's GEMMs "
                              "alone (BM_StepGemms)");
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
