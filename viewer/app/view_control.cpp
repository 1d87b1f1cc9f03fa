// View control (see view_control.hpp).
#include "viewer/app/view_control.hpp"

#include <algorithm>

#include "viewer/app/draw.hpp"

namespace shardlab::viewer {

void show_all(ViewerState& s) {
  std::vector<double> b, e;
  for (const RunView& r : s.runs) {
    b.push_back(0);
    e.push_back(static_cast<double>(std::max<int64_t>(r.run->model().t_view, 1000000)));
  }
  s.time.show(b, e);
}

void select_step(ViewerState& s, int step) {
  std::vector<double> b, e;
  for (const RunView& r : s.runs) {
    const auto& steps = r.run->model().steps;
    int i = find_step(steps, step);
    if (i < 0 && !steps.empty()) i = static_cast<int>(steps.size()) - 1;
    b.push_back(i < 0 ? 0 : static_cast<double>(steps[i].t_begin));
    e.push_back(i < 0 ? 1e6 : static_cast<double>(steps[i].t_end));
  }
  s.time.show(b, e);
  s.selected_step = step;
  s.follow = false;
}

void follow_latest(ViewerState& s) {
  std::vector<double> b, e;
  for (const RunView& r : s.runs) {
    const RunModel& m = r.run->model();
    size_t n = m.steps.size();
    b.push_back(n >= 3 ? static_cast<double>(m.steps[n - 3].t_begin) : 0.0);
    e.push_back(static_cast<double>(std::max<int64_t>(m.t_view, 1000000)));
  }
  s.time.show(b, e);
}

int64_t shared_memory_scale(const ViewerState& s) {
  int64_t v = 0;
  for (const RunView& r : s.runs) {
    const RunModel& m = r.run->model();
    v = std::max({v, m.summary.max_peak, m.info.mem_limit});
  }
  return nice_bytes_ceiling(static_cast<int64_t>(static_cast<double>(v) * 1.05));
}

void apply_view(ViewerState& s, double width, double height) {
  s.layout = layout_panels(width, height, static_cast<int>(s.runs.size()));
  for (size_t i = 0; i < s.runs.size(); ++i) {
    double x0, w;
    axis_pixels(s.layout.runs[i].timeline, &x0, &w);
    s.time.set_pixels(static_cast<int>(i), x0, w);
  }
  bool any_data = false, all_finished = true;
  for (const RunView& r : s.runs) {
    any_data = any_data || r.run->model().t_last > 0;
    all_finished = all_finished && r.run->model().finished;
  }
  bool step_exists = false;
  for (const RunView& r : s.runs)
    step_exists = step_exists || find_step(r.run->model().steps, s.requested_step) >= 0;
  if (s.requested_step >= 0 && step_exists) {
    select_step(s, s.requested_step);
    s.requested_step = -1;
    s.fitted = true;
  }
  if (!s.fitted && any_data) {
    s.fitted = true;
    if (all_finished) {
      s.follow = false;
      show_all(s);
    }
  }
  if (s.follow && any_data) follow_latest(s);
}

std::string run_state(const LiveRun& run) {
  const RunModel& m = run.model();
  if (!run.started()) return "waiting";
  return m.finished ? "finished" : "live";
}

}  // namespace shardlab::viewer
