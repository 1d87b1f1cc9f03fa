// Tests of the benchmark harness (bench/train_driver.hpp, bench/capacity_search.hpp): the lockstep
// driver reports what a plain run of the engine measures, counts its steps, keeps its shares
// within bounds, and fails instead of hanging; the capacity search returns the depth that fits
// while one more does not, from any starting guess.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "bench/capacity_search.hpp"
#include "bench/train_driver.hpp"

namespace shardlab::bench {
namespace {

GPTConfig small_model() {
  GPTConfig c;
  c.vocab_size = 64;
  c.max_seq_len = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  return c;
}

TrainRun small_run(Strategy s, int ranks) {
  TrainRun r;
  r.model = small_model();
  r.engine.strategy = s;
  r.engine.hybrid_group = 2;
  r.ranks = ranks;
  r.batch = 2;
  r.seq_len = 16;
  return r;
}

// The same run without the driver: launch, warm-up step plus `steps` steps, then the trackers.
struct Direct {
  int64_t peak = 0;
  int64_t persistent = 0;
  int64_t comm = 0;
};
Direct run_direct(const TrainRun& r, int steps) {
  Direct d;
  std::mutex mu;
  LaunchOptions lo;
  lo.ranks = r.ranks;
  launch(lo, [&](RankContext& ctx) {
    const int64_t n = static_cast<int64_t>(r.batch) * r.seq_len;
    const std::vector<int> tok = bench_tokens(r.model, ctx.rank, n, 0);
    const std::vector<int> tgt = bench_tokens(r.model, ctx.rank, n, 1);
    Engine eng(*ctx.device, *ctx.comm, ctx.recorder, r.model, r.engine);
    StepStats st;
    for (int i = 0; i <= steps; ++i) st = eng.step({tok.data()}, {tgt.data()}, r.batch, r.seq_len);
    int64_t persistent = 0;
    for (int64_t b : eng.persistent_bytes()) persistent += b;
    std::lock_guard<std::mutex> lock(mu);
    d.peak = std::max(d.peak, ctx.tracker->peak_total());
    d.persistent = std::max(d.persistent, persistent);
    d.comm = std::max(d.comm, st.comm_total());
  });
  return d;
}

TEST(BenchDriver, ReportsWhatAPlainRunMeasures) {
  for (Strategy s : {Strategy::no_shard, Strategy::shard_grad_op, Strategy::full_shard,
                     Strategy::hybrid_shard}) {
    SCOPED_TRACE(strategy_name(s));
    const TrainRun run = small_run(s, 4);
    LockstepTrainer trainer(run);
    for (int i = 0; i < 3; ++i) EXPECT_GT(trainer.step(), 0.0);
    const TrainReport rep = trainer.finish();
    const Direct d = run_direct(run, 3);
    EXPECT_EQ(rep.world, 4);
    EXPECT_EQ(rep.timed_steps, 3);
    EXPECT_EQ(rep.params, run.model.num_params());
    EXPECT_EQ(rep.peak, d.peak);
    EXPECT_EQ(rep.persistent, d.persistent);
    EXPECT_EQ(rep.comm_bytes_per_step, d.comm);
    int64_t sum = 0;
    for (int64_t b : rep.at_peak) sum += b;
    EXPECT_EQ(sum, rep.peak);  // the categories at the peak make up the peak
    // The shares are fractions of the step, and exposed time is part of comm time.
    EXPECT_GT(rep.comm_share, 0.0);
    EXPECT_LE(rep.comm_share, 1.0);
    EXPECT_GE(rep.exposed_share, 0.0);
    EXPECT_LE(rep.exposed_share, rep.comm_share + 1e-6);
  }
}

TEST(BenchDriver, PersistentBytesFollowTheStrategyTable) {
  // 16 Psi for no_shard and 16 Psi / N for full_shard, up to the padding of each unit to N.
  const int64_t psi = small_model().num_params();
  LockstepTrainer dp(small_run(Strategy::no_shard, 4));
  EXPECT_EQ(dp.finish().persistent, 16 * psi);
  LockstepTrainer fs(small_run(Strategy::full_shard, 4));
  const int64_t p = fs.finish().persistent;
  EXPECT_GE(p, 16 * psi / 4);
  EXPECT_LE(p, 16 * (psi + 4 * 3) / 4);  // three units, each padded by fewer than 4 elements
}

TEST(BenchDriver, WithoutTracingNoSharesAndOneRankHasNoComm) {
  TrainRun run = small_run(Strategy::full_shard, 2);
  run.trace = false;
  LockstepTrainer t2(run);
  t2.step();
  const TrainReport r2 = t2.finish();
  EXPECT_EQ(r2.comm_share, 0.0);
  EXPECT_EQ(r2.exposed_share, 0.0);
  EXPECT_GT(r2.comm_bytes_per_step, 0);
  LockstepTrainer t1(small_run(Strategy::full_shard, 1));
  t1.step();
  const TrainReport r1 = t1.finish();
  EXPECT_EQ(r1.comm_bytes_per_step, 0);
  EXPECT_EQ(r1.comm_share, 0.0);
}

TEST(BenchDriver, AFailingRankIsReportedNotAHang) {
  TrainRun run = small_run(Strategy::full_shard, 4);
  run.mem_limit = 16 * 1024;  // far below the persistent state
  EXPECT_THROW(LockstepTrainer t(run), RankFailure);
}

TEST(BenchCapacity, DeepestDepthFitsAndOneMoreDoesNot) {
  for (Strategy s : {Strategy::no_shard, Strategy::full_shard}) {
    SCOPED_TRACE(strategy_name(s));
    CapacityQuery q;
    q.strategy = s;
    q.prefetch = 0;  // a peak that does not depend on thread timing (see capacity_search.hpp)
    q.ranks = 2;
    q.width = 32;
    q.seq_len = 16;
    q.limit = 2 * 1024 * 1024;
    const CapacityResult planned = find_capacity(q);
    ASSERT_GT(planned.max_layers, 0);
    EXPECT_TRUE(try_depth(q, planned.max_layers).fits);
    EXPECT_FALSE(try_depth(q, planned.max_layers + 1).fits);
    EXPECT_GT(planned.peak, 0);
    EXPECT_LE(planned.peak, q.limit);
    // A guess far too low or far too high costs trials, not the answer.
    EXPECT_EQ(find_capacity(q, 1).max_layers, planned.max_layers);
    EXPECT_EQ(find_capacity(q, 3 * planned.max_layers + 5).max_layers, planned.max_layers);
  }
}

TEST(BenchCapacity, FullShardFitsMoreThanNoShardOnFourRanks) {
  CapacityQuery q;
  q.ranks = 4;
  q.width = 32;
  q.seq_len = 16;
  q.limit = 2 * 1024 * 1024;
  q.strategy = Strategy::no_shard;
  const int dp = find_capacity(q).max_layers;
  q.strategy = Strategy::full_shard;
  const int fsdp = find_capacity(q).max_layers;
  EXPECT_GT(fsdp, dp);
}

}  // namespace
}  // namespace shardlab::bench
