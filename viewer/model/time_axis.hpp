// Time-to-pixel mapping for the timeline and memory plots, with zoom about a pixel and pan by
// pixels, plus a value axis for the memory plots and "nice" tick steps for both.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardlab::viewer {

class TimeAxis {
 public:
  TimeAxis() = default;
  // Shows [t_begin, t_begin + width * ns_per_px) in pixels [x0, x0 + width).
  TimeAxis(double x0, double width, double t_begin_ns, double ns_per_px);

  double to_x(double t_ns) const { return x0_ + (t_ns - t_begin_) / ns_per_px_; }
  double to_t(double x) const { return t_begin_ + (x - x0_) * ns_per_px_; }

  double x0() const { return x0_; }
  double width() const { return width_; }
  double t_begin() const { return t_begin_; }
  double t_end() const { return t_begin_ + width_ * ns_per_px_; }
  double ns_per_px() const { return ns_per_px_; }

  // Moves the axis to a new pixel rectangle, keeping the time at the left edge and the scale.
  void set_pixels(double x0, double width);
  // Shows [t0, t1] across the full width (t1 <= t0 shows 1 ms).
  void fit(double t0_ns, double t1_ns);
  // factor > 1 zooms in. The time under pixel x stays under x.
  void zoom_at(double x, double factor);
  // Content follows a drag of dx pixels to the right (earlier times come into view).
  void pan_px(double dx);
  // Keeps the scale and shifts so that t_ns sits at the right edge (live follow).
  void pin_right(double t_ns);

  static constexpr double kMinNsPerPx = 1.0;     // 1 ns per pixel
  static constexpr double kMaxNsPerPx = 1.0e12;  // 1000 s per pixel

 private:
  double x0_ = 0, width_ = 1, t_begin_ = 0, ns_per_px_ = 1e6;
};

// Values [0, v_max] onto pixels [y_bottom, y_bottom - height] (screen y grows downwards).
struct ValueAxis {
  double v_max = 1;
  double y_bottom = 0;
  double height = 1;
  double to_y(double v) const { return y_bottom - (v_max > 0 ? v / v_max : 0) * height; }
  double to_v(double y) const { return (y_bottom - y) / height * v_max; }
};

// A 1-2-5 step (times a power of ten) of at least `raw`.
double nice_step(double raw);
// Tick positions k*step inside [lo, hi], with the step chosen so ticks are ~min_px apart.
std::vector<double> nice_ticks(double lo, double hi, double px_per_unit, double min_px);
// A byte ceiling for a plot: the smallest of 1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8 times a power
// of ten (in B, KiB, MiB or GiB) at or above v.
int64_t nice_bytes_ceiling(int64_t v);
// "1.5 ms", "250 us", "2.00 s" for a time in ns.
std::string format_duration(double ns);
// "238 MiB", "12.5 MiB", "1.25 GiB": three significant digits, for tight labels.
std::string format_bytes_short(int64_t bytes);
// "12.5 GB/s" (decimal, as nccl-tests prints) for bytes per second.
std::string format_rate(double bytes_per_s);

}  // namespace shardlab::viewer
