// Memory series: values by category, totals equal to the stack, the peak, hover lookup, and the
// per-pixel columns (a spike narrower than a pixel must survive zooming out).
#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "tests/viewer/synthetic_run.hpp"
#include "viewer/model/memory_series.hpp"

namespace shardlab::viewer {

namespace {
MemEvent ev(int64_t t, MemCategory c, int64_t delta, int64_t cat_total, int64_t total) {
  return {t, c, delta, cat_total, total};
}
std::vector<MemEvent> hand_events() {
  return {ev(0, MemCategory::params, 100, 100, 100),
          ev(10, MemCategory::params_unsharded, 400, 400, 500),
          ev(20, MemCategory::activations, 50, 50, 550),
          ev(30, MemCategory::params_unsharded, -400, 0, 150),
          ev(40, MemCategory::grads, 100, 100, 250)};
}
}  // namespace

TEST(ViewerMemory, SeriesFollowsEventsAndFindsThePeak) {
  MemorySeries s = build_memory_series(hand_events());
  ASSERT_EQ(s.samples.size(), 5u);
  EXPECT_EQ(s.peak_total, 550);
  EXPECT_EQ(s.t_peak, 20);
  EXPECT_EQ(s.at_peak[static_cast<int>(MemCategory::params_unsharded)], 400);
  EXPECT_EQ(s.peak_by_cat[static_cast<int>(MemCategory::params_unsharded)], 400);
  EXPECT_EQ(s.peak_by_cat[static_cast<int>(MemCategory::grads)], 100);
  EXPECT_EQ(s.at(-1).total, 0);
  EXPECT_EQ(s.at(0).total, 100);
  EXPECT_EQ(s.at(25).total, 550);
  EXPECT_EQ(s.at(35).total, 150);
  EXPECT_EQ(s.at(1000).total, 250);
  for (const MemSample& m : s.samples) {
    Stack st = stack_categories(m.cat);
    EXPECT_EQ(st.total, m.total);
    // Bands follow kStackOrder without gaps or overlaps: each starts where the one below ends.
    int64_t y = 0;
    for (MemCategory c : kStackOrder) {
      int k = static_cast<int>(c);
      EXPECT_EQ(st.bottom[k], y);
      y = st.top(k, m.cat);
    }
    EXPECT_EQ(y, m.total);
  }
}

TEST(ViewerMemory, StackSumsEqualRecordedTotalsOnASyntheticRun) {
  testing::SyntheticOptions o;
  o.ranks = 4;
  o.steps = 3;
  RunData run = testing::make_synthetic_run(o);
  for (const RankTrace& r : run.ranks) {
    MemorySeries s = build_memory_series(r.mem);
    ASSERT_EQ(s.samples.size(), r.mem.size());
    for (size_t i = 0; i < s.samples.size(); ++i) {
      EXPECT_EQ(s.samples[i].total, r.mem[i].total) << "event " << i;
      EXPECT_EQ(stack_categories(s.samples[i].cat).total, r.mem[i].total);
    }
    int64_t peak = 0;
    for (const MemEvent& e : r.mem) peak = std::max(peak, e.total);
    EXPECT_EQ(s.peak_total, peak);
  }
}

TEST(ViewerMemory, ColumnsKeepSubPixelSpikes) {
  // A 1 ns spike to 5000 bytes inside a 1 ms pixel must show as that pixel's height.
  std::vector<MemEvent> e = {ev(0, MemCategory::params, 100, 100, 100),
                             ev(2500000, MemCategory::workspace, 4900, 4900, 5000),
                             ev(2500001, MemCategory::workspace, -4900, 0, 100)};
  MemorySeries s = build_memory_series(e);
  TimeAxis axis(0, 10, 0, 1e6);  // 10 px of 1 ms
  auto cols = memory_columns(s, axis, 10000000);
  ASSERT_FALSE(cols.empty());
  int64_t max_seen = 0;
  double covered = 0;
  for (const MemColumn& c : cols) {
    max_seen = std::max(max_seen, c.total);
    covered += c.x1 - c.x0;
    EXPECT_EQ(stack_categories(c.cat).total, c.total);
  }
  EXPECT_EQ(max_seen, 5000);
  EXPECT_DOUBLE_EQ(covered, 10);
  // Pixel 2 holds the spike; its neighbours do not. Equal neighbours merge: 3 columns in all.
  ASSERT_EQ(cols.size(), 3u);
  EXPECT_DOUBLE_EQ(cols[1].x0, 2);
  EXPECT_DOUBLE_EQ(cols[1].x1, 3);
  EXPECT_EQ(cols[1].total, 5000);
  EXPECT_EQ(cols[0].total, 100);
  EXPECT_EQ(cols[2].total, 100);
}

TEST(ViewerMemory, ColumnsStopAtTheLastEventAndClipToTheAxis) {
  MemorySeries s = build_memory_series(hand_events());
  // 1 ns per px from t=5: data runs to t=40 (t_last), so pixels [0, 36) only, the last one
  // holding the state after the event at 40; events before 5 are carried in.
  TimeAxis axis(100, 1000, 5, 1);
  auto cols = memory_columns(s, axis, 40);
  ASSERT_FALSE(cols.empty());
  EXPECT_DOUBLE_EQ(cols.front().x0, 100);
  EXPECT_EQ(cols.front().total, 100);
  EXPECT_DOUBLE_EQ(cols.back().x1, 100 + 36);
  EXPECT_EQ(cols.back().total, 250);
  // Zoomed far out, the whole run fits in one pixel holding the peak.
  TimeAxis wide(0, 100, 0, 1e6);
  auto one = memory_columns(s, wide, 40);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].total, 550);
}

TEST(ViewerMemory, BandsCoverTheSameAreaAsColumnsWithFewerRectangles) {
  testing::SyntheticOptions o;
  o.ranks = 1;
  o.steps = 30;
  RunData run = testing::make_synthetic_run(o);
  MemorySeries s = build_memory_series(run.ranks[0].mem);
  TimeAxis axis(50, 800, 0, static_cast<double>(run.ranks[0].t_last) / 800);
  auto cols = memory_columns(s, axis, run.ranks[0].t_last);
  ValueAxis va{static_cast<double>(s.peak_total) * 1.2, 300, 120};
  auto bands = memory_bands(cols, va);
  // Reference: every (column, category) pixel area with the same rounding.
  double ref_area = 0;
  int ref_rects = 0;
  for (const MemColumn& c : cols) {
    Stack st = stack_categories(c.cat);
    for (int k = 0; k < kNumMemCategories; ++k) {
      double h =
          std::round(va.to_y(double(st.bottom[k]))) - std::round(va.to_y(double(st.top(k, c.cat))));
      if (c.cat[k] > 0) {
        h = std::max(h, kMinBandPx);
        ref_area += (c.x1 - c.x0) * h;
        ++ref_rects;
      }
    }
  }
  double area = 0;
  for (const BandRect& b : bands) {
    area += (b.x1 - b.x0) * (b.y_bottom - b.y_top);
    EXPECT_LE(b.y_top, b.y_bottom);
    EXPECT_GE(b.y_top, va.to_y(va.v_max) - 1e-9);
    EXPECT_LE(b.y_bottom, va.y_bottom + 1e-9);
  }
  EXPECT_DOUBLE_EQ(area, ref_area);
  EXPECT_LT(bands.size() * 2, static_cast<size_t>(ref_rects)) << "merging should at least halve";
  // The persistent parameter shard never changes: one rectangle from its first column to the end;
  // gradients and Adam state appear in the first step and stay.
  int params_rects = 0, grads_rects = 0, adam_rects = 0;
  for (const BandRect& b : bands) {
    params_rects += b.category == MemCategory::params;
    grads_rects += b.category == MemCategory::grads;
    adam_rects += b.category == MemCategory::optimizer_state;
  }
  EXPECT_EQ(params_rects, 1);
  EXPECT_LE(grads_rects, 3);
  EXPECT_LE(adam_rects, 3);
}

TEST(ViewerMemory, ACategoryWithAFewBytesStaysVisibleAboveItsNeighbours) {
  // 4 KiB of gathered parameters under 64 MiB of activations: a thousandth of a pixel at this
  // scale, drawn kMinBandPx tall anyway, after (so above) every ordinary band.
  MemColumn c;
  c.x0 = 10;
  c.x1 = 20;
  c.cat[static_cast<int>(MemCategory::params)] = 8 << 20;
  c.cat[static_cast<int>(MemCategory::params_unsharded)] = 4 << 10;
  c.cat[static_cast<int>(MemCategory::activations)] = 64 << 20;
  ValueAxis va{static_cast<double>(80 << 20), 200, 100};
  auto bands = memory_bands({c}, va);
  ASSERT_EQ(bands.size(), 3u);
  const BandRect& last = bands.back();
  EXPECT_EQ(last.category, MemCategory::params_unsharded);
  EXPECT_TRUE(last.widened);
  EXPECT_DOUBLE_EQ(last.y_bottom - last.y_top, kMinBandPx);
  for (size_t i = 0; i + 1 < bands.size(); ++i) EXPECT_FALSE(bands[i].widened);
  // The total is where it was: the top of the highest ordinary band.
  double top = 1e9;
  for (const BandRect& b : bands) top = std::min(top, b.y_top);
  EXPECT_DOUBLE_EQ(top, std::round(va.to_y(double((8 << 20) + (4 << 10) + (64 << 20)))));
}

}  // namespace shardlab::viewer
