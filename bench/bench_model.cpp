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
//                             (full T x T: the GEMMs do not skip the causal upper triangle)
//
// Rates are per CPU time of the benchmark thread: with one BLAS thread all the work runs on it, so
// other processes sharing the machine do not inflate the figures (wall time is reported too).
//
//   build/bin/bench_model --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "bench/flags.hpp"
#include "core/model/gpt.hpp"

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

}  // namespace

BENCHMARK_CAPTURE(BM_TrainStep, medium, "medium")
    ->ArgNames({"B", "T"})
    ->Args({4, 256})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TrainStep, small, "small")
    ->ArgNames({"B", "T"})
    ->Args({8, 256})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Sgemm)->ArgNames({"n"})->Arg(2048)->Unit(benchmark::kMillisecond);

// BENCHMARK_MAIN(), with bench/flags.hpp's --help and library notice.
int main(int argc, char** argv) {
  shardlab::bench::initialize(&argc, argv, "bench_model",
                              "one rank's training step of a preset against OpenBLAS sgemm "
                              "2048^3 (model FLOP/s)");
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
