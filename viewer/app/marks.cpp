// Numbered callouts over the panels (see marks.hpp).
#include "viewer/app/marks.hpp"

#include <algorithm>
#include <string>

#include <imgui.h>

#include "viewer/app/draw.hpp"
#include "viewer/app/panels/panels.hpp"
#include "viewer/app/view_control.hpp"

namespace shardlab::viewer {

namespace {

constexpr float kRadius = 10;
constexpr float kStem = 12;  // pixels from the disc's edge down to the point

// The point mark `k` names, in window pixels; false when it has no place in this frame.
bool place(const ViewerState& s, const Mark& k, int64_t v_max, double* x, double* y) {
  if (k.run < 0 || k.run >= static_cast<int>(s.runs.size())) return false;
  const RunView& rv = s.runs[k.run];
  const RunModel& m = rv.run->model();
  const TimeAxis& axis = s.time.axis(k.run);
  *x = axis.to_x(static_cast<double>(k.t));
  int n = static_cast<int>(m.ranks.size());
  switch (k.panel) {
    case MarkPanel::memory: {
      if (k.row >= n || s.overlay_ranks) return false;
      const int per = memory_rows_per_rank(s, m);
      ValueAxis va = memory_row_axis(rv.memory_plot, k.row * per, n * per, v_max);
      *y = va.to_y(static_cast<double>(m.ranks[k.row].mem.at(k.t).total));
      return rv.memory_plot.contains(*x, *y);
    }
    case MarkPanel::compute:
    case MarkPanel::comm: {
      if (k.row >= n) return false;
      GanttRows rows = timeline_rows(rv.timeline_plot, n, m.has_copies);
      Lane lane = k.panel == MarkPanel::compute ? Lane::compute : Lane::comm;
      *y = rows.lane_y(k.row, lane);  // the lane's top edge: the stem ends on the bar
      return rv.timeline_plot.contains(*x, *y);
    }
    case MarkPanel::units: {
      if (n == 0) return false;
      const UnitStrips& strips = m.ranks[std::clamp(rv.units_rank, 0, n - 1)].units;
      if (k.row >= strips.n_units()) return false;
      double row_h = unit_row_height(rv.units_plot, strips.n_units());
      *y = rv.units_plot.y + (k.row + 0.5) * row_h;  // the strip's middle
      return rv.units_plot.contains(*x, *y);
    }
  }
  return false;
}

// A white disc with a black rim and the mark's number.
void draw_disc(ImDrawList* dl, const Mark& k, ImVec2 center) {
  dl->AddCircleFilled(center, kRadius + 1.5f, IM_COL32(0, 0, 0, 255), 24);
  dl->AddCircleFilled(center, kRadius, IM_COL32(255, 255, 255, 255), 24);
  std::string label = std::to_string(k.number);
  ImVec2 size = ImGui::CalcTextSize(label.c_str());
  dl->AddText(v2(center.x - size.x / 2, center.y - size.y / 2), IM_COL32(0, 0, 0, 255),
              label.c_str());
}

// Above the point, with a stem down to it; in the units panel, whose strips are thinner than the
// disc, to the right of it so the disc does not hide the strip above.
void draw_one(ImDrawList* dl, const Mark& k, double x, double y) {
  ImVec2 tip = v2(x, y);
  if (k.panel == MarkPanel::units) {
    ImVec2 center = v2(x + kStem + kRadius, y);
    dl->AddLine(tip, v2(center.x - kRadius, y), IM_COL32(255, 255, 255, 255), 2.0f);
    draw_disc(dl, k, center);
    return;
  }
  ImVec2 center = v2(x, y - kStem - kRadius);
  if (center.y < kRadius + 1) center.y = kRadius + 1;  // a point at the very top
  dl->AddLine(v2(x, center.y + kRadius), tip, IM_COL32(255, 255, 255, 255), 2.0f);
  draw_disc(dl, k, center);
}

}  // namespace

void draw_marks(ViewerState& s) {
  s.placed_marks.clear();
  if (s.marks.empty()) return;
  const int64_t v_max = shared_memory_scale(s);
  ImDrawList* dl = ImGui::GetForegroundDrawList();
  for (const Mark& k : s.marks) {
    PlacedMark p{k};
    p.shown = place(s, k, v_max, &p.x, &p.y);
    if (p.shown) draw_one(dl, k, p.x, p.y);
    s.placed_marks.push_back(p);
  }
}

}  // namespace shardlab::viewer
