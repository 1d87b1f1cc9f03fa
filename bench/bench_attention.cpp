// Attention and GEMMs at the modern compute's dtypes on one rank with one BLAS thread:
//
// BM_Attention/<kind>/<dtype>/T: one causal self-attention forward and backward of GPT-2's shape
//   (12 heads of 64, B 1), naive (attention.hpp: the (B, NH, T, T) probabilities saved, a second
//   (NH, T, T) scratch in backward) against flash (flash_attention.hpp: one logsumexp per row
//   saved, tiles). Counters: FLOP/s over the causal pairs (flash_attention_flops, forward and
//   backward, the same count for both kinds), peak_MiB (the tracker's peak over the call: q, k, v,
//   out, their gradients, what the forward saves, the scratch), saved_MiB (what the forward
//   keeps for backward: the probabilities or the logsumexp).
// BM_Gemm/<dtype>/M/N/K: Device::gemm_ex at the step's GEMM shapes and 2048^3, with fp32, bf16 and
//   f16 inputs (fp32 accumulation); gemm_path names what ran on this CPU.
//
//   build/bin/bench_attention --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "bench/flags.hpp"
#include "core/kernels/attention.hpp"
#include "core/kernels/flash_attention.hpp"

using namespace shardlab;

namespace {

constexpr int kHeads = 12, kHeadSize = 64, kC = kHeads * kHeadSize;  // GPT-2 (124M)

void fill_random(Device& dev, Buffer& b, DType t, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  const int64_t count = b.bytes() / static_cast<int64_t>(dtype_size(t));
  for (int64_t i = 0; i < count; ++i) store_from_f32(b.data(), static_cast<size_t>(i), t, n(gen));
  (void)dev;
}

void BM_Attention(benchmark::State& state, bool flash, DType t) {
  set_blas_threads(1);
  const int B = 1, T = static_cast<int>(state.range(0));
  if (!flash && t != DType::f32) {
    state.SkipWithError("naive attention runs in fp32 only");
    return;
  }
  MemoryTracker tracker(0);
  auto dev = make_cpu_device(tracker);
  const int64_t rows = static_cast<int64_t>(B) * T, es = static_cast<int64_t>(dtype_size(t));
  Buffer qkv = dev->alloc(rows * 3 * kC * es, MemCategory::activations);
  Buffer dqkv = dev->alloc(rows * 3 * kC * es, MemCategory::activations);
  Buffer out = dev->alloc(rows * kC * es, MemCategory::activations);
  Buffer dout = dev->alloc(rows * kC * es, MemCategory::activations);
  fill_random(*dev, qkv, t, 1);
  fill_random(*dev, dout, t, 2);
  const FlashShape s{B, T, kHeads, kHeads, kHeadSize, t};
  const int64_t saved =
      flash ? flash_attention_saved_bytes(s) : 4LL * B * kHeads * static_cast<int64_t>(T) * T;
  for (auto _ : state) {
    Buffer keep = dev->alloc(saved, MemCategory::activations);  // the forward's saved tensor
    if (flash) {
      const char* q = static_cast<const char*>(qkv.data());
      char* dq = static_cast<char*>(dqkv.data());
      const int64_t ld = 3 * kC;
      flash_attention_forward(*dev, s, {out.data(), kC}, keep.f32(), {q, ld}, {q + kC * es, ld},
                              {q + 2 * kC * es, ld});
      flash_attention_backward(*dev, s, {dq, ld}, {dq + kC * es, ld}, {dq + 2 * kC * es, ld},
                               {dout.data(), kC}, {q, ld}, {q + kC * es, ld}, {q + 2 * kC * es, ld},
                               {out.data(), kC}, keep.f32());
    } else {
      attention_forward(*dev, out.f32(), keep.f32(), qkv.f32(), B, T, kC, kHeads);
      attention_backward(*dev, dqkv.f32(), dout.f32(), qkv.f32(), keep.f32(), B, T, kC, kHeads);
    }
    benchmark::DoNotOptimize(dqkv.data());
  }
  const double flops = flash_attention_flops(s, false) + flash_attention_flops(s, true);
  state.counters["FLOP/s"] =
      benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak_MiB"] = static_cast<double>(tracker.peak_total()) / (1 << 20);
  state.counters["saved_MiB"] = static_cast<double>(saved) / (1 << 20);
}

void BM_Gemm(benchmark::State& state, DType t) {
  set_blas_threads(1);
  const int M = static_cast<int>(state.range(0)), N = static_cast<int>(state.range(1)),
            K = static_cast<int>(state.range(2));
  MemoryTracker tracker(0);
  auto dev = make_cpu_device(tracker);
  const int64_t es = static_cast<int64_t>(dtype_size(t));
  Buffer a = dev->alloc(static_cast<int64_t>(M) * K * es, MemCategory::workspace);
  Buffer b = dev->alloc(static_cast<int64_t>(K) * N * es, MemCategory::workspace);
  Buffer c = dev->alloc_zeros(static_cast<int64_t>(M) * N * 4, MemCategory::workspace);
  fill_random(*dev, a, t, 3);
  fill_random(*dev, b, t, 4);
  for (auto _ : state) {
    dev->gemm_ex(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, t, 0.0f, c.data(), N,
                 DType::f32);
    benchmark::DoNotOptimize(c.f32()[0]);
  }
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * M * N * static_cast<double>(K),
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(dev->gemm_path(t));
}

}  // namespace

BENCHMARK_CAPTURE(BM_Attention, naive / f32, false, DType::f32)
    ->ArgNames({"T"})
    ->Arg(128)
    ->Arg(512)
    ->Arg(1024)
    ->Arg(2048)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Attention, flash / f32, true, DType::f32)
    ->ArgNames({"T"})
    ->Arg(128)
    ->Arg(512)
    ->Arg(1024)
    ->Arg(2048)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Attention, flash / bf16, true, DType::bf16)
    ->ArgNames({"T"})
    ->Arg(128)
    ->Arg(512)
    ->Arg(1024)
    ->Arg(2048)
    ->Unit(benchmark::kMillisecond);
// GPT-2's c_attn and c_fc forward at B T = 2048, and 2048^3.
BENCHMARK_CAPTURE(BM_Gemm, f32, DType::f32)
    ->ArgNames({"M", "N", "K"})
    ->Args({2048, 3 * kC, kC})
    ->Args({2048, 4 * kC, kC})
    ->Args({2048, 2048, 2048})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Gemm, bf16, DType::bf16)
    ->ArgNames({"M", "N", "K"})
    ->Args({2048, 3 * kC, kC})
    ->Args({2048, 4 * kC, kC})
    ->Args({2048, 2048, 2048})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Gemm, f16, DType::f16)
    ->ArgNames({"M", "N", "K"})
    ->Args({2048, 3 * kC, kC})
    ->Args({2048, 4 * kC, kC})
    ->Args({2048, 2048, 2048})
    ->Unit(benchmark::kMillisecond);

// BENCHMARK_MAIN(), with bench/flags.hpp's --help and library notice.
int main(int argc, char** argv) {
  shardlab::bench::initialize(&argc, argv, "bench_attention",
                              "naive against flash attention at GPT-2's heads (time, peak bytes, "
                              "what the forward saves), and GEMMs with fp32, bf16 and f16 inputs");
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
