// Live following: a run directory written a little at a time (and concurrently, by a writer
// thread) while LiveRun polls it through the real RunReader. Also checks the viewer's aggregates
// against the trace library's own summary of the same files.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "core/trace/summary.hpp"
#include "tests/viewer/synthetic_run.hpp"
#include "viewer/model/live_run.hpp"

namespace shardlab::viewer {

namespace fs = std::filesystem;

namespace {
std::string work_dir(const std::string& name) {
  std::string d = std::string(SHARDLAB_VIEWER_WORK_DIR) + "/" + name;
  fs::remove_all(d);
  return d;
}
int64_t step_end(const RunData& run, int step) {
  int64_t t = 0;
  for (const RankTrace& r : run.ranks)
    for (const StepEvent& e : r.steps)
      if (e.step == step) t = std::max(t, e.t);
  return t;
}
int64_t event_count(const RunData& run) {
  int64_t n = 0;
  for (const RankTrace& r : run.ranks)
    n += r.mem.size() + r.spans.size() + r.units.size() + r.steps.size() + r.marks.size();
  return n;
}
}  // namespace

TEST(ViewerLive, FollowsARunFromNothingToFinishedAndSurvivesDeletion) {
  testing::SyntheticOptions o;
  o.ranks = 3;
  o.steps = 4;
  o.units = 2;
  RunData run = testing::make_synthetic_run(o);
  std::string dir = work_dir("live_steps");
  LiveRun live(dir);

  // Not started: no directory yet.
  EXPECT_FALSE(live.poll_now());
  EXPECT_NE(live.status().find("waiting for run directory"), std::string::npos) << live.status();
  EXPECT_EQ(live.model().ranks.size(), 0u);

  testing::RunDirWriter w(run, dir);
  w.write_meta();
  EXPECT_TRUE(live.poll_now());
  EXPECT_EQ(live.model().ranks.size(), 3u);  // world_size from meta
  EXPECT_EQ(live.model().steps.size(), 0u);

  w.append_until(step_end(run, 0));
  w.append_partial(1, 25);  // a line cut mid-write
  EXPECT_TRUE(live.poll_now());
  EXPECT_EQ(live.model().steps.size(), 1u);
  EXPECT_EQ(live.model().summary.n_steps, 1);
  EXPECT_EQ(live.status(), "") << "a half-written last line is not an error";

  w.append_until(step_end(run, 2));
  EXPECT_TRUE(live.poll_now());
  EXPECT_EQ(live.model().steps.size(), 3u);
  EXPECT_FALSE(live.model().finished);

  w.append_until(INT64_MAX);
  w.write_summary();
  EXPECT_TRUE(live.poll_now());
  EXPECT_TRUE(live.model().finished);
  EXPECT_EQ(live.model().n_events, event_count(run));  // the cut line was completed, not lost
  EXPECT_EQ(live.model().steps.size(), 4u);

  // Polling is rate-limited: at most one reader poll per interval.
  int64_t polls = live.polls();
  live.poll_if_due(10.0);
  live.poll_if_due(10.1);
  live.poll_if_due(10.2);
  EXPECT_EQ(live.polls(), polls + 1);
  live.poll_if_due(10.26);
  EXPECT_EQ(live.polls(), polls + 2);

  // Deleted under the viewer: a message, and the last data stays on screen.
  fs::remove_all(dir);
  EXPECT_FALSE(live.poll_now());
  EXPECT_NE(live.status().find("removed"), std::string::npos) << live.status();
  EXPECT_EQ(live.model().steps.size(), 4u);
}

TEST(ViewerLive, MalformedLineIsReportedNotFatal) {
  testing::SyntheticOptions o;
  o.ranks = 1;
  o.steps = 2;
  RunData run = testing::make_synthetic_run(o);
  std::string dir = work_dir("live_bad_line");
  testing::write_run_dir(run, dir);
  {
    std::ofstream f(dir + "/rank0.jsonl", std::ios::app);
    f << "{\"t\": 1, \"rank\": 0, \"kind\": \"mem\", garbage\n";
  }
  LiveRun live(dir);
  EXPECT_TRUE(live.poll_now());
  EXPECT_NE(live.status().find("rank0.jsonl"), std::string::npos) << live.status();
  EXPECT_EQ(live.model().steps.size(), 2u);
}

TEST(ViewerLive, ConcurrentWriterIsFollowedStepByStep) {
  // A writer thread appends one step at a time while this thread polls as fast as it can, so
  // polls land mid-write. After each step the writer waits until a poll has started after its
  // write (or 2 s), so every step count must be seen along the way, whatever the scheduling.
  testing::SyntheticOptions o;
  o.ranks = 4;
  o.steps = 12;
  o.units = 3;
  RunData run = testing::make_synthetic_run(o);
  std::string dir = work_dir("live_concurrent");
  testing::RunDirWriter w(run, dir);
  w.write_meta();
  LiveRun live(dir);
  std::atomic<bool> done{false};
  std::atomic<int64_t> polls{0};
  std::thread writer([&] {
    for (int s = 0; s < o.steps; ++s) {
      w.append_until(step_end(run, s));
      int64_t after = polls.load() + 1;  // the next poll may have started before the write
      auto t0 = std::chrono::steady_clock::now();
      while (polls.load() <= after &&
             std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2))
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    w.append_until(INT64_MAX);
    w.write_summary();
    done = true;
  });
  std::vector<size_t> seen;
  auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
    bool finished = done.load();
    live.poll_now();
    ++polls;
    if (seen.empty() || seen.back() != live.model().steps.size())
      seen.push_back(live.model().steps.size());
    if (finished) break;
  }
  writer.join();
  live.poll_now();
  for (size_t i = 1; i < seen.size(); ++i) EXPECT_GE(seen[i], seen[i - 1]);
  for (size_t k = 1; k <= 12; ++k)
    EXPECT_NE(std::find(seen.begin(), seen.end(), k), seen.end()) << k << " steps never shown";
  EXPECT_EQ(live.model().steps.size(), 12u);
  EXPECT_EQ(live.model().n_events, event_count(run));
  EXPECT_EQ(live.status(), "");
}

TEST(ViewerLive, AggregatesAgreeWithTheTraceSummary) {
  testing::SyntheticOptions o;
  o.ranks = 4;
  o.steps = 6;
  o.units = 4;
  std::string dir = work_dir("cross_check");
  testing::write_run_dir(testing::make_synthetic_run(o), dir);
  RunData run = read_run(dir);
  RunModel m = build_run_model(run);
  shardlab::RunSummary ref = compute_summary(run);
  ASSERT_EQ(ref.ranks.size(), m.ranks.size());
  for (size_t r = 0; r < m.ranks.size(); ++r) {
    EXPECT_EQ(m.ranks[r].mem.peak_total, ref.ranks[r].peak_total) << "rank " << r;
    EXPECT_EQ(m.ranks[r].mem.at_peak, ref.ranks[r].at_peak) << "rank " << r;
    EXPECT_EQ(m.ranks[r].mem.peak_by_cat, ref.ranks[r].peak) << "rank " << r;
    EXPECT_EQ(m.ranks[r].exposed.comm_ns, ref.ranks[r].comm_ns) << "rank " << r;
    EXPECT_EQ(m.ranks[r].exposed.exposed_ns, ref.ranks[r].exposed_comm_ns) << "rank " << r;
  }
  EXPECT_NEAR(m.summary.tokens_per_s, ref.tokens_per_s, 1e-9 * ref.tokens_per_s);
  EXPECT_NEAR(m.summary.mean_step_s, ref.step_time.mean_s, 1e-12);
  EXPECT_EQ(m.summary.warmup_excluded, ref.step_time.warmup_excluded);
  for (const CommStat& c : ref.comm)
    EXPECT_EQ(m.summary.ops[static_cast<int>(classify_op(c.op))].bytes, c.bytes) << c.op;
}

}  // namespace shardlab::viewer
