// shardlab-viewer: opens one or more run directories and shows per-rank memory by category, the
// compute and communication timeline, FSDP unit states and a summary; follows runs live while
// training writes them. Structure of Dear ImGui's GLFW + OpenGL3 example: init, loop (poll, new
// frame, panels, render, swap), shutdown in reverse. One static show_xxx_panel() per panel; the
// aggregation and layout math is in viewer/model/ (shardlab_viewer_core), tested without a window.
#include <algorithm>
#include <chrono>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <GLFW/glfw3.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>

#include "viewer/app/draw.hpp"
#include "viewer/app/screenshot.hpp"
#include "viewer/app/tooltips.hpp"
#include "viewer/app/view_control.hpp"
#include "viewer/app/viewer_state.hpp"
#include "viewer/model/colors.hpp"
#include "viewer/model/run_model.hpp"

namespace shardlab::viewer {
namespace {

constexpr Rgba kText{220, 220, 220, 255};
constexpr Rgba kDim{150, 150, 150, 255};
constexpr Rgba kWarn{255, 200, 60, 255};
constexpr ImGuiWindowFlags kPanelFlags =
    ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoCollapse |
    ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoBringToFrontOnFocus |
    ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoScrollWithMouse |
    ImGuiWindowFlags_NoFocusOnAppearing;

struct Options {
  std::vector<std::string> runs;
  std::string screenshot;
  std::string report;  // JSON of panel rectangles; default: the screenshot's name with .json
  int frames = 0;
  int at_step = -1;
  int until_steps = 0;
  double timeout_s = 20;
  int width = 1600, height = 1000;
  bool overlay = false;
  std::vector<float> mouse;  // with --frames: where the mouse is (x, y), for hover screenshots
};

bool begin_panel(const char* title, const Rect& r) {
  ImGui::SetNextWindowPos(v2(r.x, r.y), ImGuiCond_Always);
  ImGui::SetNextWindowSize(v2(r.w, r.h), ImGuiCond_Always);
  return ImGui::Begin(title, nullptr, kPanelFlags);
}

Rect place_canvas(const char* id, const Rect& panel) {
  ImVec2 p = ImGui::GetCursorScreenPos();
  ImVec2 avail = ImGui::GetContentRegionAvail();
  Rect c{panel.x + kPad, p.y, panel.w - 2 * kPad, std::max(8.0f, avail.y)};
  ImGui::SetCursorScreenPos(v2(c.x, c.y));
  ImGui::InvisibleButton(id, v2(c.w, c.h));
  return c;
}

// ---- panels ------------------------------------------------------------------------------------

static void show_toolbar_panel(ViewerState& s) {
  begin_panel("shardlab-viewer", s.layout.toolbar);
  for (size_t i = 0; i < s.runs.size(); ++i) {
    const LiveRun& run = *s.runs[i].run;
    const RunModel& m = run.model();
    if (i > 0) ImGui::SameLine(0, 24);
    ImGui::Text("%s [%s] %s n=%d, %zu steps, %lld events", m.info.name.c_str(),
                run_state(run).c_str(), m.info.strategy.empty() ? "" : m.info.strategy.c_str(),
                m.info.world, m.steps.size(), static_cast<long long>(m.n_events));
    if (!run.status().empty()) {
      ImGui::SameLine();
      ImGui::TextColored(ImVec4(1.0f, 0.78f, 0.24f, 1.0f), "%s", run.status().c_str());
    }
  }
  if (!s.message.empty()) {
    ImGui::SameLine(0, 24);
    ImGui::TextColored(ImVec4(1.0f, 0.78f, 0.24f, 1.0f), "%s", s.message.c_str());
  }

  ImGui::Checkbox("follow", &s.follow);
  ImGui::SameLine();
  if (ImGui::Button("all")) {
    s.follow = false;
    s.selected_step = -1;
    show_all(s);
  }
  // Step selector over the steps any run has. Step numbers come from files (any int): SliderInt
  // asserts, aborting the viewer, once a bound passes 2^30, so the slider is over int64, whose
  // limits (2^62) no int reaches, and cur +- 1 cannot overflow.
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (const RunView& r : s.runs) {
    const auto& steps = r.run->model().steps;
    if (steps.empty()) continue;
    lo = std::min<int64_t>(lo, steps.front().step);
    hi = std::max<int64_t>(hi, steps.back().step);
  }
  if (lo <= hi) {
    int64_t cur = std::clamp<int64_t>(s.selected_step >= 0 ? s.selected_step : hi, lo, hi);
    ImGui::SameLine(0, 16);
    if (ImGui::ArrowButton("##prev", ImGuiDir_Left))
      select_step(s, static_cast<int>(std::max(lo, cur - 1)));
    ImGui::SameLine();
    ImGui::SetNextItemWidth(220);
    if (ImGui::SliderScalar("step", ImGuiDataType_S64, &cur, &lo, &hi, "%lld"))
      select_step(s, static_cast<int>(std::clamp(cur, lo, hi)));
    ImGui::SameLine();
    if (ImGui::ArrowButton("##next", ImGuiDir_Right))
      select_step(s, static_cast<int>(std::min(hi, cur + 1)));
  }
  // Scrubber: where the view starts in the first run, at the current zoom.
  if (!s.runs.empty()) {
    double t_last = static_cast<double>(s.runs[0].run->model().t_last);
    float start_ms = static_cast<float>(s.time.axis(0).t_begin() * 1e-6);
    ImGui::SameLine(0, 16);
    ImGui::SetNextItemWidth(320);
    // ImGui asserts on a float bound beyond FLT_MAX / 2: keep the range well inside it.
    const float end_ms = static_cast<float>(std::clamp(t_last * 1e-6, 1.0, 1e30));
    start_ms = std::clamp(start_ms, 0.0f, end_ms);
    if (ImGui::SliderFloat("view start (ms)", &start_ms, 0.0f, end_ms, "%.1f")) {
      double dx = (s.time.axis(0).t_begin() - start_ms * 1e6) / s.time.ns_per_px();
      s.time.pan(dx);
      s.follow = false;
    }
  }
  ImGui::SameLine(0, 16);
  ImGui::Checkbox("overlay ranks", &s.overlay_ranks);
  ImGui::SameLine(0, 16);
  ImGui::TextColored(ImVec4(0.6f, 0.6f, 0.6f, 1.0f), "%s/px   wheel: zoom, drag: pan, double-click: all",
                     format_duration(s.time.ns_per_px()).c_str());
  ImGui::End();
}

static void show_memory_panel(ViewerState& s) {
  const int64_t v_max = shared_memory_scale(s);
  std::vector<LegendItem> legend;
  for (MemCategory c : kStackOrder) legend.push_back({category_color(c), mem_category_name(c)});
  for (size_t i = 0; i < s.runs.size(); ++i) {
    RunView& rv = s.runs[i];
    const RunModel& m = rv.run->model();
    const TimeAxis& axis = s.time.axis(static_cast<int>(i));
    const Rect& panel = s.layout.runs[i].memory;
    std::string title = "Memory by category: " + m.info.name + "##memory" + std::to_string(i);
    begin_panel(title.c_str(), panel);
    if (s.overlay_ranks) {
      std::vector<LegendItem> ranks;
      for (size_t r = 0; r < m.ranks.size(); ++r)
        ranks.push_back({rank_color(static_cast<int>(r)), "rank " + std::to_string(r) + " total"});
      draw_legend(ranks);
    } else {
      draw_legend(legend);
    }
    Rect c = place_canvas("memory_canvas", panel);
    handle_time_canvas(s, axis);
    rv.memory_plot = {axis.x0(), c.y, axis.width(), c.h};
    ImDrawList* dl = ImGui::GetWindowDrawList();
    int n = static_cast<int>(m.ranks.size());
    if (n == 0 || m.t_last == 0) {
      draw_centered_text(dl, c, rv.run->status().empty() ? "no events yet" : rv.run->status(), kWarn);
      ImGui::End();
      continue;
    }
    ImGuiIO& io = ImGui::GetIO();
    bool hovered = ImGui::IsItemHovered();
    dl->PushClipRect(v2(c.x, c.y), v2(c.x + c.w, c.y + c.h), true);
    int rows = s.overlay_ranks ? 1 : n;
    double row_h = c.h / rows;
    double y_cursor_row = hovered ? std::floor((io.MousePos.y - c.y) / row_h) : -1;
    for (int row = 0; row < rows; ++row) {
      double top = c.y + row * row_h;
      ValueAxis va{static_cast<double>(v_max), top + row_h - 3, row_h - 6};
      dl->AddRectFilled(v2(axis.x0(), va.to_y(v_max)), v2(axis.x0() + axis.width(), va.y_bottom),
                        IM_COL32(255, 255, 255, 10));
      std::string label = s.overlay_ranks ? "all ranks" : "rank " + std::to_string(row);
      dl->AddText(v2(c.x, top + 2), col(kText), label.c_str());
      if (!s.overlay_ranks && row_h >= 34) {
        std::string peak = "peak " + format_bytes_short(m.ranks[row].mem.peak_total);
        dl->AddText(v2(c.x, top + 16), col(kDim), peak.c_str());
      }
      std::string scale = format_bytes_short(v_max);
      dl->AddText(v2(axis.x0() + axis.width() - ImGui::CalcTextSize(scale.c_str()).x - 2,
                     va.to_y(v_max)), col(kDim), scale.c_str());
      dl->PushClipRect(v2(axis.x0(), top), v2(axis.x0() + axis.width(), top + row_h), true);
      draw_steps(dl, axis, m.steps, s.selected_step, va.to_y(v_max), va.y_bottom, false);
      for (int r = 0; r < n; ++r) {
        if (!s.overlay_ranks && r != row) continue;
        const MemorySeries& ms = m.ranks[r].mem;
        auto cols = memory_columns(ms, axis, m.ranks[r].t_last);
        if (!s.overlay_ranks) {
          for (const BandRect& b : memory_bands(cols, va))
            dl->AddRectFilled(v2(b.x0, b.y_top), v2(b.x1, b.y_bottom), col(category_color(b.category)));
        } else {
          ImU32 rc = col(rank_color(r));
          for (size_t j = 0; j < cols.size(); ++j) {
            double y = va.to_y(double(cols[j].total));
            dl->AddLine(v2(cols[j].x0, y), v2(cols[j].x1, y), rc, 1.5f);
            if (j + 1 < cols.size())
              dl->AddLine(v2(cols[j].x1, y), v2(cols[j].x1, va.to_y(double(cols[j + 1].total))), rc, 1.5f);
          }
        }
        // Peak marker: a white tick and triangle above the highest point.
        double px = axis.to_x(double(ms.t_peak)), py = va.to_y(double(ms.peak_total));
        dl->AddLine(v2(px, py), v2(px, va.y_bottom), col(kPeakColor.with_alpha(140)));
        dl->AddTriangleFilled(v2(px - 4, py - 7), v2(px + 4, py - 7), v2(px, py - 1), col(kPeakColor));
      }
      if (m.info.mem_limit > 0) {
        double y = va.to_y(double(m.info.mem_limit));
        dl->AddLine(v2(axis.x0(), y), v2(axis.x0() + axis.width(), y), col(kCapacityColor), 1.5f);
        dl->AddText(v2(axis.x0() + 4, y - 14), col(kCapacityColor), "capacity");
      }
      dl->PopClipRect();
    }
    if (!std::isnan(s.hover_rel_x)) {
      double x = axis.x0() + s.hover_rel_x;
      dl->AddLine(v2(x, c.y), v2(x, c.y + c.h), IM_COL32(255, 255, 255, 90));
    }
    dl->PopClipRect();
    if (hovered && io.MousePos.x >= axis.x0()) {
      int rank = s.overlay_ranks ? 0 : std::clamp(static_cast<int>(y_cursor_row), 0, n - 1);
      if (s.overlay_ranks) {
        // Overlaid: the rank whose total is closest to the cursor.
        int64_t t = static_cast<int64_t>(axis.to_t(io.MousePos.x));
        ValueAxis va{static_cast<double>(v_max), c.y + c.h - 3, c.h - 6};
        double best = 1e300;
        for (int r = 0; r < n; ++r) {
          double d = std::abs(va.to_y(double(m.ranks[r].mem.at(t).total)) - io.MousePos.y);
          if (d < best) best = d, rank = r;
        }
      }
      memory_tooltip(m, rank, static_cast<int64_t>(axis.to_t(io.MousePos.x)));
    }
    ImGui::End();
  }
}

static void show_timeline_panel(ViewerState& s) {
  std::vector<LegendItem> legend;
  for (int k = 0; k < kNumOpKinds; ++k)
    legend.push_back({op_color(static_cast<OpKind>(k)), op_kind_name(static_cast<OpKind>(k))});
  legend.push_back({kExposedColor, "exposed comm"});
  for (size_t i = 0; i < s.runs.size(); ++i) {
    RunView& rv = s.runs[i];
    const RunModel& m = rv.run->model();
    const TimeAxis& axis = s.time.axis(static_cast<int>(i));
    const Rect& panel = s.layout.runs[i].timeline;
    std::string title = "Timeline: " + m.info.name + "##timeline" + std::to_string(i);
    begin_panel(title.c_str(), panel);
    draw_legend(legend);
    Rect c = place_canvas("timeline_canvas", panel);
    handle_time_canvas(s, axis);
    bool hovered = ImGui::IsItemHovered();
    ImDrawList* dl = ImGui::GetWindowDrawList();
    rv.timeline_plot = {axis.x0(), c.y, axis.width(), c.h};
    int n = static_cast<int>(m.ranks.size());
    if (n == 0 || m.t_last == 0) {
      draw_centered_text(dl, c, rv.run->status().empty() ? "no events yet" : rv.run->status(), kWarn);
      ImGui::End();
      continue;
    }
    const double ruler_h = 30;
    GanttRows rows = fit_rows(c.y + ruler_h + 2, c.h - ruler_h - 2, n);
    dl->PushClipRect(v2(c.x, c.y), v2(c.x + c.w, c.y + c.h), true);
    for (int r = 0; r < n; ++r) {
      for (Lane lane : {Lane::compute, Lane::comm}) {
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
    if (hovered && io.MousePos.x >= axis.x0() && rows.row_at(io.MousePos.y, &hover_rank, &hover_lane))
      hover_bar = hit_test(m.ranks[hover_rank].bars.lane(hover_lane), axis, io.MousePos.x);
    for (int r = 0; r < n; ++r) {
      for (Lane lane : {Lane::compute, Lane::comm}) {
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
      for (const Interval& iv : clip(m.ranks[r].exposed.exposed, static_cast<int64_t>(axis.t_begin()),
                                     static_cast<int64_t>(axis.t_end()) + 1)) {
        double x0 = axis.to_x(double(iv.begin)), x1 = std::max(axis.to_x(double(iv.end)), x0 + 1);
        if (x1 <= last_x1) continue;
        dl->AddRectFilled(v2(std::max(x0, last_x1), y), v2(x1, y + 3), col(kExposedColor));
        last_x1 = x1;
      }
    }
    if (!std::isnan(s.hover_rel_x)) {
      double x = axis.x0() + s.hover_rel_x;
      dl->AddLine(v2(x, c.y + 16), v2(x, c.y + c.h), IM_COL32(255, 255, 255, 90));
    }
    dl->PopClipRect();
    dl->PopClipRect();
    if (hover_bar >= 0)
      span_tooltip(m, rv.run->data(), hover_rank, m.ranks[hover_rank].bars.lane(hover_lane).bars[hover_bar]);
    ImGui::End();
  }
}

static void show_units_panel(ViewerState& s) {
  std::vector<LegendItem> legend;
  for (UnitState st : {UnitState::sharded, UnitState::gathering, UnitState::unsharded,
                       UnitState::resharded})
    legend.push_back({unit_state_color(st), unit_state_name(st)});
  for (size_t i = 0; i < s.runs.size(); ++i) {
    RunView& rv = s.runs[i];
    const RunModel& m = rv.run->model();
    const TimeAxis& axis = s.time.axis(static_cast<int>(i));
    const Rect& panel = s.layout.runs[i].units;
    std::string title = "FSDP unit states: " + m.info.name + "##units" + std::to_string(i);
    begin_panel(title.c_str(), panel);
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
      draw_centered_text(dl, c,
                         n == 0 ? "no events yet"
                                : "no unit state events (no_shard keeps every unit whole)",
                         kDim);
      ImGui::End();
      continue;
    }
    int nu = strips->n_units();
    double row_h = std::clamp(c.h / nu, 2.0, 18.0);
    dl->PushClipRect(v2(c.x, c.y), v2(c.x + c.w, c.y + c.h), true);
    ImGuiIO& io = ImGui::GetIO();
    int hover_unit = hovered ? static_cast<int>((io.MousePos.y - c.y) / row_h) : -1;
    for (int u = 0; u < nu; ++u) {
      double y = c.y + u * row_h;
      if (row_h >= 11) {
        char label[24];
        std::snprintf(label, sizeof label, "unit %d", u);
        dl->AddText(v2(c.x, y + (row_h - 13) / 2), col(kDim), label);
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
    if (!std::isnan(s.hover_rel_x)) {
      double x = axis.x0() + s.hover_rel_x;
      dl->AddLine(v2(x, c.y), v2(x, c.y + c.h), IM_COL32(255, 255, 255, 90));
    }
    dl->PopClipRect();
    if (hover_unit >= 0 && hover_unit < nu && io.MousePos.x >= axis.x0()) {
      int64_t t = static_cast<int64_t>(axis.to_t(io.MousePos.x));
      const auto& segs = strips->by_unit[hover_unit];
      auto it = std::upper_bound(segs.begin(), segs.end(), t,
                                 [](int64_t v, const UnitSegment& g) { return v < g.t0; });
      if (it != segs.begin()) {
        const UnitSegment& g = *(it - 1);
        ImGui::SetTooltip("rank %d unit %d: %s\nfrom %s for %s", rv.units_rank, hover_unit,
                          unit_state_name(g.state), format_duration(double(g.t0)).c_str(),
                          format_duration(double(g.t1 - g.t0)).c_str());
      }
    }
    ImGui::End();
  }
}

// `steps` is a double: steps times ranks passes 2^31 on a long run read with many ranks.
std::string per_step(double total, double steps, bool bytes) {
  double v = steps > 0 ? total / steps : total;
  return bytes ? format_bytes(static_cast<int64_t>(v)) : format_duration(v);
}

static void show_summary_panel(ViewerState& s) {
  const Rect& panel = s.layout.summary;
  begin_panel("Summary", panel);
  ImVec2 avail = ImGui::GetContentRegionAvail();
  float table_w = std::min(avail.x * 0.58f, 260.0f + 300.0f * s.runs.size());
  const ImGuiTableFlags flags = ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg |
                                ImGuiTableFlags_ScrollY | ImGuiTableFlags_SizingStretchProp;
  int n_runs = static_cast<int>(s.runs.size());
  if (ImGui::BeginTable("summary", 1 + n_runs, flags, ImVec2(table_w, avail.y))) {
    ImGui::TableSetupScrollFreeze(0, 1);
    ImGui::TableSetupColumn("", ImGuiTableColumnFlags_WidthFixed, 150);
    for (const RunView& r : s.runs) ImGui::TableSetupColumn(r.run->model().info.name.c_str());
    ImGui::TableHeadersRow();
    auto row = [&](const char* name, auto&& cell) {
      ImGui::TableNextRow();
      ImGui::TableSetColumnIndex(0);
      ImGui::TextUnformatted(name);
      for (int i = 0; i < n_runs; ++i) {
        ImGui::TableSetColumnIndex(i + 1);
        std::string text = cell(*s.runs[i].run);
        ImGui::TextUnformatted(text.c_str());
      }
    };
    char buf[160];
    row("run", [&](const LiveRun& r) {
      const RunInfo& in = r.model().info;
      std::snprintf(buf, sizeof buf, "%s, %d ranks, %s [%s]",
                    in.strategy.empty() ? "?" : in.strategy.c_str(), in.world,
                    in.backend.empty() ? "?" : in.backend.c_str(), run_state(r).c_str());
      return std::string(buf);
    });
    row("steps, mean time", [&](const LiveRun& r) {
      const RunSummary& x = r.model().summary;
      return std::to_string(x.n_steps) + ", " + format_duration(x.mean_step_s * 1e9) +
             (x.warmup_excluded ? " (first step left out)" : "");
    });
    row("tokens/s (all ranks)", [&](const LiveRun& r) {
      std::snprintf(buf, sizeof buf, "%.0f", r.model().summary.tokens_per_s);
      return std::string(buf);
    });
    row("last loss", [&](const LiveRun& r) {
      std::snprintf(buf, sizeof buf, "%.4f", r.model().summary.last_loss);
      return std::string(buf);
    });
    row("peak / rank (max)", [&](const LiveRun& r) {
      const RunModel& m = r.model();
      std::string t = format_bytes(m.summary.max_peak);
      if (m.info.mem_limit > 0) t += " of " + format_bytes(m.info.mem_limit);
      return t;
    });
    for (OpKind k : {OpKind::all_gather, OpKind::reduce_scatter, OpKind::all_reduce}) {
      std::string name = std::string(op_kind_name(k)) + " /step";
      row(name.c_str(), [&](const LiveRun& r) {
        const RunModel& m = r.model();
        const OpStats& o = m.summary.ops[static_cast<int>(k)];
        if (o.count == 0) return std::string("-");
        double steps = std::max(1, m.summary.n_steps) * std::max<double>(1, m.ranks.size());
        return per_step(double(o.bytes), steps, true) + " per rank, busbw " +
               format_rate(o.bandwidth.busbw);
      });
    }
    row("waiting for ranks", [&](const LiveRun& r) {
      // Per-rank time spent waiting for the last rank to arrive, and who was slowest most often.
      const StragglerReport& w = r.model().summary.stragglers;
      if (w.empty()) return std::string("-");
      std::string t;
      for (const RankWait& rw : w.ranks) {
        std::snprintf(buf, sizeof buf, "%sr%d %s", t.empty() ? "" : ", ", rw.rank,
                      format_duration(double(rw.wait_ns)).c_str());
        t += buf;
        if (t.size() > 60) {
          t += ", ...";
          break;
        }
      }
      if (w.estimated) t += " (est.)";
      return t;
    });
    row("slowest rank", [&](const LiveRun& r) {
      const StragglerReport& w = r.model().summary.stragglers;
      if (w.steps.empty()) return std::string("-");
      int step = s.selected_step;
      for (const StepStraggler& st : w.steps)
        if (st.step == step) {
          std::snprintf(buf, sizeof buf, "step %d: rank %d (others waited %s)", st.step,
                        st.slowest_rank, format_duration(st.others_wait_ns).c_str());
          return std::string(buf);
        }
      const RankWait* top = &w.ranks[0];
      for (const RankWait& rw : w.ranks)
        if (rw.slowest_steps > top->slowest_steps) top = &rw;
      std::snprintf(buf, sizeof buf, "rank %d in %d of %zu steps", top->rank, top->slowest_steps,
                    w.steps.size());
      return std::string(buf);
    });
    row("memory imbalance", [&](const LiveRun& r) {
      const StragglerReport& w = r.model().summary.stragglers;
      if (w.peak_max_rank < 0) return std::string("-");
      if (w.peak_max == w.peak_min) return "none (" + format_bytes(w.peak_max) + " each)";
      std::snprintf(buf, sizeof buf, "peak r%d %s vs r%d %s", w.peak_max_rank,
                    format_bytes(w.peak_max).c_str(), w.peak_min_rank,
                    format_bytes(w.peak_min).c_str());
      return std::string(buf);
    });
    row("comm, exposed /step", [&](const LiveRun& r) {
      const RunModel& m = r.model();
      double steps = std::max(1, m.summary.n_steps) * std::max<double>(1, m.ranks.size());
      std::snprintf(buf, sizeof buf, "%s, %s exposed (%.0f%% overlapped)",
                    per_step(double(m.summary.comm_ns), steps, false).c_str(),
                    per_step(double(m.summary.exposed_ns), steps, false).c_str(),
                    100.0 * m.summary.overlap());
      return std::string(buf);
    });
    if (s.selected_step >= 0) {
      std::string name = "step " + std::to_string(s.selected_step);
      row(name.c_str(), [&](const LiveRun& r) {
        const RunModel& m = r.model();
        int i = find_step(m.steps, s.selected_step);
        if (i < 0) return std::string("-");
        const StepInfo& st = m.steps[i];
        int64_t comm = 0, exposed = 0;
        for (const RankModel& rm : m.ranks) {
          ExposedComm e = exposed_comm_in(rm.exposed, st.t_begin, st.t_end);
          comm += e.comm_ns;
          exposed += e.exposed_ns;
        }
        std::snprintf(buf, sizeof buf, "%s, loss %.4f, exposed %.0f%% of comm",
                      format_duration(double(st.t_end - st.t_begin)).c_str(), st.loss,
                      comm > 0 ? 100.0 * exposed / comm : 0.0);
        return std::string(buf);
      });
    }
    ImGui::EndTable();
  }

  // Peak memory per rank, stacked by category at the moment of the peak, on one scale.
  ImGui::SameLine(0, 12);
  ImVec2 p = ImGui::GetCursorScreenPos();
  Rect bars{p.x, p.y, panel.x + panel.w - kPad - p.x, avail.y};
  s.summary_plot = bars;
  ImGui::InvisibleButton("peaks", v2(std::max(1.0, bars.w), std::max(1.0, bars.h)));
  ImDrawList* dl = ImGui::GetWindowDrawList();
  int total_rows = 0;
  for (const RunView& r : s.runs) total_rows += static_cast<int>(r.run->model().ranks.size());
  dl->AddText(v2(bars.x, bars.y), col(kText), "peak memory per rank, by category at the peak");
  if (total_rows == 0) {
    ImGui::End();
    return;
  }
  int64_t v_max = shared_memory_scale(s);
  // Row labels: "r0" alone for one run, "<name> r0" when comparing.
  auto row_label = [&](const RunModel& m, size_t k) {
    return (s.runs.size() > 1 ? m.info.name + " " : std::string()) + "r" + std::to_string(k);
  };
  double label_w = 0;
  for (const RunView& r : s.runs)
    for (size_t k = 0; k < r.run->model().ranks.size(); ++k)
      label_w = std::max<double>(label_w, ImGui::CalcTextSize(row_label(r.run->model(), k).c_str()).x);
  label_w = std::min(label_w + 8, bars.w * 0.4);
  double top = bars.y + 18;
  double row_h = std::clamp((bars.h - 20) / total_rows, 4.0, 24.0);
  double w = std::max(1.0, bars.w - label_w - 70);
  int row = 0;
  for (const RunView& r : s.runs) {
    const RunModel& m = r.run->model();
    for (size_t k = 0; k < m.ranks.size(); ++k, ++row) {
      double y = top + row * row_h;
      const MemorySeries& ms = m.ranks[k].mem;
      Stack st = stack_categories(ms.at_peak);
      if (row_h >= 12) {
        std::string label = row_label(m, k);
        dl->PushClipRect(v2(bars.x, y), v2(bars.x + label_w - 4, y + row_h), true);
        dl->AddText(v2(bars.x, y + (row_h - 13) / 2), col(kDim), label.c_str());
        dl->PopClipRect();
      }
      for (int c = 0; c < kNumMemCategories; ++c) {
        if (ms.at_peak[c] == 0) continue;
        double x0 = bars.x + label_w + w * double(st.bottom[c]) / double(v_max);
        double x1 = bars.x + label_w + w * double(st.top(c, ms.at_peak)) / double(v_max);
        dl->AddRectFilled(v2(x0, y + 1), v2(std::max(x1, x0 + 1), y + row_h - 1),
                          col(category_color(static_cast<MemCategory>(c))));
      }
      if (row_h >= 12) {
        std::string t = format_bytes(ms.peak_total);
        dl->AddText(v2(bars.x + label_w + w * double(ms.peak_total) / double(v_max) + 4,
                       y + (row_h - 13) / 2),
                    col(kText), t.c_str());
      }
      if (m.info.mem_limit > 0) {
        double x = bars.x + label_w + w * double(m.info.mem_limit) / double(v_max);
        dl->AddLine(v2(x, y), v2(x, y + row_h), col(kCapacityColor), 2);
      }
    }
  }
  if (ImGui::IsItemHovered()) {
    int rrow = static_cast<int>((ImGui::GetIO().MousePos.y - top) / row_h);
    int i = 0;
    for (const RunView& r : s.runs) {
      const RunModel& m = r.run->model();
      if (rrow >= i && rrow < i + static_cast<int>(m.ranks.size()))
        memory_tooltip(m, rrow - i, m.ranks[rrow - i].mem.t_peak);
      i += static_cast<int>(m.ranks.size());
    }
  }
  ImGui::End();
}

// ---- GLFW errors -------------------------------------------------------------------------------

int g_glfw_error = 0;
std::string g_glfw_error_text;
void on_glfw_error(int code, const char* text) {
  g_glfw_error = code;
  g_glfw_error_text = text ? text : "";
}

bool all_runs_have_steps(const ViewerState& s, int k) {
  for (const RunView& r : s.runs)
    if (r.run->model().summary.n_steps < k) return false;
  return true;
}

int run_viewer(const Options& opt) {
  // ---- init
  glfwSetErrorCallback(on_glfw_error);
  if (!glfwInit()) {
    if (g_glfw_error == GLFW_PLATFORM_ERROR)
      std::fprintf(stderr,
                   "shardlab-viewer: no display (GLFW error %d): run under xvfb-run or with "
                   "DISPLAY set\n  (%s)\n",
                   g_glfw_error, g_glfw_error_text.c_str());
    else
      std::fprintf(stderr, "shardlab-viewer: cannot start GLFW (GLFW error %d: %s)\n",
                   g_glfw_error, g_glfw_error_text.c_str());
    return 2;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  glfwWindowHint(GLFW_OPENGL_FORWARD_COMPAT, GL_TRUE);
  std::string title = "shardlab-viewer: ";
  for (size_t i = 0; i < opt.runs.size(); ++i) title += (i ? " vs " : "") + opt.runs[i];
  GLFWwindow* window = glfwCreateWindow(opt.width, opt.height, title.c_str(), nullptr, nullptr);
  if (!window) {
    std::fprintf(stderr, "shardlab-viewer: cannot open a window with an OpenGL 3.3 core context "
                         "(GLFW error %d: %s)\n", g_glfw_error, g_glfw_error_text.c_str());
    glfwTerminate();
    return 3;
  }
  glfwMakeContextCurrent(window);
  const bool batch = opt.frames > 0;
  glfwSwapInterval(batch ? 0 : 1);

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // the layout is computed, nothing to remember
  ImGui::StyleColorsDark();
  ImGui::GetStyle().WindowRounding = 0;
  ImGui_ImplGlfw_InitForOpenGL(window, true);
  ImGui_ImplOpenGL3_Init("#version 330 core");

  ViewerState s;
  s.time = TimeView(static_cast<int>(opt.runs.size()));
  s.overlay_ranks = opt.overlay;
  s.requested_step = opt.at_step;
  for (const std::string& dir : opt.runs) {
    RunView rv;
    rv.run = std::make_unique<LiveRun>(dir);
    rv.run->poll_now();
    s.runs.push_back(std::move(rv));
  }

  // ---- loop
  int exit_code = 0, frames_done = 0, frames_timed = 0;
  double ui_ms_sum = 0, gl_ms_sum = 0;
  const double t_start = glfwGetTime();
  using clock = std::chrono::steady_clock;
  while (!glfwWindowShouldClose(window)) {
    if (batch)
      glfwPollEvents();
    else
      glfwWaitEventsTimeout(LiveRun::kPollInterval);  // wakes on input, else at the next poll
    s.now = glfwGetTime();
    for (RunView& r : s.runs) r.run->poll_if_due(s.now);
    bool ready = opt.until_steps <= 0 || all_runs_have_steps(s, opt.until_steps);
    if (!ready && s.now - t_start > opt.timeout_s) {
      std::fprintf(stderr, "shardlab-viewer: timed out after %.0f s waiting for %d steps\n",
                   opt.timeout_s, opt.until_steps);
      exit_code = 4;
      ready = true;
    }

    auto t0 = clock::now();
    ImGui_ImplOpenGL3_NewFrame();
    ImGui_ImplGlfw_NewFrame();
    if (batch)  // a batch frame ignores the real pointer: an Xvfb cursor would leave a tooltip
      io.MousePos = opt.mouse.size() == 2 ? ImVec2(opt.mouse[0], opt.mouse[1])
                                          : ImVec2(-FLT_MAX, -FLT_MAX);
    ImGui::NewFrame();
    s.hover_rel_x = NAN;
    apply_view(s, io.DisplaySize.x, io.DisplaySize.y);
    show_toolbar_panel(s);
    show_memory_panel(s);
    show_timeline_panel(s);
    show_units_panel(s);
    show_summary_panel(s);
    ImGui::Render();
    auto t1 = clock::now();

    int fb_w, fb_h;
    glfwGetFramebufferSize(window, &fb_w, &fb_h);
    glViewport(0, 0, fb_w, fb_h);
    glClearColor(0.06f, 0.06f, 0.07f, 1.0f);
    glClear(GL_COLOR_BUFFER_BIT);
    ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
    if (batch) glFinish();
    auto t2 = clock::now();
    if (batch && ready) {
      ++frames_done;
      if (frames_done > 2) {  // the first frames build fonts and settle the layout
        ui_ms_sum += std::chrono::duration<double, std::milli>(t1 - t0).count();
        gl_ms_sum += std::chrono::duration<double, std::milli>(t2 - t1).count();
        ++frames_timed;
      }
      if (frames_done >= opt.frames) {
        double ui = frames_timed ? ui_ms_sum / frames_timed : 0;
        double gl = frames_timed ? gl_ms_sum / frames_timed : 0;
        int64_t vtx = ImGui::GetDrawData()->TotalVtxCount;
        double rebuild = 0;
        for (const RunView& r : s.runs) rebuild = std::max(rebuild, r.run->last_rebuild_ms());
        std::printf("shardlab-viewer: %d frames at %dx%d: ui %.2f ms, render %.2f ms per frame "
                    "(mean of the last %d), %lld vertices; model rebuild %.1f ms\n",
                    frames_done, fb_w, fb_h, ui, gl, frames_timed, static_cast<long long>(vtx),
                    rebuild);
        // A script sees what the toolbar shows: a run's problem (a skipped rank file, a bad
        // world_size) goes to stderr too.
        for (const RunView& r : s.runs)
          if (!r.run->status().empty())
            std::fprintf(stderr, "shardlab-viewer: %s: %s\n", r.run->dir().c_str(),
                         r.run->status().c_str());
        if (!opt.screenshot.empty()) {
          std::string err;
          if (!save_back_buffer_png(fb_w, fb_h, opt.screenshot, &err)) {
            std::fprintf(stderr, "shardlab-viewer: screenshot: %s\n", err.c_str());
            exit_code = 5;
          } else {
            int win_w, win_h;
            glfwGetWindowSize(window, &win_w, &win_h);
            std::string report = opt.report.empty() ? default_report_path(opt.screenshot) : opt.report;
            write_report(report, s, win_w, win_h, fb_w, fb_h, frames_done, ui, gl, vtx);
            std::printf("shardlab-viewer: wrote %s and %s\n", opt.screenshot.c_str(), report.c_str());
          }
        }
        break;
      }
    }
    glfwSwapBuffers(window);
  }

  // ---- shutdown, in reverse
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window);
  glfwTerminate();
  return exit_code;
}

}  // namespace
}  // namespace shardlab::viewer

int main(int argc, char** argv) {
  shardlab::viewer::Options opt;
  CLI::App app{
      "shardlab-viewer: per-rank memory by category, compute/communication timelines and FSDP "
      "unit states of ShardLab run directories, live while training writes them or replayed.\n"
      "Two or more directories are shown side by side on the same scales (compare mode)."};
  app.add_option("runs", opt.runs, "run directories (e.g. runs/dp runs/fsdp)")->required();
  app.add_option("--screenshot", opt.screenshot,
                 "render --frames frames, save the last as this PNG (with a .json of panel "
                 "rectangles next to it) and exit");
  app.add_option("--report", opt.report, "where to write the screenshot's JSON report");
  // Every number is range-checked: --frames -1 used to mean "interactive", an endless loop under
  // a script; a zero or huge window fails deep inside GLFW.
  app.add_option("--frames", opt.frames,
                 "render this many frames and exit (prints the mean frame time); default 3 with "
                 "--screenshot")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--at-step", opt.at_step, "show this step (zoomed to it) instead of the whole run")
      ->check(CLI::Range(0, INT_MAX));
  app.add_option("--until-steps", opt.until_steps,
                 "with --frames: start counting frames once every run has this many steps")
      ->check(CLI::Range(0, INT_MAX));
  app.add_option("--timeout", opt.timeout_s, "seconds to wait for --until-steps")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  app.add_option("--width", opt.width, "window width")
      ->check(CLI::Range(64, 16384))
      ->capture_default_str();
  app.add_option("--height", opt.height, "window height")
      ->check(CLI::Range(64, 16384))
      ->capture_default_str();
  app.add_flag("--overlay", opt.overlay, "memory of all ranks overlaid in one plot (totals)");
  app.add_option("--mouse", opt.mouse, "with --frames: put the mouse at X Y (shows that tooltip)")
      ->expected(2);
  CLI11_PARSE(app, argc, argv);
  if (!opt.screenshot.empty() && opt.frames <= 0) opt.frames = 3;
  try {
    return shardlab::viewer::run_viewer(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shardlab-viewer: %s\n", e.what());
    return 1;
  }
}
