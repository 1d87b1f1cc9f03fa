// The FSDP unit states panel of each run: for the rank in its `rank` box, one strip per unit
// coloured by state over time (viewer/model/unit_strips). Hover: the state and how long it lasted.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <imgui.h>

#include "viewer/app/draw.hpp"
#include "viewer/app/panels/panels.hpp"
#include "viewer/model/colors.hpp"

namespace shardlab::viewer {

double unit_row_height(const Rect& canvas, int n_units) {
  return std::clamp(canvas.h / std::max(n_units, 1), 2.0, 18.0);
}

void show_units_panel(ViewerState& s) {
  std::vector<LegendItem> legend;
  for (UnitState st :
       {UnitState::sharded, UnitState::gathering, UnitState::unsharded, UnitState::resharded})
    legend.push_back({unit_state_color(st), unit_state_name(st)});
  for (size_t i = 0; i < s.runs.size(); ++i) {
    auto [rv, m, axis, panel] =
        begin_run_panel(s, i, s.layout.runs[i].units, "FSDP unit states", "units");
    int n = static_cast<int>(m.ranks.size());
    rv.units_rank = std::clamp(rv.units_rank, 0, std::max(0, n - 1));
    ImGui::SetNextItemWidth(80);
    ImGui::InputInt("rank", &rv.units_rank, 1, 1);
    rv.units_rank = std::clamp(rv.units_rank, 0, std::max(0, n - 1));
    ImGui::SameLine(0, 16);
    draw_legend(legend);
    Rect c = place_canvas("units_canvas", panel);
    handle_time_canvas(s, axis);
    bool hovered = ImGui::IsItemHovered();
    ImDrawList* dl = ImGui::GetWindowDrawList();
    rv.units_plot = {axis.x0(), c.y, axis.width(), c.h};
    const UnitStrips* strips = n > 0 ? &m.ranks[rv.units_rank].units : nullptr;
    if (!strips || strips->n_units() == 0) {
      draw_centered_text(
          dl, c,
          n == 0 ? "no events yet" : "no unit state events (no_shard keeps every unit whole)",
          kDim);
      ImGui::End();
      continue;
    }
    int nu = strips->n_units();
    double row_h = unit_row_height(c, nu);
    dl->PushClipRect(v2(c.x, c.y), v2(c.x + c.w, c.y + c.h), true);
    ImGuiIO& io = ImGui::GetIO();
    int hover_unit = hovered ? static_cast<int>((io.MousePos.y - c.y) / row_h) : -1;
    for (int u = 0; u < nu; ++u) {
      double y = c.y + u * row_h;
      if (row_h >= 11) {
        // "unit 3: block 2" where the gutter has room, else what the unit holds, else its number
        // (the tooltip always says both).
        std::string label = unit_label(m.info, u);
        if (ImGui::CalcTextSize(label.c_str()).x > kGutter - 4 &&
            u < static_cast<int>(m.info.unit_names.size()))
          label = m.info.unit_names[static_cast<size_t>(u)];
        if (label.empty() || ImGui::CalcTextSize(label.c_str()).x > kGutter - 4)
          label = "unit " + std::to_string(u);
        dl->AddText(v2(c.x, y + (row_h - 13) / 2), col(kDim), label.c_str());
      }
      const auto& segs = strips->by_unit[u];
      auto it = std::lower_bound(segs.begin(), segs.end(), axis.t_begin(),
                                 [](const UnitSegment& g, double t) { return double(g.t1) < t; });
      double last_x1 = -1e9;
      for (; it != segs.end() && double(it->t0) < axis.t_end(); ++it) {
        double x0 = std::max(axis.to_x(double(it->t0)), axis.x0() - 1);
        double x1 = std::min(axis.to_x(double(it->t1)), axis.x0() + axis.width() + 1);
        x1 = std::max(x1, x0 + 1);
        if (x1 <= last_x1) continue;  // sub-pixel segments: the first one in a pixel shows
        dl->AddRectFilled(v2(std::max(x0, last_x1), y + 1), v2(x1, y + row_h - 1),
                          col(unit_state_color(it->state)));
        last_x1 = x1;
      }
    }
    draw_cursor_line(dl, s, axis, c.y, c.y + c.h);
    dl->PopClipRect();
    if (hover_unit >= 0 && hover_unit < nu && io.MousePos.x >= axis.x0()) {
      int64_t t = static_cast<int64_t>(axis.to_t(io.MousePos.x));
      const auto& segs = strips->by_unit[hover_unit];
      auto it = std::upper_bound(segs.begin(), segs.end(), t,
                                 [](int64_t v, const UnitSegment& g) { return v < g.t0; });
      if (it != segs.begin()) {
        const UnitSegment& g = *(it - 1);
        ImGui::SetTooltip("rank %d %s: %s\nfrom %s for %s", rv.units_rank,
                          unit_label(m.info, hover_unit).c_str(), unit_state_name(g.state),
                          format_duration(double(g.t0)).c_str(),
                          format_duration(double(g.t1 - g.t0)).c_str());
      }
    }
    ImGui::End();
  }
}

}  // namespace shardlab::viewer
