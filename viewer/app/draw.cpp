// Drawing helpers for the panels (see draw.hpp).
#include "viewer/app/draw.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "viewer/app/view_control.hpp"

namespace shardlab::viewer {

namespace {
constexpr ImGuiWindowFlags kPanelFlags =
    ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoCollapse |
    ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoBringToFrontOnFocus |
    ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoScrollWithMouse |
    ImGuiWindowFlags_NoFocusOnAppearing;
}  // namespace

bool begin_panel(const char* title, const Rect& r) {
  ImGui::SetNextWindowPos(v2(r.x, r.y), ImGuiCond_Always);
  ImGui::SetNextWindowSize(v2(r.w, r.h), ImGuiCond_Always);
  return ImGui::Begin(title, nullptr, kPanelFlags);
}

RunPanel begin_run_panel(ViewerState& s, size_t i, const Rect& panel, const char* title,
                         const char* id) {
  RunView& rv = s.runs[i];
  const RunModel& m = rv.run->model();
  std::string name = std::string(title) + ": " + m.info.name + "##" + id + std::to_string(i);
  begin_panel(name.c_str(), panel);
  return {rv, m, s.time.axis(static_cast<int>(i)), panel};
}

Rect place_canvas(const char* id, const Rect& panel) {
  ImVec2 p = ImGui::GetCursorScreenPos();
  ImVec2 avail = ImGui::GetContentRegionAvail();
  Rect c{panel.x + kPad, p.y, panel.w - 2 * kPad, std::max(8.0f, avail.y)};
  ImGui::SetCursorScreenPos(v2(c.x, c.y));
  ImGui::InvisibleButton(id, v2(c.w, c.h));
  return c;
}

void axis_pixels(const Rect& panel, double* x0, double* width) {
  *x0 = panel.x + kPad + kGutter;
  *width = std::max(1.0, panel.w - 2 * kPad - kGutter);
}

void draw_time_ruler(ImDrawList* dl, const TimeAxis& axis, double y, double h, double y_grid_end) {
  const ImU32 text = IM_COL32(200, 200, 200, 255), tick = IM_COL32(120, 120, 120, 255),
              grid = IM_COL32(255, 255, 255, 18);
  double x1 = axis.x0() + axis.width();
  dl->AddLine(v2(axis.x0(), y + h - 1), v2(x1, y + h - 1), tick);
  for (double t : nice_ticks(axis.t_begin(), axis.t_end(), 1.0 / axis.ns_per_px(), 90)) {
    double x = std::round(axis.to_x(t));
    dl->AddLine(v2(x, y + h - 5), v2(x, y + h - 1), tick);
    dl->AddLine(v2(x, y + h), v2(x, y_grid_end), grid);
    std::string label = format_duration(t);
    dl->AddText(v2(x + 3, y), text, label.c_str());
  }
}

void draw_steps(ImDrawList* dl, const TimeAxis& axis, const std::vector<StepInfo>& steps,
                int selected_step, double y0, double y1, bool labels) {
  const ImU32 line = IM_COL32(255, 255, 255, 60), label = IM_COL32(170, 170, 170, 255);
  double last_label_x = -1e9;
  for (const StepInfo& st : steps) {
    double xa = axis.to_x(static_cast<double>(st.t_begin)),
           xb = axis.to_x(static_cast<double>(st.t_end));
    if (xb <= axis.x0() || xa > axis.x0() + axis.width()) continue;
    if (st.step == selected_step)
      dl->AddRectFilled(v2(xa, y0), v2(xb, y1), IM_COL32(255, 255, 255, 22));
    dl->AddLine(v2(std::round(xb), y0), v2(std::round(xb), y1), line);
    double lx = std::max(xa, axis.x0()) + 2;
    if (labels && lx - last_label_x > 40) {
      char buf[24];
      std::snprintf(buf, sizeof buf, "s%d", st.step);
      dl->AddText(v2(lx, y0), label, buf);
      last_label_x = lx;
    }
  }
}

void draw_legend(const std::vector<LegendItem>& items) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  float h = ImGui::GetTextLineHeight();
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) ImGui::SameLine(0, 12);
    ImVec2 p = ImGui::GetCursorScreenPos();
    dl->AddRectFilled(ImVec2(p.x, p.y + 2), ImVec2(p.x + h - 4, p.y + h - 2), col(items[i].color));
    ImGui::Dummy(ImVec2(h - 2, h));
    ImGui::SameLine(0, 3);
    ImGui::TextUnformatted(items[i].name.c_str());
  }
}

void handle_time_canvas(ViewerState& s, const TimeAxis& axis) {
  ImGuiIO& io = ImGui::GetIO();
  if (ImGui::IsItemHovered()) {
    s.hover_rel_x = io.MousePos.x - axis.x0();
    if (io.MouseWheel != 0) {
      s.time.zoom(s.hover_rel_x, std::pow(1.25, io.MouseWheel));
      s.follow = false;
    }
    if (ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)) {
      show_all(s);
      s.follow = false;
    }
  }
  if (ImGui::IsItemActive() && ImGui::IsMouseDragging(ImGuiMouseButton_Left, 0.0f) &&
      io.MouseDelta.x != 0) {
    s.time.pan(io.MouseDelta.x);
    s.follow = false;
  }
}

void draw_cursor_line(ImDrawList* dl, const ViewerState& s, const TimeAxis& axis, double y0,
                      double y1) {
  if (std::isnan(s.hover_rel_x)) return;
  double x = axis.x0() + s.hover_rel_x;
  dl->AddLine(v2(x, y0), v2(x, y1), IM_COL32(255, 255, 255, 90));
}

void draw_centered_text(ImDrawList* dl, const Rect& r, const std::string& text, Rgba c) {
  ImVec2 sz = ImGui::CalcTextSize(text.c_str());
  dl->AddText(v2(r.x + (r.w - sz.x) / 2, r.y + (r.h - sz.y) / 2), col(c), text.c_str());
}

}  // namespace shardlab::viewer
