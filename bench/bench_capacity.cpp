// Capacity: under a per-rank memory limit (the tracker's capacity), the deepest model each
// strategy can train at N = 1, 2, 4, 8 local ranks, at a fixed width. The answer comes from real
// allocations: a depth "fits" when the engine is built and takes two optimizer steps on every rank
// without OutOfMemory. The memory planner (core/fsdp/memory_plan.hpp) gives the first guess; the
// search then walks up (doubling the stride) until a depth fails and bisects, or walks down from a
// guess that failed, so the result never depends on the planner being right.
//
// DP keeps everything on every rank, so its depth stays flat in N; full_shard divides the 16 bytes
// per parameter by N and grows with N; hybrid_shard (G = 2) stops growing at the group size.
//
// Counters: max_layers (measured), planned_layers (the planner's answer), params (Psi at
// max_layers), peak (the largest per-rank peak at max_layers, bytes), limit (bytes), trials (real
// runs the search took). The manual time is the search's wall time.
//
//   build/bin/bench_capacity                                 (64 MiB per rank, width 256)
//   build/bin/bench_capacity --limit_mib=16 --width=128 --ranks=1,2 --benchmark_min_time=0.01
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "bench/train_driver.hpp"
#include "core/device/device.hpp"

using namespace shardlab;
using namespace shardlab::bench;

namespace {

constexpr int kMaxLayers = 512;  // the search's ceiling (a depth this large never fits 64 MiB)
constexpr int kSteps = 2;        // optimizer steps a depth must survive
constexpr int kBatch = 1;        // B per rank
constexpr int kSeq = 32;         // T

struct Options {
  std::vector<int> ranks{1, 2, 4, 8};
  int64_t limit_mib = 64;
  int width = 256;
};
Options g_opts;

GPTConfig model_with(int layers, int width) {
  GPTConfig m;
  m.vocab_size = 256;
  m.max_seq_len = kSeq;
  m.n_layer = layers;
  m.n_embd = width;
  m.n_head = std::max(1, width / 64);
  return m;
}

int hybrid_group_for(int ranks) { return ranks >= 2 ? 2 : 1; }

struct Trial {
  bool fits = false;
  int64_t peak = 0;  // largest per-rank peak (of the attempt, up to the failure when it failed)
};

// Builds the engine on `ranks` local ranks under `limit` bytes each and runs kSteps steps.
Trial try_depth(Strategy s, int ranks, int layers, int width, int64_t limit) {
  const GPTConfig model = model_with(layers, width);
  EngineConfig ec;
  ec.strategy = s;
  ec.hybrid_group = hybrid_group_for(ranks);
  LaunchOptions lo;
  lo.ranks = ranks;
  lo.mem_limit = limit;
  std::atomic<bool> oom{false};
  std::mutex mu;
  Trial t;
  try {
    launch(lo, [&](RankContext& ctx) {
      try {
        const int64_t n = static_cast<int64_t>(kBatch) * kSeq;
        const std::vector<int> tok = bench_tokens(model, ctx.rank, n, 0);
        const std::vector<int> tgt = bench_tokens(model, ctx.rank, n, 1);
        Engine eng(*ctx.device, *ctx.comm, ctx.recorder, model, ec);
        for (int i = 0; i < kSteps; ++i) eng.step({tok.data()}, {tgt.data()}, kBatch, kSeq);
      } catch (const OutOfMemory&) {
        oom = true;
        std::lock_guard<std::mutex> lock(mu);
        t.peak = std::max(t.peak, ctx.tracker->peak_total());
        throw;
      }
      std::lock_guard<std::mutex> lock(mu);
      t.peak = std::max(t.peak, ctx.tracker->peak_total());
    });
  } catch (const RankFailure&) {
    if (!oom) throw;  // a real failure, not "does not fit"
    return t;
  }
  t.fits = true;
  return t;
}

// The planner's deepest model under the limit (0 when even one layer does not fit).
int planned_layers(Strategy s, int ranks, int width, int64_t limit) {
  int best = 0;
  for (int L = 1; L <= kMaxLayers; ++L) {
    PlanInput in;
    in.strategy = s;
    in.world = ranks;
    in.hybrid_group = hybrid_group_for(ranks);
    in.model = model_with(L, width);
    in.batch = kBatch;
    in.seq_len = kSeq;
    in.capacity = limit;
    if (!plan_memory(in).fits()) break;
    best = L;
  }
  return best;
}

void bm_capacity(benchmark::State& state, Strategy s) {
  const int ranks = static_cast<int>(state.range(0));
  const int64_t limit = state.range(1) * 1024 * 1024;
  const int width = static_cast<int>(state.range(2));
  if (under_mpirun()) {
    state.SkipWithError("capacity runs on the local backend only: an OutOfMemory ends an MPI job");
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int planned = planned_layers(s, ranks, width, limit);
  int trials = 0;
  std::map<int, int64_t> peaks;  // peak of each depth that fit
  auto fits = [&](int L) {
    ++trials;
    const Trial t = try_depth(s, ranks, L, width, limit);
    if (t.fits) peaks[L] = t.peak;
    return t.fits;
  };
  int lo = 0, hi = kMaxLayers + 1;  // lo fits (0 trivially), hi does not
  try {
    const int guess = std::max(1, planned);
    if (fits(guess)) {
      lo = guess;
      for (int stride = 1; lo + stride < hi; stride *= 2) {
        if (!fits(lo + stride)) {
          hi = lo + stride;
          break;
        }
        lo += stride;
      }
    } else {
      hi = guess;
      for (int stride = 1; hi - stride > 0; stride *= 2) {
        if (fits(hi - stride)) {
          lo = hi - stride;
          break;
        }
        hi -= stride;
      }
    }
    while (hi - lo > 1) {
      const int mid = lo + (hi - lo) / 2;
      if (fits(mid)) lo = mid; else hi = mid;
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto _ : state) state.SetIterationTime(seconds);
  const int64_t best_peak = lo > 0 ? peaks[lo] : 0;
  state.counters["max_layers"] = lo;
  state.counters["planned_layers"] = planned;
  state.counters["params"] = lo > 0 ? static_cast<double>(model_with(lo, width).num_params()) : 0;
  using benchmark::Counter;
  state.counters["peak"] =
      Counter(static_cast<double>(best_peak), Counter::kDefaults, Counter::OneK::kIs1024);
  state.counters["limit"] =
      Counter(static_cast<double>(limit), Counter::kDefaults, Counter::OneK::kIs1024);
  state.counters["trials"] = trials;
}

std::vector<int> parse_ints(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(std::stoi(item));
  return out;
}

// Takes this program's own flags out of argv (Google Benchmark rejects unknown ones).
void parse_own_flags(int* argc, char** argv) {
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--ranks=", 0) == 0) {
      g_opts.ranks = parse_ints(a.substr(8));
    } else if (a.rfind("--limit_mib=", 0) == 0) {
      g_opts.limit_mib = std::stoll(a.substr(12));
    } else if (a.rfind("--width=", 0) == 0) {
      g_opts.width = std::stoi(a.substr(8));
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  if (g_opts.ranks.empty() || g_opts.limit_mib <= 0 || g_opts.width < 1)
    SL_THROW(InvalidArgument, "bench_capacity: --ranks needs at least one value, --limit_mib and "
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
  const Strategy strategies[] = {Strategy::no_shard, Strategy::shard_optim,
                                 Strategy::shard_grad_op, Strategy::full_shard,
                                 Strategy::hybrid_shard};
  for (Strategy s : strategies) {
    auto* b = benchmark::RegisterBenchmark((std::string("capacity/") + strategy_name(s)).c_str(),
                                           bm_capacity, s);
    b->ArgNames({"ranks", "limit_MiB", "width"});
    for (int n : g_opts.ranks) b->Args({n, g_opts.limit_mib, g_opts.width});
    b->Iterations(1)->UseManualTime()->Unit(benchmark::kSecond);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
