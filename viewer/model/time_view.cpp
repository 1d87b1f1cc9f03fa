// Shared-scale time axes (see time_view.hpp).
#include "viewer/model/time_view.hpp"

#include <algorithm>

namespace shardlab::viewer {

void TimeView::set_pixels(int run, double x0, double width) { axes_[run].set_pixels(x0, width); }

void TimeView::zoom(double rel_x, double factor) {
  for (TimeAxis& a : axes_) a.zoom_at(a.x0() + rel_x, factor);
}

void TimeView::pan(double dx_px) {
  for (TimeAxis& a : axes_) a.pan_px(dx_px);
}

void TimeView::show(const std::vector<double>& begin, const std::vector<double>& end) {
  double span = 0;
  for (size_t i = 0; i < axes_.size() && i < begin.size() && i < end.size(); ++i)
    span = std::max(span, end[i] - begin[i]);
  if (!(span > 0)) span = 1e6;
  // Fit on the narrowest axis so the longest range is whole everywhere.
  double width = axes_[0].width();
  for (const TimeAxis& a : axes_) width = std::min(width, a.width());
  for (size_t i = 0; i < axes_.size(); ++i) {
    TimeAxis& a = axes_[i];
    a = TimeAxis(a.x0(), a.width(), i < begin.size() ? begin[i] : 0, span / width);
  }
}

void TimeView::follow(const std::vector<int64_t>& t_last) {
  double newest = 0;
  for (int64_t t : t_last) newest = std::max(newest, static_cast<double>(t));
  bool fits = true;
  for (const TimeAxis& a : axes_) fits = fits && newest <= a.width() * a.ns_per_px();
  for (size_t i = 0; i < axes_.size(); ++i) {
    TimeAxis& a = axes_[i];
    double t = i < t_last.size() ? static_cast<double>(t_last[i]) : newest;
    if (fits)
      a = TimeAxis(a.x0(), a.width(), 0, a.ns_per_px());
    else
      a.pin_right(t);
  }
}

}  // namespace shardlab::viewer
