// How steady this machine's cores are: one thread pinned to each CPU runs the same sgemm (1024 x
// 768 x 256, a shape of the `small` model's MLP, one BLAS thread) for a few seconds, and the work
// done in each 100 ms window gives every CPU's rate over time. On a virtual machine whose vCPUs
// share physical cores with other guests, a vCPU's rate can halve for a second or more at a time,
// independently of the other vCPU (docs/simulate-validation.md, "Local full_shard at N = 2:
// ranks in lockstep on a noisy machine"). Ranks that synchronise run at the pace of the slowest of
// them, so the figure a data-parallel step sees is `lockstep_GFLOPs` (per window, the slowest CPU's
// rate; their mean), not the best rate calibrate keeps.
//
//   bench_cpu_speed --benchmark_counters_tabular=true
//   counters: best_GFLOPs (the fastest window of any CPU), median_GFLOPs (over every CPU's
//   windows), fast_fraction (a CPU's windows at >= 75% of best), all_fast_fraction (windows in
//   which every CPU was), lockstep_GFLOPs. The window loop and these statistics are
//   core/device/cpu_speed.hpp's, which `shardlab calibrate` also runs, on its ranks.
#include <benchmark/benchmark.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "core/device/cpu_speed.hpp"
#include "core/device/device.hpp"
#include "core/memory/tracker.hpp"

namespace shardlab {
namespace {

void pin_to_cpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

// Per CPU, the FLOPs done in each window of `seconds` (core/device/cpu_speed.hpp).
std::vector<std::vector<double>> windows_per_cpu(int cpus, double seconds) {
  std::vector<std::vector<double>> flops(cpus);
  set_blas_threads(1);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < cpus; ++c)
    threads.emplace_back([&, c] {
      pin_to_cpu(c);
      MemoryTracker tracker;
      auto dev = make_cpu_device(tracker);
      flops[c] = sgemm_windows(*dev, t0, seconds);
    });
  for (auto& t : threads) t.join();
  return flops;
}

void BM_cpu_speed(benchmark::State& state) {
  const int cpus = static_cast<int>(state.range(0));
  const double seconds = static_cast<double>(state.range(1));
  std::vector<std::vector<double>> flops;
  for (auto _ : state) flops = windows_per_cpu(cpus, seconds);
  const CpuSpeed s = cpu_speed(flops);
  state.counters["best_GFLOPs"] = s.best * 1e-9;
  state.counters["median_GFLOPs"] = s.median * 1e-9;
  state.counters["fast_fraction"] = s.fast_fraction;
  state.counters["all_fast_fraction"] = s.all_fast_fraction;
  state.counters["lockstep_GFLOPs"] = s.lockstep * 1e-9;
}

void cpu_speed_args(benchmark::internal::Benchmark* b) {
  const int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  b->ArgNames({"cpus", "seconds"});
  b->Args({1, 10});
  if (cpus > 1) b->Args({cpus, 10});
}

BENCHMARK(BM_cpu_speed)
    ->Apply(cpu_speed_args)
    ->Iterations(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace shardlab

BENCHMARK_MAIN();
