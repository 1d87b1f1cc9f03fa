// core/fsdp engine memory: persistent bytes per rank by category against docs/memory.md's formulas
// for every strategy and N = 1..8, the planner's predicted peak against the tracker's measured
// peak, and a per-rank capacity that no_shard exceeds while full_shard trains.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <sstream>
#include <string>

#include "core/fsdp/flat_param.hpp"
#include "core/fsdp/memory_plan.hpp"
#include "core/model/params.hpp"
#include "core/train/trainer.hpp"
#include "tests/fsdp_test_util.hpp"

using namespace shardlab;
using namespace shardlab::fsdp_test;

namespace {

int64_t cat(const MemArray& a, MemCategory c) { return a[static_cast<int>(c)]; }

// The plan's peak against a measured one: equal. The plan replays the step allocation by
// allocation, and no allocation depends on the threads' timing (the local backend's collectives
// take no staging), so the plan is the measured peak to the byte.
void expect_measured_peak(const MemoryPlan& plan, int64_t measured, const std::string& what) {
  EXPECT_EQ(measured, plan.peak_total()) << what;
}

}  // namespace

TEST(FsdpMemory, PersistentBytesMatchTheFormulasForEveryStrategyAndN1To8) {
  const GPTConfig model = tiny_model();  // units of 2624 and 12704: padding for N = 3, 5, 6, 7
  const double psi = static_cast<double>(model.num_params());
  for (int n = 1; n <= 8; ++n) {
    for (Strategy s : {Strategy::no_shard, Strategy::shard_optim, Strategy::shard_grad_op,
                       Strategy::full_shard, Strategy::hybrid_shard}) {
      EngineConfig ec = test_config(s);
      ec.hybrid_group = (s == Strategy::hybrid_shard && n % 2 == 0) ? 2 : n;
      std::vector<MemArray> measured(n), tracked(n);
      std::vector<int64_t> padding_elems(n);
      LaunchOptions lo;
      lo.ranks = n;
      launch(lo, [&](RankContext& ctx) {
        Engine eng(*ctx.device, *ctx.comm, ctx.recorder, model, ec);
        measured[ctx.rank] = eng.persistent_bytes();
        tracked[ctx.rank] = ctx.tracker->current_all();
      });
      MemoryPlan plan = plan_memory(plan_input(ec, n, model, 1, 16, 1));
      const int g = plan.group;
      for (int r = 0; r < n; ++r) {
        // The engine allocated exactly the planned persistent state, and nothing else remained.
        EXPECT_EQ(measured[r], plan.persistent) << strategy_name(s) << " N=" << n << " rank " << r;
        EXPECT_EQ(tracked[r], plan.persistent) << strategy_name(s) << " N=" << n;
      }
      // The table's formula with the real Psi, plus the reported padding, is what was allocated.
      const double formula = formula_persistent_bytes(s, psi, n, g);
      EXPECT_NEAR(static_cast<double>(plan.persistent_total() - plan.padding_bytes), formula, 0.5)
          << strategy_name(s) << " N=" << n;
      // And by category, with padded Psi_p (a multiple of the group): fp32 4 + 4 + 8.
      const int64_t pp = plan.padded_psi, sh = pp / g;
      const bool fp = keeps_full_params(s), fg = keeps_full_grads(s), fo = keeps_full_optim(s);
      EXPECT_EQ(cat(measured[0], MemCategory::params), 4 * (fp ? pp : sh));
      EXPECT_EQ(cat(measured[0], MemCategory::grads), 4 * (fg ? pp : sh));
      EXPECT_EQ(cat(measured[0], MemCategory::optimizer_state), 8 * (fo ? pp : sh));
      if (n == 1 || g == 1 || (2624 % g == 0 && 12704 % g == 0)) {
        EXPECT_EQ(plan.padding_bytes, 0);
      } else {
        EXPECT_GT(plan.padding_bytes, 0) << strategy_name(s) << " N=" << n;
      }
    }
  }
}

TEST(FsdpMemory, SgdKeepsLessOptimizerState) {
  const GPTConfig model = tiny_model();
  for (float momentum : {0.9f, 0.0f}) {
    EngineConfig ec = test_config(Strategy::full_shard);
    ec.optim.kind = OptimizerKind::sgd;
    ec.optim.momentum = momentum;
    std::vector<MemArray> measured(2);
    LaunchOptions lo;
    lo.ranks = 2;
    launch(lo, [&](RankContext& ctx) {
      Engine eng(*ctx.device, *ctx.comm, ctx.recorder, model, ec);
      measured[ctx.rank] = eng.persistent_bytes();
    });
    MemoryPlan plan = plan_memory(plan_input(ec, 2, model, 1, 16, 1));
    EXPECT_EQ(measured[0], plan.persistent);
    EXPECT_EQ(cat(measured[0], MemCategory::optimizer_state),
              (momentum != 0 ? 4 : 0) * model.num_params() / 2);
  }
}

TEST(FsdpMemory, MixedPrecisionPersistentBytes) {
  // bf16: 2 + 2 + 12 (fp32 master, m, v). ZeRO-1 is 4 Psi + 12 Psi / N, ZeRO-3 16 Psi / N.
  const GPTConfig model = tiny_model();
  for (Strategy s :
       {Strategy::no_shard, Strategy::shard_optim, Strategy::shard_grad_op, Strategy::full_shard}) {
    EngineConfig ec = test_config(s);
    ec.param_dtype = ec.reduce_dtype = DType::bf16;
    std::vector<MemArray> measured(4);
    LaunchOptions lo;
    lo.ranks = 4;
    launch(lo, [&](RankContext& ctx) {
      Engine eng(*ctx.device, *ctx.comm, ctx.recorder, model, ec);
      measured[ctx.rank] = eng.persistent_bytes();
    });
    MemoryPlan plan = plan_memory(plan_input(ec, 4, model, 1, 16, 1));
    EXPECT_EQ(measured[0], plan.persistent);
    const double psi = static_cast<double>(model.num_params());  // divisible by 4: no padding
    EXPECT_EQ(plan.padding_bytes, 0);
    EXPECT_DOUBLE_EQ(static_cast<double>(plan.persistent_total()),
                     formula_persistent_bytes(s, psi, 4, 4, DType::bf16, DType::bf16));
  }
}

TEST(FsdpMemory, PlannedPeakIsTheMeasuredPeak) {
  GPTConfig model = tiny_model();
  model.n_layer = 4;
  struct Case {
    Strategy s;
    int ranks, B, K, prefetch, group;
    bool ckpt;
    DType pd;
    int max_inflight = 0;
    const char* wrap = "block";
  };
  const Case cases[] = {
      {Strategy::no_shard, 2, 4, 1, 1, 0, false, DType::f32},
      {Strategy::shard_optim, 3, 4, 1, 1, 0, false, DType::f32},
      {Strategy::shard_grad_op, 4, 4, 1, 1, 0, false, DType::f32},
      {Strategy::full_shard, 4, 4, 1, 1, 0, false, DType::f32},
      {Strategy::full_shard, 4, 4, 1, 0, 0, false, DType::f32},
      {Strategy::full_shard, 4, 4, 1, 2, 0, false, DType::f32},
      {Strategy::full_shard, 2, 8, 1, 1, 0, true, DType::f32},
      {Strategy::full_shard, 4, 2, 3, 1, 0, false, DType::f32},
      {Strategy::full_shard, 2, 4, 1, 1, 0, false, DType::bf16},
      {Strategy::hybrid_shard, 4, 4, 1, 1, 2, false, DType::f32},
      // Depth 2 capped at 2 all-gathers in flight: one unit ahead, as prefetch 1.
      {Strategy::full_shard, 4, 4, 1, 2, 0, false, DType::f32, 2},
      // Prefetch 2 with activation checkpointing, micro-batches, bf16 and hybrid groups.
      {Strategy::full_shard, 2, 8, 1, 2, 0, true, DType::f32},
      {Strategy::full_shard, 4, 2, 3, 2, 0, false, DType::f32},
      {Strategy::full_shard, 2, 4, 1, 2, 0, false, DType::bf16},
      {Strategy::hybrid_shard, 4, 4, 1, 2, 2, false, DType::f32},
      // Every wrap policy (wrap_policy.hpp): one unit, halves, groups of blocks, and size:N with
      // the attention halves left in the root (C = 32: attention 4288, MLP 8416 parameters).
      {Strategy::full_shard, 4, 4, 1, 1, 0, false, DType::f32, 0, "whole"},
      {Strategy::full_shard, 4, 4, 1, 1, 0, false, DType::f32, 0, "layer"},
      {Strategy::full_shard, 3, 4, 1, 1, 0, false, DType::f32, 0, "blocks:3"},
      {Strategy::full_shard, 4, 4, 1, 1, 0, false, DType::f32, 0, "size:5000"},
      {Strategy::full_shard, 4, 4, 1, 1, 0, false, DType::f32, 0, "size:1000"},
      {Strategy::full_shard, 2, 8, 1, 2, 0, true, DType::f32, 0, "layer"},
      {Strategy::full_shard, 2, 8, 1, 1, 0, true, DType::f32, 0, "size:5000"},
      {Strategy::full_shard, 4, 2, 3, 2, 0, false, DType::f32, 0, "blocks:2"},
      {Strategy::full_shard, 2, 4, 1, 2, 0, false, DType::bf16, 0, "layer"},
      {Strategy::full_shard, 4, 4, 1, 2, 0, false, DType::f32, 2, "layer"},
      {Strategy::shard_grad_op, 4, 4, 1, 1, 0, false, DType::f32, 0, "whole"},
      {Strategy::shard_optim, 3, 4, 1, 1, 0, false, DType::f32, 0, "layer"},
      {Strategy::no_shard, 2, 4, 1, 1, 0, false, DType::f32, 0, "blocks:2"},
      {Strategy::hybrid_shard, 4, 4, 1, 2, 2, false, DType::f32, 0, "layer"},
      {Strategy::hybrid_shard, 4, 4, 2, 1, 2, true, DType::bf16, 0, "size:5000"},
  };
  std::vector<int64_t> peaks;
  for (const Case& c : cases) {
    EngineConfig ec = test_config(c.s);
    ec.prefetch = c.prefetch;
    ec.hybrid_group = c.group;
    ec.act_ckpt = c.ckpt;
    ec.param_dtype = ec.reduce_dtype = c.pd;
    ec.max_inflight_gathers = c.max_inflight;
    ec.wrap = c.wrap;
    RunResult r = run_engine(model, ec, c.ranks, 2, c.B, 16, c.K);
    MemoryPlan plan = plan_memory(plan_input(ec, c.ranks, model, c.B, 16, c.K));
    const std::string what =
        detail::concat(strategy_name(c.s), " N=", c.ranks, " B=", c.B, " K=", c.K,
                       " prefetch=", c.prefetch, " ckpt=", c.ckpt, " ", dtype_name(c.pd),
                       " max_inflight=", c.max_inflight, " wrap=", c.wrap);
    for (int rank = 0; rank < c.ranks; ++rank) {
      const double measured = static_cast<double>(r.peak_total[rank]);
      const double planned = static_cast<double>(plan.peak_total());
      std::printf("%s rank %d: planned %.1f KiB, measured %.1f KiB (%+.2f%%)\n", what.c_str(), rank,
                  planned / 1024, measured / 1024, 100 * (planned - measured) / measured);
      expect_measured_peak(plan, r.peak_total[rank], what + " rank " + std::to_string(rank));
    }
    peaks.push_back(plan.peak_total());
  }
  // The cap bounds memory: prefetch 2 capped at 2 in flight plans as prefetch 1 (case 4), and
  // uncapped prefetch 2 (case 6) holds one more gathered block (fp32 here).
  EXPECT_EQ(peaks[10], peaks[3]);
  EXPECT_GT(peaks[5], peaks[3]);
}

TEST(FsdpMemory, CapacityThatNoShardExceedsFullShardTrainsIn) {
  // Parameters dominate (8 blocks of C = 64, one sequence per rank), as in the models FSDP is for.
  GPTConfig model = tiny_model();
  model.n_layer = 8;
  model.n_embd = 64;
  EngineConfig dp = test_config(Strategy::no_shard), fsdp = test_config(Strategy::full_shard);
  fsdp.optim.lr = 2e-3f;  // deeper and wider than tiny_model: a gentler rate
  const int64_t dp_peak = plan_memory(plan_input(dp, 4, model, 1, 16, 1)).peak_total();
  const int64_t fsdp_peak = plan_memory(plan_input(fsdp, 4, model, 1, 16, 1)).peak_total();
  ASSERT_LT(fsdp_peak * 3, dp_peak * 2);
  const int64_t capacity = (dp_peak + fsdp_peak) / 2;
  try {
    run_engine(model, dp, 4, 2, 1, 16, 1, capacity);
    FAIL() << "no_shard fit in " << capacity << " bytes";
  } catch (const RankFailure& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("out of memory"), std::string::npos) << m;
    EXPECT_NE(m.find("params"), std::string::npos) << m;  // the breakdown by category
  }
  RunResult r = run_engine(model, fsdp, 4, 20, 1, 16, 1, capacity);
  EXPECT_LT(r.losses.back(), r.losses.front() - 0.3f);
  std::printf(
      "capacity %.0f KiB: no_shard plans %.0f KiB (out of memory), full_shard plans "
      "%.0f KiB and peaked at %.0f KiB\n",
      capacity / 1024.0, dp_peak / 1024.0, fsdp_peak / 1024.0, r.peak_total[0] / 1024.0);
  for (int64_t p : r.peak_total) EXPECT_LE(p, capacity);
}

TEST(FsdpMemory, PlanMatchesTheTrainersPeak) {
  // End to end: `shardlab train` on 4 local ranks against `shardlab plan` for the same run.
  const std::pair<Strategy, const char*> runs[] = {{Strategy::no_shard, "block"},
                                                   {Strategy::full_shard, "block"},
                                                   {Strategy::full_shard, "layer"}};
  for (const auto& [s, wrap] : runs) {
    TrainConfig c;
    c.engine.wrap = wrap;
    c.model = "tiny";
    c.steps = 2;
    c.batch = 16;
    c.seq = 32;
    c.accum = 2;
    c.ranks = 4;
    c.engine.strategy = s;
    std::ostringstream out;
    TrainResult r = run_training(c, out);
    // 16 rows / (4 ranks x 2 micro-batches) = 2 rows per micro-batch
    PlanInput in = plan_input(c.engine, 4, c.model_config(), 2, 32, 2);
    in.token_buffers = true;
    const MemoryPlan plan = plan_memory(in);
    expect_measured_peak(plan, r.peak_bytes, std::string(strategy_name(s)) + " --wrap " + wrap);
    std::printf("shardlab train %s --wrap %s: peak %lld bytes, planned %lld\n", strategy_name(s),
                wrap, static_cast<long long>(r.peak_bytes),
                static_cast<long long>(plan.peak_total()));
  }
}
