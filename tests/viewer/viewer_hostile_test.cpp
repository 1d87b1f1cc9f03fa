// The viewer's model on runs that used to mislead it: a simulated run's busbw (its file holds one
// rank of N, and n = 1 made every busbw 0.00), and one event far beyond a short run (the whole
// run squeezed into one pixel). The 4096-rank memory panel is a screenshot test
// (viewer_screenshot_test.cpp).
#include <gtest/gtest.h>

#include "tests/viewer/synthetic_run.hpp"
#include "viewer/model/ops.hpp"
#include "viewer/model/run_model.hpp"

namespace shardlab::viewer {

TEST(ViewerHostile, SimulatedRunsBusbwUsesTheRanksTheyStandFor) {
  testing::SyntheticOptions o;
  o.ranks = 2;
  o.steps = 3;
  RunData run = testing::make_synthetic_run(o);
  run.meta["world_size"] = 1;
  run.meta["simulated"] = {{"ranks", 64}, {"rank", 0}, {"cluster", "h100-sxm"}};
  const RunModel m = build_run_model(run);
  EXPECT_EQ(m.info.job_ranks(), 64);
  const OpStats& ag = m.summary.ops[static_cast<int>(OpKind::all_gather)];
  ASSERT_GT(ag.count, 0);
  EXPECT_GT(ag.bandwidth.busbw, 0);
  EXPECT_DOUBLE_EQ(ag.bandwidth.busbw, ag.bandwidth.algbw * 63.0 / 64.0);
  // A measured run keeps its world.
  run.meta.erase("simulated");
  EXPECT_EQ(build_run_model(run).info.job_ranks(), 1);
}

TEST(ViewerHostile, AnEventFarBeyondTheRunIsFlaggedNotFitted) {
  testing::SyntheticOptions o;
  o.ranks = 2;
  o.steps = 4;
  RunData run = testing::make_synthetic_run(o);
  const int64_t end = build_run_model(run).t_last;
  const int64_t rank1_last = run.ranks[1].t_last;
  run.ranks[1].marks.push_back({int64_t(1) << 59, "far away"});
  run.ranks[1].t_last = int64_t(1) << 59;  // as the reader keeps it (the latest time it has seen)
  const RunModel m = build_run_model(run);
  EXPECT_EQ(m.t_last, int64_t(1) << 59);
  EXPECT_EQ(m.t_view, end);  // the whole-run view ends with the run, not 18 years later
  EXPECT_EQ(m.n_beyond, 1);
  EXPECT_EQ(beyond_note(m).find("1 event far beyond the last step (from t = 5.76e+08 s)"), 0u)
      << beyond_note(m);
  // A run without such an event: nothing flagged.
  run.ranks[1].marks.pop_back();
  run.ranks[1].t_last = rank1_last;
  EXPECT_EQ(build_run_model(run).n_beyond, 0);
  EXPECT_EQ(beyond_note(build_run_model(run)), "");
}

}  // namespace shardlab::viewer
