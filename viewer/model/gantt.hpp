// Gantt layout: one rank's spans as bars in lanes (compute, comm, and copy between the memory
// tiers under --offload), the rows they occupy on
// screen, which bars are visible at a zoom (thin neighbours merged so a zoomed-out run stays
// cheap to draw), and which bar is under a pixel.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/trace/run_reader.hpp"
#include "viewer/model/ops.hpp"
#include "viewer/model/time_axis.hpp"

namespace shardlab::viewer {

struct Bar {
  int64_t t0 = 0, t1 = 0;  // span t_start, t_end
  OpKind op = OpKind::other;
  int span = -1;  // index into RankTrace::spans
};

struct LaneBars {
  std::vector<Bar> bars;  // sorted by t0
  int64_t max_duration = 0;
  // Bars that may intersect [t_lo, t_hi): indices [first, last).
  std::pair<size_t, size_t> visible(double t_lo, double t_hi) const;
};

struct RankBars {
  std::array<LaneBars, 3> lanes;  // indexed by Lane (compute = 0, comm = 1, copy = 2)
  const LaneBars& lane(Lane l) const { return lanes[static_cast<int>(l)]; }
};
RankBars build_rank_bars(const std::vector<SpanEvent>& spans);

struct DrawBar {
  double x0 = 0, x1 = 0;
  OpKind op = OpKind::other;
  int span = -1;   // the longest bar in a merged group
  int merged = 1;  // how many bars it stands for
};
// Visible bars in pixels, clipped to the axis (plus a pixel of margin). Consecutive bars narrower
// than `min_px` are merged into groups at most 2 * min_px wide, coloured by the op that has the
// most time in the group, so a zoomed-out lane still shows which op dominates where. Every
// returned bar is at least min_px wide.
std::vector<DrawBar> layout_lane(const LaneBars& lane, const TimeAxis& axis, double min_px = 1.0);

// The bar under pixel x: the shortest bar containing that time, else the nearest bar within
// tol_px pixels; -1 when none. Returns an index into lane.bars.
int hit_test(const LaneBars& lane, const TimeAxis& axis, double x, double tol_px = 2.0);

// Rows of the Gantt chart: per rank a compute lane above a comm lane (above a copy lane when the
// run copies between memory tiers: n_lanes = 3), then a gap.
struct GanttRows {
  double y_top = 0;
  double lane_h = 14;
  double rank_gap = 6;
  int n_ranks = 0;
  int n_lanes = 2;
  double rank_h() const { return n_lanes * lane_h + rank_gap; }
  double lane_y(int rank, Lane l) const {
    return y_top + rank * rank_h() + static_cast<int>(l) * lane_h;
  }
  double height() const { return n_ranks * rank_h(); }
  // The (rank, lane) whose row contains y; false in gaps and outside.
  bool row_at(double y, int* rank, Lane* lane) const;
};
// Rows filling `height` pixels for n ranks of n_lanes (2 or 3) lanes, lanes between min and max
// height.
GanttRows fit_rows(double y_top, double height, int n_ranks, double min_lane_h = 6,
                   double max_lane_h = 22, int n_lanes = 2);

}  // namespace shardlab::viewer
