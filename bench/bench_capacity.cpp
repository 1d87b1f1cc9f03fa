// Capacity: under a per-rank memory limit (the tracker's capacity), the deepest model each
// strategy can train at N = 1, 2, 4, 8 local ranks, at a fixed width. The answer comes from real
// allocations: a depth "fits" when the engine is built and takes two optimizer steps on every rank
// without OutOfMemory. The memory planner (core/fsdp/memory_plan.hpp) gives the first guess; the
// search then walks up (doubling the stride) until a depth fails and bisects, or walks down from a
// guess that failed, so the result never depends on the planner being right (the search is
// bench/capacity_search.hpp). Per rank: B x T = 1 x 32 tokens, vocabulary 256, C / 64 heads.
//
// DP keeps everything on every rank, so its depth stays flat in N; full_shard divides the 16 bytes
// per parameter by N and grows with N; hybrid_shard (G = 2) stops growing at the group size.
//
// Counters: max_layers (measured), planned_layers (the planner's answer), params (Psi at
// max_layers), peak (the largest per-rank peak at max_layers, bytes), limit (bytes), trials (real
// runs the search took). The manual time is the search's wall time.
//
//   build/bin/bench_capacity                                 (64 MiB per rank, width 256)
//   build/bin/bench_capacity --limit_mib=16 --width=128 --ranks=1,2,4      (the quick suite's)
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "bench/capacity_search.hpp"
#include "bench/flags.hpp"
#include "core/device/device.hpp"

using namespace shardlab;
using namespace shardlab::bench;

namespace {

struct Options {
  std::vector<int> ranks{1, 2, 4, 8};
  int64_t limit_mib = 64;
  int width = 256;
};
Options g_opts;

void bm_capacity(benchmark::State& state, Strategy s) {
  CapacityQuery q;
  q.strategy = s;
  q.ranks = static_cast<int>(state.range(0));
  q.limit = state.range(1) * 1024 * 1024;
  q.width = static_cast<int>(state.range(2));
  if (under_mpirun()) {
    state.SkipWithError("capacity runs on the local backend only: an OutOfMemory ends an MPI job");
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  CapacityResult r;
  try {
    r = find_capacity(q);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto _ : state) state.SetIterationTime(seconds);
  state.counters["max_layers"] = r.max_layers;
  state.counters["planned_layers"] = r.planned_layers;
  state.counters["params"] =
      r.max_layers > 0 ? static_cast<double>(capacity_model(q, r.max_layers).num_params()) : 0;
  using benchmark::Counter;
  state.counters["peak"] =
      Counter(static_cast<double>(r.peak), Counter::kDefaults, Counter::OneK::kIs1024);
  state.counters["limit"] =
      Counter(static_cast<double>(q.limit), Counter::kDefaults, Counter::OneK::kIs1024);
  state.counters["trials"] = r.trials;
}

// Takes this program's own flags out of argv (Google Benchmark rejects unknown ones).
void parse_own_flags(int* argc, char** argv) {
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--ranks=", 0) == 0) {
      g_opts.ranks.clear();
      for (const std::string& r : split_list(a.substr(8)))
        g_opts.ranks.push_back(int_flag("--ranks", r, 1));
    } else if (a.rfind("--limit_mib=", 0) == 0) {
      g_opts.limit_mib = std::stoll(a.substr(12));
    } else if (a.rfind("--width=", 0) == 0) {
      g_opts.width = int_flag("--width", a.substr(8), 1);
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  if (g_opts.ranks.empty() || g_opts.limit_mib <= 0 || g_opts.width < 1)
    SL_THROW(InvalidArgument,
             "bench_capacity: --ranks needs at least one value, --limit_mib and "
             "--width must be positive");
}

}  // namespace

int main(int argc, char** argv) {
  set_blas_threads(1);
  try {
    parse_own_flags(&argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  const Strategy strategies[] = {Strategy::no_shard, Strategy::shard_optim, Strategy::shard_grad_op,
                                 Strategy::full_shard, Strategy::hybrid_shard};
  for (Strategy s : strategies) {
    auto* b = benchmark::RegisterBenchmark((std::string("capacity/") + strategy_name(s)).c_str(),
                                           bm_capacity, s);
    b->ArgNames({"ranks", "limit_MiB", "width"});
    for (int n : g_opts.ranks) b->Args({n, g_opts.limit_mib, g_opts.width});
    b->Iterations(1)->UseManualTime()->Unit(benchmark::kSecond);
  }
  initialize(&argc, argv, "bench_capacity",
             "the deepest model each strategy trains under a per-rank memory limit "
             "(docs/bench/README.md)",
             {{"--ranks=1,2,4,8", "local ranks per row"},
              {"--limit_mib=64", "per-rank memory limit in MiB (the tracker's capacity)"},
              {"--width=256", "model width C (heads: C / 64)"}});
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
