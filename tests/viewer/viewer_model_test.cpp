// The run model: steps, unit strips, meta fields, and the summary's aggregates checked against
// closed forms of the synthetic schedule (collective counts and bytes, tokens/s, peaks).
#include <gtest/gtest.h>

#include "tests/viewer/synthetic_run.hpp"
#include "viewer/model/panel_layout.hpp"
#include "viewer/model/run_model.hpp"

namespace shardlab::viewer {

TEST(ViewerSteps, BoundariesFromStepEvents) {
  RunData run;
  run.ranks.resize(2);
  // Rank 1 is slower: step ends are the later of the two.
  run.ranks[0].steps = {{100, 0, 3.0, 10, 90e-9}, {200, 1, 2.0, 10, 100e-9}};
  run.ranks[1].steps = {{120, 0, 3.2, 10, 100e-9}, {230, 1, 2.2, 10, 110e-9}};
  auto steps = build_steps(run);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].t_begin, 10);  // earliest start: 100 - 90 ns
  EXPECT_EQ(steps[0].t_end, 120);
  EXPECT_EQ(steps[1].t_begin, 120);
  EXPECT_EQ(steps[1].t_end, 230);
  EXPECT_EQ(steps[1].tokens, 20);
  EXPECT_DOUBLE_EQ(steps[1].loss, 2.1);
  EXPECT_EQ(steps[1].ranks_seen, 2);
  EXPECT_EQ(step_at(steps, 5), -1);
  EXPECT_EQ(step_at(steps, 10), 0);
  EXPECT_EQ(step_at(steps, 119), 0);
  EXPECT_EQ(step_at(steps, 120), 1);
  EXPECT_EQ(step_at(steps, 230), -1);
  EXPECT_EQ(find_step(steps, 1), 1);
  EXPECT_EQ(find_step(steps, 7), -1);
}

TEST(ViewerUnits, StripsHoldEachStateUntilTheNextEvent) {
  std::vector<UnitEvent> ev = {{0, 0, UnitState::sharded},    {5, 1, UnitState::sharded},
                               {10, 0, UnitState::gathering}, {20, 0, UnitState::unsharded},
                               {30, 0, UnitState::resharded}, {-1, -1, UnitState::unsharded}};
  UnitStrips u = build_unit_strips(ev, 50);
  ASSERT_EQ(u.n_units(), 2);
  ASSERT_EQ(u.by_unit[0].size(), 4u);
  EXPECT_EQ(u.by_unit[0][1].t0, 10);
  EXPECT_EQ(u.by_unit[0][1].t1, 20);
  EXPECT_EQ(u.by_unit[0][1].state, UnitState::gathering);
  EXPECT_EQ(u.by_unit[0][3].t1, 50);
  UnitState s;
  ASSERT_TRUE(u.state_at(0, 25, &s));
  EXPECT_EQ(s, UnitState::unsharded);
  EXPECT_FALSE(u.state_at(1, 4, &s));  // before its first event
  ASSERT_TRUE(u.state_at(1, 49, &s));
  EXPECT_EQ(s, UnitState::sharded);
  // Durations add up to the time from the first event to t_last.
  int64_t sum = 0;
  for (const UnitSegment& g : u.by_unit[0]) sum += g.t1 - g.t0;
  EXPECT_EQ(sum, 50);
}

TEST(ViewerRunInfo, ReadsMetaFieldsAndToleratesAbsence) {
  RunData run;
  run.dir = "runs/fsdp/";
  run.ranks.resize(3);
  RunInfo a = read_run_info(run);
  EXPECT_EQ(a.name, "fsdp");
  EXPECT_EQ(a.world, 3);
  EXPECT_EQ(a.mem_limit, 0);
  run.meta = {{"world_size", 4}, {"mem_limit", 1 << 20}, {"strategy", "full_shard"}};
  RunInfo b = read_run_info(run);
  EXPECT_EQ(b.world, 4);
  EXPECT_EQ(b.mem_limit, 1 << 20);
  EXPECT_EQ(b.strategy, "full_shard");
  run.meta["mem_limit"] = "512MiB";
  EXPECT_EQ(read_run_info(run).mem_limit, int64_t(512) << 20);
  run.meta["mem_limit"] = "lots";
  EXPECT_EQ(read_run_info(run).mem_limit, 0);
  // shardlab train's meta.json: the capacity sits in "config" (0 there means none).
  run.meta = {{"world_size", 4}, {"config", {{"mem_limit", 83886080}}}};
  EXPECT_EQ(read_run_info(run).mem_limit, 83886080);
  run.meta["config"]["mem_limit"] = 0;
  EXPECT_EQ(read_run_info(run).mem_limit, 0);
}

TEST(ViewerRunInfo, NamesUnitsByWhatTheyHoldWhenMetaSays) {
  // shardlab train's meta.json lists the FSDP units its wrap policy made; the units strip labels
  // its rows with them. Older runs (no "units") and damaged entries fall back to the number.
  RunData run;
  run.meta = {{"units", {{{"name", "root"}}, {{"name", "blocks 0-1"}}, {{"numel", 5}}}}};
  const RunInfo info = read_run_info(run);
  ASSERT_EQ(info.unit_names.size(), 3u);
  EXPECT_EQ(unit_label(info, 0), "unit 0: root");
  EXPECT_EQ(unit_label(info, 1), "unit 1: blocks 0-1");
  EXPECT_EQ(unit_label(info, 2), "unit 2");
  EXPECT_EQ(unit_label(info, 7), "unit 7");
  EXPECT_EQ(unit_label(read_run_info(RunData{}), 1), "unit 1");
}

// A damaged meta.json: the world used for bus factors and the toolbar comes from the ranks read
// (a world_size of 2e9 was taken as is), and a capacity beyond range draws no line.
TEST(ViewerRunInfo, DamagedMetaFallsBackToTheRanksRead) {
  RunData run;
  run.dir = "runs/x";
  run.ranks.resize(2);
  run.meta = {{"world_size", 2000000000}, {"mem_limit", 1e30}};
  RunInfo a = read_run_info(run);
  EXPECT_EQ(a.world, 2);
  EXPECT_EQ(a.mem_limit, 0);
  run.meta = {{"world_size", 1.5}, {"mem_limit", -5}};
  EXPECT_EQ(read_run_info(run).world, 2);
  EXPECT_EQ(read_run_info(run).mem_limit, 0);
}

TEST(ViewerRunModel, SummaryMatchesTheSchedule) {
  testing::SyntheticOptions o;
  o.ranks = 4;
  o.steps = 5;
  o.units = 3;
  o.mem_limit = 256 << 20;
  RunData run = testing::make_synthetic_run(o);
  RunModel m = build_run_model(run);
  EXPECT_EQ(m.info.world, 4);
  EXPECT_EQ(m.info.mem_limit, 256 << 20);
  EXPECT_TRUE(m.finished);
  ASSERT_EQ(m.ranks.size(), 4u);
  ASSERT_EQ(m.steps.size(), 5u);
  EXPECT_EQ(m.summary.n_steps, 5);

  // FSDP: per step and rank, 2U all-gathers (forward and backward) and U reduce-scatters of a
  // full unit buffer each.
  const SummaryFigures& s = m.summary;
  const int64_t P = o.unit_param_bytes;
  auto ag = s.ops[static_cast<int>(OpKind::all_gather)];
  auto rs = s.ops[static_cast<int>(OpKind::reduce_scatter)];
  EXPECT_EQ(ag.count, 4 * 5 * 2 * 3);
  EXPECT_EQ(ag.bytes, 4 * 5 * 2 * 3 * P);
  EXPECT_EQ(rs.count, 4 * 5 * 3);
  EXPECT_EQ(rs.bytes, 4 * 5 * 3 * P);
  EXPECT_EQ(s.ops[static_cast<int>(OpKind::all_reduce)].count, 0);
  // Every collective runs at comm_gbps, so the aggregate algbw is that rate (to rounding of ns).
  EXPECT_NEAR(ag.bandwidth.algbw, o.comm_gbps * 1e9, o.comm_gbps * 1e9 * 1e-5);
  EXPECT_NEAR(ag.bandwidth.busbw, ag.bandwidth.algbw * 3.0 / 4.0, 1e-3);

  // tokens/s: all ranks' tokens over the summed step times of steps 1..4 (step 0 is warmup), a
  // step's time being its slowest rank's.
  double seconds = 0;
  for (int step = 1; step < 5; ++step) {
    double slowest = 0;
    for (const RankTrace& r : run.ranks) slowest = std::max(slowest, r.steps[step].step_time);
    seconds += slowest;
  }
  EXPECT_TRUE(s.warmup_excluded);
  EXPECT_NEAR(s.tokens_per_s, 4.0 * 4 * o.tokens_per_rank / seconds, 1e-9 * s.tokens_per_s);
  EXPECT_NEAR(s.mean_step_s, seconds / 4, 1e-12);

  // Peaks: per rank, persistent state (16 bytes per parameter over N) plus transients.
  const int64_t shard = P / 4;
  for (const RankModel& r : m.ranks) {
    EXPECT_EQ(r.mem.peak_by_cat[static_cast<int>(MemCategory::params)], shard * 3);
    EXPECT_EQ(r.mem.peak_by_cat[static_cast<int>(MemCategory::optimizer_state)], 2 * shard * 3);
    EXPECT_GE(r.mem.peak_total, 4 * shard * 3 + o.unit_act_bytes * 3);
    EXPECT_LE(r.mem.peak_total, s.max_peak);
    EXPECT_GT(r.exposed.comm_ns, 0);
    EXPECT_LE(r.exposed.exposed_ns, r.exposed.comm_ns);
    EXPECT_EQ(r.units.n_units(), 3);
  }
  EXPECT_GE(s.overlap(), 0.0);
  EXPECT_LE(s.overlap(), 1.0);
}

TEST(ViewerRunModel, DataParallelUsesAllReduceAndNoUnitStates) {
  testing::SyntheticOptions o;
  o.strategy = "no_shard";
  o.ranks = 2;
  o.steps = 2;
  o.units = 4;
  RunModel m = build_run_model(testing::make_synthetic_run(o));
  auto ar = m.summary.ops[static_cast<int>(OpKind::all_reduce)];
  EXPECT_EQ(ar.count, 2 * 2 * 4);
  EXPECT_EQ(ar.bytes, 2 * 2 * 4 * o.unit_param_bytes);
  EXPECT_NEAR(ar.bandwidth.busbw, ar.bandwidth.algbw * 2.0 * 1 / 2, 1e-3);
  EXPECT_EQ(m.summary.ops[static_cast<int>(OpKind::all_gather)].count, 0);
  EXPECT_EQ(m.ranks[0].units.n_units(), 0);
  // DDP keeps full params, grads and Adam state: 16 bytes per parameter on every rank.
  EXPECT_EQ(m.ranks[0].mem.peak_by_cat[static_cast<int>(MemCategory::params)],
            4 * o.unit_param_bytes);
}

TEST(ViewerRunModel, EmptyAndPartialRuns) {
  RunData empty;
  empty.dir = "runs/none";
  RunModel m = build_run_model(empty);
  EXPECT_EQ(m.ranks.size(), 0u);
  EXPECT_EQ(m.summary.n_steps, 0);
  EXPECT_EQ(m.summary.tokens_per_s, 0);
  EXPECT_FALSE(m.finished);
  // A live run whose last step only some ranks reported: throughput counts complete steps only.
  testing::SyntheticOptions o;
  o.ranks = 2;
  o.steps = 3;
  RunData run = testing::make_synthetic_run(o);
  run.ranks[1].steps.pop_back();
  RunModel p = build_run_model(run);
  EXPECT_EQ(p.steps.size(), 3u);
  EXPECT_EQ(p.summary.n_steps, 2);
}

TEST(ViewerRunModel, HostTierIsApartFromDeviceMemory) {
  // --offload's host-tier events build their own series; the device series does not see them.
  testing::SyntheticOptions o;
  o.ranks = 2;
  o.steps = 2;
  RunData run = testing::make_synthetic_run(o);
  const int64_t device_peak = build_run_model(run).ranks[0].mem.peak_total;
  run.ranks[0].host_mem.push_back({10, MemCategory::optimizer_state, 4096, 4096, 4096});
  run.ranks[0].host_mem.push_back({20, MemCategory::workspace, 512, 512, 4608});
  run.ranks[0].host_mem.push_back({30, MemCategory::workspace, -512, 0, 4096});
  const RunModel m = build_run_model(run);
  EXPECT_EQ(m.ranks[0].mem.peak_total, device_peak);
  EXPECT_EQ(m.ranks[0].host_mem.peak_total, 4608);
  EXPECT_EQ(m.ranks[1].host_mem.peak_total, 0);
}

TEST(ViewerLayout, PanelsTileTheWindow) {
  for (int n : {1, 2, 3}) {
    PanelLayout L = layout_panels(1600, 1000, n);
    ASSERT_EQ(static_cast<int>(L.runs.size()), n);
    double area = L.toolbar.w * L.toolbar.h + L.summary.w * L.summary.h;
    for (const RunPanels& p : L.runs) {
      area += p.memory.w * p.memory.h + p.timeline.w * p.timeline.h + p.units.w * p.units.h;
      EXPECT_EQ(p.memory.x, p.timeline.x);  // a run's panels share a column (and a time axis)
      EXPECT_EQ(p.memory.w, p.timeline.w);
      EXPECT_EQ(p.memory.y + p.memory.h, p.timeline.y);
      EXPECT_EQ(p.timeline.y + p.timeline.h, p.units.y);
      EXPECT_EQ(p.units.y + p.units.h, L.summary.y);
    }
    EXPECT_DOUBLE_EQ(area, 1600.0 * 1000.0);
    EXPECT_EQ(L.runs.back().memory.x + L.runs.back().memory.w, 1600);
  }
}

}  // namespace shardlab::viewer
