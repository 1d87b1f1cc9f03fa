// Small drawing helpers shared by the panels (viewer/app/panels/): a panel's fixed window and its
// canvas, colours to ImU32, a time ruler, step lines, a colour legend, the cursor line, and the
// mouse handling (wheel zoom, drag pan) that every time canvas uses.
#pragma once

#include <string>
#include <vector>

#include <imgui.h>

#include "viewer/app/viewer_state.hpp"
#include "viewer/model/colors.hpp"
#include "viewer/model/steps.hpp"

namespace shardlab::viewer {

inline constexpr Rgba kText{220, 220, 220, 255};
inline constexpr Rgba kDim{150, 150, 150, 255};
inline constexpr Rgba kWarn{255, 200, 60, 255};

inline ImU32 col(Rgba c) { return c.packed(); }
inline ImVec2 v2(double x, double y) {
  return ImVec2(static_cast<float>(x), static_cast<float>(y));
}

// A panel's window, fixed at the rectangle the layout computed (no move, resize, scroll, saved
// settings). Pair with ImGui::End() whatever it returns.
bool begin_panel(const char* title, const Rect& r);
// What a per-run panel (memory, timeline, units) draws from: run i's view (where it records its
// canvas), model and time axis, and the panel's rectangle.
struct RunPanel {
  RunView& rv;
  const RunModel& m;
  const TimeAxis& axis;
  const Rect& panel;
};
// begin_panel() for run i's `panel`, titled "<title>: <run name>"; "##<id><i>" keeps two runs of
// the same name apart.
RunPanel begin_run_panel(ViewerState& s, size_t i, const Rect& panel, const char* title,
                         const char* id);
// The canvas below a panel's widgets: an InvisibleButton `id` from the cursor down to the window's
// content edge, across the panel less its padding. Its rectangle is returned.
Rect place_canvas(const char* id, const Rect& panel);

// The time axis pixels of a panel whose window is `panel` (gutter on the left, padding on both).
void axis_pixels(const Rect& panel, double* x0, double* width);

// Tick marks and labels of the axis along [y, y + h), grid lines down to y_grid_end.
void draw_time_ruler(ImDrawList* dl, const TimeAxis& axis, double y, double h, double y_grid_end);
// Vertical lines at step boundaries between y0 and y1, numbered when there is room;
// the selected step is shaded.
void draw_steps(ImDrawList* dl, const TimeAxis& axis, const std::vector<StepInfo>& steps,
                int selected_step, double y0, double y1, bool labels);
// Coloured squares with names, left to right from the cursor; one line.
struct LegendItem {
  Rgba color;
  std::string name;
};
void draw_legend(const std::vector<LegendItem>& items);

// After an InvisibleButton over a time canvas: wheel zooms about the cursor, drag pans,
// double-click shows everything. Updates the shared hover position.
void handle_time_canvas(ViewerState& s, const TimeAxis& axis);

// The vertical line at the cursor's time (s.hover_rel_x), from y0 to y1, when the cursor is over
// any time canvas: it lines up the memory, timeline and unit panels of a run.
void draw_cursor_line(ImDrawList* dl, const ViewerState& s, const TimeAxis& axis, double y0,
                      double y1);

// Centered grey message inside a rectangle (a run with nothing to show yet).
void draw_centered_text(ImDrawList* dl, const Rect& r, const std::string& text, Rgba c);

}  // namespace shardlab::viewer
