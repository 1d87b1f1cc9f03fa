// Gantt bars, merging and hit-testing (see gantt.hpp).
#include "viewer/model/gantt.hpp"

#include <algorithm>
#include <cmath>

namespace shardlab::viewer {

std::pair<size_t, size_t> LaneBars::visible(double t_lo, double t_hi) const {
  double from = t_lo - static_cast<double>(max_duration);
  auto first = std::lower_bound(bars.begin(), bars.end(), from, [](const Bar& b, double t) {
    return static_cast<double>(b.t0) < t;
  });
  auto last = std::lower_bound(first, bars.end(), t_hi, [](const Bar& b, double t) {
    return static_cast<double>(b.t0) < t;
  });
  return {static_cast<size_t>(first - bars.begin()), static_cast<size_t>(last - bars.begin())};
}

RankBars build_rank_bars(const std::vector<SpanEvent>& spans) {
  RankBars rb;
  for (size_t i = 0; i < spans.size(); ++i) {
    const SpanEvent& s = spans[i];
    Bar b;
    b.t0 = s.t_start;
    b.t1 = std::max(s.t_start, s.t_end);
    b.op = classify_op(s.op);
    b.span = static_cast<int>(i);
    LaneBars& lane = rb.lanes[static_cast<int>(s.lane)];
    lane.bars.push_back(b);
    lane.max_duration = std::max(lane.max_duration, b.t1 - b.t0);
  }
  for (LaneBars& lane : rb.lanes)
    std::stable_sort(lane.bars.begin(), lane.bars.end(),
                     [](const Bar& a, const Bar& b) { return a.t0 < b.t0; });
  return rb;
}

std::vector<DrawBar> layout_lane(const LaneBars& lane, const TimeAxis& axis, double min_px) {
  std::vector<DrawBar> out;
  auto [first, last] = lane.visible(axis.t_begin(), axis.t_end());
  double left = axis.x0() - 1, right = axis.x0() + axis.width() + 1;
  // The open group of merged thin bars: time per op (its colour is the op with the most) and the
  // longest member (what hovering it shows).
  std::array<int64_t, kNumOpKinds> op_ns{};
  int64_t longest = -1;
  bool group_open = false;
  auto close_group = [&] {
    if (!group_open) return;
    int best = 0;
    for (int k = 1; k < kNumOpKinds; ++k)
      if (op_ns[k] > op_ns[best]) best = k;
    out.back().op = static_cast<OpKind>(best);
    group_open = false;
  };
  for (size_t i = first; i < last; ++i) {
    const Bar& b = lane.bars[i];
    double x0 = std::max(left, axis.to_x(static_cast<double>(b.t0)));
    double x1 = std::min(right, axis.to_x(static_cast<double>(b.t1)));
    if (x1 < left || x0 > right) continue;
    bool thin = x1 - x0 < min_px;
    x1 = std::max(x1, x0 + min_px);
    int64_t dur = b.t1 - b.t0;
    // A thin bar joins the open group while the group stays within two pixels.
    if (thin && group_open && x0 <= out.back().x1 && x1 - out.back().x0 <= 2 * min_px) {
      DrawBar& d = out.back();
      d.x1 = std::max(d.x1, x1);
      ++d.merged;
      op_ns[static_cast<int>(b.op)] += dur;
      if (dur > longest) {
        longest = dur;
        d.span = b.span;
      }
      continue;
    }
    close_group();
    if (thin) {
      // Start a group where the previous bar ends, so merged groups never overlap.
      if (!out.empty()) x0 = std::max(x0, out.back().x1);
      x1 = std::max(x1, x0 + min_px);
      op_ns.fill(0);
      op_ns[static_cast<int>(b.op)] = dur;
      longest = dur;
      group_open = true;
    }
    out.push_back({x0, x1, b.op, b.span, 1});
  }
  close_group();
  return out;
}

int hit_test(const LaneBars& lane, const TimeAxis& axis, double x, double tol_px) {
  double t = axis.to_t(x);
  double tol = tol_px * axis.ns_per_px();
  auto [first, last] = lane.visible(t - tol, t + tol);
  int best = -1;
  int64_t best_dur = 0;
  double best_dist = 0;
  for (size_t i = first; i < last; ++i) {
    const Bar& b = lane.bars[i];
    double a = static_cast<double>(b.t0), z = static_cast<double>(b.t1);
    double dist = t < a ? a - t : (t > z ? t - z : 0.0);
    if (dist > tol) continue;
    int64_t dur = b.t1 - b.t0;
    // Prefer a bar containing t (innermost first), then the nearest one.
    bool better = best < 0 || dist < best_dist || (dist == best_dist && dur < best_dur);
    if (better) {
      best = static_cast<int>(i);
      best_dur = dur;
      best_dist = dist;
    }
  }
  return best;
}

bool GanttRows::row_at(double y, int* rank, Lane* lane) const {
  if (y < y_top || n_ranks <= 0) return false;
  int r = static_cast<int>(std::floor((y - y_top) / rank_h()));
  if (r >= n_ranks) return false;
  double in = y - y_top - r * rank_h();
  if (in >= n_lanes * lane_h) return false;
  *rank = r;
  *lane = static_cast<Lane>(std::min(static_cast<int>(in / lane_h), n_lanes - 1));
  return true;
}

GanttRows fit_rows(double y_top, double height, int n_ranks, double min_lane_h, double max_lane_h,
                   int n_lanes) {
  GanttRows g;
  g.y_top = y_top;
  g.n_ranks = n_ranks;
  g.n_lanes = std::clamp(n_lanes, 2, 3);
  if (n_ranks <= 0) return g;
  double per_rank = height / n_ranks;
  g.rank_gap = std::clamp(per_rank * 0.2, 2.0, 8.0);
  g.lane_h = std::clamp((per_rank - g.rank_gap) / g.n_lanes, min_lane_h, max_lane_h);
  return g;
}

}  // namespace shardlab::viewer
