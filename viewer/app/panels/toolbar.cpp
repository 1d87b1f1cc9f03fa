// The toolbar across the top: each run's name, state, steps and events and its latest problem;
// follow, all, the step selector over every run's steps, the view-start scrubber, overlay ranks.
#include <algorithm>
#include <cstdint>

#include <imgui.h>

#include "viewer/app/draw.hpp"
#include "viewer/app/panels/panels.hpp"
#include "viewer/app/view_control.hpp"

namespace shardlab::viewer {

void show_toolbar_panel(ViewerState& s) {
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
  ImGui::TextColored(ImVec4(0.6f, 0.6f, 0.6f, 1.0f),
                     "%s/px   wheel: zoom, drag: pan, double-click: all",
                     format_duration(s.time.ns_per_px()).c_str());
  ImGui::End();
}

}  // namespace shardlab::viewer
