// The capacity search of bench/bench_capacity.cpp, in a header so tests can run it: the deepest
// model (layers at a fixed width) that trains under a per-rank memory limit on N local ranks.
// "Fits" is decided by real allocations only: the engine is built and takes `steps` optimizer
// steps on every rank without OutOfMemory. The memory planner gives the first guess; from there
// the search walks up (doubling its stride) until a depth fails, or down from a guess that failed,
// then bisects, so a wrong guess costs trials, never a wrong answer.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "bench/train_driver.hpp"

namespace shardlab::bench {

inline constexpr int kMaxCapacityLayers = 512;  // the search's ceiling

struct CapacityQuery {
  Strategy strategy = Strategy::full_shard;
  int ranks = 1;
  int width = 256;    // C; heads = C / 64 (at least one)
  int64_t limit = 0;  // per-rank capacity in bytes
  int batch = 1;      // B per rank
  int seq_len = 32;   // T (also max_seq_len)
  int steps = 2;      // optimizer steps a depth must survive
  int prefetch = 1;   // EngineConfig::prefetch
};

struct CapacityResult {
  int max_layers = 0;      // measured: the deepest that fits, 0 when one layer does not
  int planned_layers = 0;  // the planner's answer
  int trials = 0;          // real runs the search took
  int64_t peak = 0;        // the largest per-rank peak at max_layers
};

inline GPTConfig capacity_model(const CapacityQuery& q, int layers) {
  GPTConfig m;
  m.vocab_size = 256;
  m.max_seq_len = q.seq_len;
  m.n_layer = layers;
  m.n_embd = q.width;
  m.n_head = std::max(1, q.width / 64);
  return m;
}

// hybrid_shard's group: 2 ranks (1 at one rank).
inline int capacity_hybrid_group(int ranks) { return ranks >= 2 ? 2 : 1; }

struct DepthTrial {
  bool fits = false;
  int64_t peak = 0;  // largest per-rank peak (up to the failure when it failed)
};

// The engine's settings for a query: the trials and the planner take the same.
inline EngineConfig capacity_engine(const CapacityQuery& q) {
  EngineConfig ec;
  ec.strategy = q.strategy;
  ec.hybrid_group = capacity_hybrid_group(q.ranks);
  ec.prefetch = q.prefetch;
  return ec;
}

// Builds the engine at `layers` on q.ranks local ranks under q.limit bytes each and runs q.steps
// steps. Throws (RankFailure) for failures other than OutOfMemory.
inline DepthTrial try_depth(const CapacityQuery& q, int layers) {
  const GPTConfig model = capacity_model(q, layers);
  const EngineConfig ec = capacity_engine(q);
  LaunchOptions lo;
  lo.ranks = q.ranks;
  lo.mem_limit = q.limit;
  std::atomic<bool> oom{false};
  std::mutex mu;
  DepthTrial t;
  try {
    launch(lo, [&](RankContext& ctx) {
      try {
        const int64_t n = static_cast<int64_t>(q.batch) * q.seq_len;
        const std::vector<int> tok = bench_tokens(model, ctx.rank, n, 0);
        const std::vector<int> tgt = bench_tokens(model, ctx.rank, n, 1);
        Engine eng(*ctx.device, *ctx.comm, ctx.recorder, model, ec);
        for (int i = 0; i < q.steps; ++i) eng.step({tok.data()}, {tgt.data()}, q.batch, q.seq_len);
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
inline int planned_capacity_layers(const CapacityQuery& q) {
  int best = 0;
  for (int L = 1; L <= kMaxCapacityLayers; ++L) {
    PlanInput in =
        plan_input(capacity_engine(q), q.ranks, capacity_model(q, L), q.batch, q.seq_len);
    in.capacity = q.limit;
    if (!plan_memory(in).fits()) break;
    best = L;
  }
  return best;
}

// The search. `guess` > 0 starts there instead of at the planner's answer (tests use it).
inline CapacityResult find_capacity(const CapacityQuery& q, int guess = 0) {
  CapacityResult r;
  r.planned_layers = planned_capacity_layers(q);
  std::map<int, int64_t> peaks;  // the peak of each depth that fit
  auto fits = [&](int L) {
    ++r.trials;
    const DepthTrial t = try_depth(q, L);
    if (t.fits) peaks[L] = t.peak;
    return t.fits;
  };
  int lo = 0, hi = kMaxCapacityLayers + 1;  // lo fits (0 trivially), hi does not
  const int start = guess > 0 ? guess : std::max(1, r.planned_layers);
  if (fits(start)) {
    lo = start;
    for (int stride = 1; lo + stride < hi; stride *= 2) {
      if (!fits(lo + stride)) {
        hi = lo + stride;
        break;
      }
      lo += stride;
    }
  } else {
    hi = start;
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
    if (fits(mid))
      lo = mid;
    else
      hi = mid;
  }
  r.max_layers = lo;
  r.peak = lo > 0 ? peaks[lo] : 0;
  return r;
}

}  // namespace shardlab::bench
