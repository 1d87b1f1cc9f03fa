// Gantt layout: lanes, visible ranges, merging of sub-pixel bars, hit-testing and rows.
#include <gtest/gtest.h>

#include "viewer/model/gantt.hpp"

namespace shardlab::viewer {

namespace {
SpanEvent span(Lane lane, const char* op, int64_t t0, int64_t t1, int unit = 0) {
  return {lane, op, unit, 1000, DType::f32, t0, t0, t1, -1};
}
}  // namespace

TEST(ViewerGantt, BarsGoToTheirLanesSortedByStart) {
  RankBars rb = build_rank_bars({span(Lane::compute, "backward", 50, 60),
                                 span(Lane::comm, "all_gather", 0, 30),
                                 span(Lane::compute, "forward", 10, 20)});
  const LaneBars& c = rb.lane(Lane::compute);
  ASSERT_EQ(c.bars.size(), 2u);
  EXPECT_EQ(c.bars[0].op, OpKind::forward);
  EXPECT_EQ(c.bars[0].span, 2);
  EXPECT_EQ(c.bars[1].op, OpKind::backward);
  EXPECT_EQ(c.max_duration, 10);
  ASSERT_EQ(rb.lane(Lane::comm).bars.size(), 1u);
  EXPECT_EQ(rb.lane(Lane::comm).bars[0].span, 1);
}

TEST(ViewerGantt, HitTestFindsTheBarUnderThePixel) {
  // 1 us per pixel from t=0 at x=100: forward [10us,20us) is x in [110,120).
  RankBars rb = build_rank_bars(
      {span(Lane::compute, "forward", 10000, 20000), span(Lane::compute, "backward", 40000, 40100),
       span(Lane::compute, "optimizer", 60000, 90000), span(Lane::compute, "other", 70000, 71000)});
  const LaneBars& lane = rb.lane(Lane::compute);
  TimeAxis axis(100, 1000, 0, 1000);
  auto op_at = [&](double x) {
    int i = hit_test(lane, axis, x);
    return i < 0 ? std::string("none") : op_kind_name(lane.bars[i].op);
  };
  EXPECT_EQ(op_at(115), "forward");
  EXPECT_EQ(op_at(110.0), "forward");
  EXPECT_EQ(op_at(125), "none");     // 5 px from the bar, outside the 2 px tolerance
  EXPECT_EQ(op_at(121), "forward");  // within tolerance of its end
  // A 0.1 px bar is still hittable within the tolerance.
  EXPECT_EQ(op_at(140.05), "backward");
  EXPECT_EQ(op_at(141.5), "backward");
  // Nested: the innermost (shortest) bar wins; outside it the outer one.
  EXPECT_EQ(op_at(170.5), "other");
  EXPECT_EQ(op_at(180), "optimizer");
  // After zooming and panning the same time is found at its new pixel.
  axis.zoom_at(400, 3.0);
  axis.pan_px(-37);
  EXPECT_EQ(op_at(axis.to_x(15000)), "forward");
  EXPECT_EQ(op_at(axis.to_x(30000)), "none");
}

TEST(ViewerGantt, VisibleRangeAndMergingOfThinBars) {
  // 1000 bars of 100 ns every 1 us (ops alternating), then one long bar.
  std::vector<SpanEvent> s;
  for (int i = 0; i < 1000; ++i)
    s.push_back(span(Lane::comm, i % 2 ? "all_gather" : "reduce_scatter", i * 1000,
                     i * 1000 + (i == 500 ? 400 : 100)));
  s.push_back(span(Lane::comm, "all_reduce", 2000000, 3000000));
  RankBars rb = build_rank_bars(s);
  const LaneBars& lane = rb.lane(Lane::comm);
  auto [first, last] = lane.visible(2500000, 2600000);
  ASSERT_EQ(last - first, 1u);  // only the long bar intersects
  EXPECT_EQ(lane.bars[first].op, OpKind::all_reduce);

  // 100 us per pixel: the 1000 thin bars (1 ms) fall in 10 pixels and merge into groups of at
  // most 2 px, coloured by the op with the most time in each.
  TimeAxis axis(0, 40, 0, 1e5);
  auto bars = layout_lane(lane, axis);
  ASSERT_GE(bars.size(), 6u);
  ASSERT_LE(bars.size(), 12u);
  int merged = 0;
  for (size_t i = 0; i + 1 < bars.size(); ++i) {
    merged += bars[i].merged;
    EXPECT_LE(bars[i].x1 - bars[i].x0, 2.0 + 1e-9);
    EXPECT_LE(bars[i].x1, bars[i + 1].x0 + 1e-9) << "groups do not overlap";
  }
  EXPECT_EQ(merged, 1000);
  EXPECT_NEAR(bars.front().x0, 0, 1e-9);
  // The last member sits at 9.99 px and is drawn 1 px wide; groups start where the previous one
  // ends, which may push the end right by less than a pixel.
  EXPECT_GE(bars[bars.size() - 2].x1, 10.99 - 1e-9);
  EXPECT_LT(bars[bars.size() - 2].x1, 11.99);
  for (size_t i = 0; i + 1 < bars.size(); ++i) {
    // Hovering the group that holds the 400 ns bar (at 5 px) shows that longest bar.
    if (bars[i].x0 <= 5.0 && 5.0 < bars[i].x1) {
      EXPECT_EQ(lane.bars[bars[i].span].t0, 500000);
      EXPECT_EQ(bars[i].op, OpKind::reduce_scatter);
    }
  }
  EXPECT_EQ(bars.back().op, OpKind::all_reduce);
  EXPECT_EQ(bars.back().merged, 1);
  EXPECT_NEAR(bars.back().x0, 20, 1e-9);
  EXPECT_NEAR(bars.back().x1, 30, 1e-9);

  // Zoomed in to 10 ns per pixel, every visible bar stands alone and is 10 px wide.
  TimeAxis close(0, 500, 0, 10);  // [0, 5 us)
  auto each = layout_lane(lane, close);
  ASSERT_EQ(each.size(), 5u);
  for (const DrawBar& b : each) {
    EXPECT_EQ(b.merged, 1);
    EXPECT_NEAR(b.x1 - b.x0, 10, 1e-9);
  }
}

TEST(ViewerGantt, MergedGroupTakesTheOpWithTheMostTime) {
  // Within one pixel: all_gather 100 ns (the longest single bar), then two reduce_scatters of
  // 60 ns. reduce_scatter has more time (120 ns): it gives the colour; hover shows the all_gather.
  RankBars rb = build_rank_bars({span(Lane::comm, "all_gather", 0, 100),
                                 span(Lane::comm, "reduce_scatter", 200, 260),
                                 span(Lane::comm, "reduce_scatter", 300, 360)});
  TimeAxis axis(0, 10, 0, 1000);  // 1 us per pixel
  auto bars = layout_lane(rb.lane(Lane::comm), axis);
  ASSERT_EQ(bars.size(), 1u);
  EXPECT_EQ(bars[0].merged, 3);
  EXPECT_EQ(bars[0].op, OpKind::reduce_scatter);
  EXPECT_EQ(rb.lane(Lane::comm).bars[bars[0].span].op, OpKind::all_gather);
}

TEST(ViewerGantt, RowsMapPixelsToRankAndLane) {
  GanttRows g;
  g.y_top = 100;
  g.lane_h = 10;
  g.rank_gap = 5;
  g.n_ranks = 3;
  int r = -1;
  Lane l = Lane::compute;
  ASSERT_TRUE(g.row_at(100, &r, &l));
  EXPECT_EQ(r, 0);
  EXPECT_EQ(l, Lane::compute);
  ASSERT_TRUE(g.row_at(115, &r, &l));
  EXPECT_EQ(r, 0);
  EXPECT_EQ(l, Lane::comm);
  EXPECT_FALSE(g.row_at(122, &r, &l));  // the gap after rank 0
  ASSERT_TRUE(g.row_at(g.lane_y(2, Lane::comm) + 1, &r, &l));
  EXPECT_EQ(r, 2);
  EXPECT_EQ(l, Lane::comm);
  EXPECT_FALSE(g.row_at(99, &r, &l));
  EXPECT_FALSE(g.row_at(100 + g.height(), &r, &l));
  GanttRows f = fit_rows(0, 200, 4);
  EXPECT_LE(f.height(), 200 + 1e-9);
  EXPECT_GE(f.lane_h, 6);
}

}  // namespace shardlab::viewer
