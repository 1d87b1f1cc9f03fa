// The timeline panel of each run: per rank a compute lane and a comm lane of op bars
// (viewer/model/gantt), and a copy lane (h2d, d2h) when the run copies between memory tiers
// (--offload); exposed communication underlined in red, the time ruler and step lines.
// Hover: the bar's span details.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <imgui.h>

#include "viewer/app/draw.hpp"
#include "viewer/app/panels/panels.hpp"
#include "viewer/app/tooltips.hpp"
#include "viewer/model/colors.hpp"

namespace shardlab::viewer {

namespace {
constexpr double kRulerH = 30;  // the time ruler's labels and ticks above the lanes
}  // namespace

GanttRows timeline_rows(const Rect& canvas, int n_ranks, bool copy_lane) {
  return fit_rows(canvas.y + kRulerH + 2, canvas.h - kRulerH - 2, n_ranks, 6, 22,
                  copy_lane ? 3 : 2);
}

void show_timeline_panel(ViewerState& s) {
  for (size_t i = 0; i < s.runs.size(); ++i) {
    auto [rv, m, axis, panel] =
        begin_run_panel(s, i, s.layout.runs[i].timeline, "Timeline", "timeline");
    std::vector<LegendItem> legend;
    for (int k = 0; k < kNumOpKinds; ++k) {
      const OpKind op = static_cast<OpKind>(k);
      if ((op == OpKind::h2d || op == OpKind::d2h) && !m.has_copies) continue;
      legend.push_back({op_color(op), op_kind_name(op)});
    }
    legend.push_back({kExposedColor, "exposed comm"});
    draw_legend(legend);
    Rect c = place_canvas("timeline_canvas", panel);
    handle_time_canvas(s, axis);
    bool hovered = ImGui::IsItemHovered();
    ImDrawList* dl = ImGui::GetWindowDrawList();
    rv.timeline_plot = {axis.x0(), c.y, axis.width(), c.h};
    int n = static_cast<int>(m.ranks.size());
    if (n == 0 || m.t_last == 0) {
      draw_centered_text(dl, c, rv.run->status().empty() ? "no events yet" : rv.run->status(),
                         kWarn);
      ImGui::End();
      continue;
    }
    GanttRows rows = timeline_rows(c, n, m.has_copies);
    std::vector<Lane> lanes{Lane::compute, Lane::comm};
    if (m.has_copies) lanes.push_back(Lane::copy);
    rv.copy_lanes.clear();
    dl->PushClipRect(v2(c.x, c.y), v2(c.x + c.w, c.y + c.h), true);
    for (int r = 0; r < n; ++r) {
      if (m.has_copies)
        rv.copy_lanes.push_back(
            {axis.x0(), rows.lane_y(r, Lane::copy), axis.width(), rows.lane_h - 1});
      for (Lane lane : lanes) {
        double y = rows.lane_y(r, lane);
        char label[32];
        std::snprintf(label, sizeof label, "r%d %s", r, lane_name(lane));
        if (rows.lane_h >= 11) dl->AddText(v2(c.x, y + (rows.lane_h - 13) / 2), col(kDim), label);
        dl->AddRectFilled(v2(axis.x0(), y), v2(axis.x0() + axis.width(), y + rows.lane_h - 1),
                          IM_COL32(255, 255, 255, 8));
      }
    }
    dl->PushClipRect(v2(axis.x0(), c.y), v2(axis.x0() + axis.width(), c.y + c.h), true);
    draw_time_ruler(dl, axis, c.y, 16, c.y + c.h);
    draw_steps(dl, axis, m.steps, s.selected_step, c.y + 16, c.y + c.h, true);
    ImGuiIO& io = ImGui::GetIO();
    int hover_rank = -1, hover_bar = -1;
    Lane hover_lane = Lane::compute;
    if (hovered && io.MousePos.x >= axis.x0() &&
        rows.row_at(io.MousePos.y, &hover_rank, &hover_lane))
      hover_bar = hit_test(m.ranks[hover_rank].bars.lane(hover_lane), axis, io.MousePos.x);
    for (int r = 0; r < n; ++r) {
      for (Lane lane : lanes) {
        double y = rows.lane_y(r, lane);
        const LaneBars& lb = m.ranks[r].bars.lane(lane);
        for (const DrawBar& b : layout_lane(lb, axis))
          dl->AddRectFilled(v2(b.x0, y + 1), v2(b.x1, y + rows.lane_h - 2), col(op_color(b.op)));
        if (r == hover_rank && lane == hover_lane && hover_bar >= 0) {
          const Bar& hb = lb.bars[hover_bar];
          dl->AddRect(v2(axis.to_x(double(hb.t0)) - 1, y),
                      v2(std::max(axis.to_x(double(hb.t1)), axis.to_x(double(hb.t0)) + 1) + 1,
                         y + rows.lane_h - 1),
                      IM_COL32(255, 255, 255, 255));
        }
      }
      // Exposed communication: a red underline below the comm lane.
      double y = rows.lane_y(r, Lane::comm) + rows.lane_h - 3;
      double last_x1 = -1e9;
      for (const Interval& iv :
           clip(m.ranks[r].exposed.exposed, static_cast<int64_t>(axis.t_begin()),
                static_cast<int64_t>(axis.t_end()) + 1)) {
        double x0 = axis.to_x(double(iv.begin)), x1 = std::max(axis.to_x(double(iv.end)), x0 + 1);
        if (x1 <= last_x1) continue;
        dl->AddRectFilled(v2(std::max(x0, last_x1), y), v2(x1, y + 3), col(kExposedColor));
        last_x1 = x1;
      }
    }
    draw_cursor_line(dl, s, axis, c.y + 16, c.y + c.h);
    dl->PopClipRect();
    dl->PopClipRect();
    if (hover_bar >= 0)
      span_tooltip(m, rv.run->data(), hover_rank,
                   m.ranks[hover_rank].bars.lane(hover_lane).bars[hover_bar]);
    ImGui::End();
  }
}

}  // namespace shardlab::viewer
