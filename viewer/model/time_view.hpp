// The time axes of every open run, kept on one scale: zoom and pan act on all of them at once, a
// selected step is shown from its own start in each run, and live follow keeps the newest events
// at the right edge. One axis per run; a run's memory, timeline and unit panels share it.
#pragma once

#include <cstdint>
#include <vector>

#include "viewer/model/time_axis.hpp"

namespace shardlab::viewer {

class TimeView {
 public:
  explicit TimeView(int n_runs = 1) : axes_(n_runs > 0 ? n_runs : 1) {}

  int n_runs() const { return static_cast<int>(axes_.size()); }
  const TimeAxis& axis(int run) const { return axes_[run]; }
  // Places run `run`'s axis on its panel's pixels (every frame; keeps time at the left edge).
  void set_pixels(int run, double x0, double width);

  // Zoom by factor about the pixel rel_x from each axis' left edge (factor > 1 zooms in).
  void zoom(double rel_x, double factor);
  void pan(double dx_px);
  // Each run i shows [begin[i], begin[i] + span) where span is the longest of the ranges, so a
  // nanosecond is the same width in every run.
  void show(const std::vector<double>& begin, const std::vector<double>& end);
  // Live follow: when everything up to t_last[i] fits at the current scale, show from 0;
  // otherwise pin each run's newest time to the right edge.
  void follow(const std::vector<int64_t>& t_last);

  double ns_per_px() const { return axes_[0].ns_per_px(); }

 private:
  std::vector<TimeAxis> axes_;
};

}  // namespace shardlab::viewer
