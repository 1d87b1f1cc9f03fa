// Time and value axes (see time_axis.hpp).
#include "viewer/model/time_axis.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace shardlab::viewer {

TimeAxis::TimeAxis(double x0, double width, double t_begin_ns, double ns_per_px)
    : x0_(x0),
      width_(std::max(1.0, width)),
      t_begin_(t_begin_ns),
      ns_per_px_(std::clamp(ns_per_px, kMinNsPerPx, kMaxNsPerPx)) {}

void TimeAxis::set_pixels(double x0, double width) {
  x0_ = x0;
  width_ = std::max(1.0, width);
}

void TimeAxis::fit(double t0_ns, double t1_ns) {
  if (!(t1_ns > t0_ns)) t1_ns = t0_ns + 1e6;
  t_begin_ = t0_ns;
  ns_per_px_ = std::clamp((t1_ns - t0_ns) / width_, kMinNsPerPx, kMaxNsPerPx);
}

void TimeAxis::zoom_at(double x, double factor) {
  if (!(factor > 0)) return;
  double t = to_t(x);
  ns_per_px_ = std::clamp(ns_per_px_ / factor, kMinNsPerPx, kMaxNsPerPx);
  t_begin_ = t - (x - x0_) * ns_per_px_;
}

void TimeAxis::pan_px(double dx) { t_begin_ -= dx * ns_per_px_; }

void TimeAxis::pin_right(double t_ns) { t_begin_ = t_ns - width_ * ns_per_px_; }

double nice_step(double raw) {
  if (!(raw > 0)) return 1;
  double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw * (1 - 1e-12)) return m * p;
  return 10 * p;
}

std::vector<double> nice_ticks(double lo, double hi, double px_per_unit, double min_px) {
  std::vector<double> ticks;
  if (!(hi > lo) || !(px_per_unit > 0)) return ticks;
  double step = nice_step(min_px / px_per_unit);
  for (double v = std::ceil(lo / step) * step; v <= hi && ticks.size() < 1000; v += step)
    ticks.push_back(v);
  return ticks;
}

int64_t nice_bytes_ceiling(int64_t v) {
  if (v <= 0) return 1024;
  double unit = 1;
  for (double u : {1024.0, 1048576.0, 1073741824.0})
    if (static_cast<double>(v) >= u) unit = u;
  double scaled = static_cast<double>(v) / unit;
  // Finer than 1-2-5 so a memory plot's top is never far above its data.
  double p = std::pow(10.0, std::floor(std::log10(scaled)));
  double c = 10 * p;
  for (double m : {1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0})
    if (m * p >= scaled * (1 - 1e-12)) {
      c = m * p;
      break;
    }
  return static_cast<int64_t>(std::ceil(c * unit));
}

std::string format_duration(double ns) {
  char buf[32];
  double a = std::fabs(ns);
  if (a >= 1e9)
    std::snprintf(buf, sizeof buf, "%.3g s", ns * 1e-9);
  else if (a >= 1e6)
    std::snprintf(buf, sizeof buf, "%.3g ms", ns * 1e-6);
  else if (a >= 1e3)
    std::snprintf(buf, sizeof buf, "%.3g us", ns * 1e-3);
  else
    std::snprintf(buf, sizeof buf, "%.0f ns", ns);
  return buf;
}

std::string format_bytes_short(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (std::fabs(v) >= 1000.0 && u < 4) {  // 1000, not 1024: keeps three digits at most
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0 || std::fabs(v) >= 100)
    std::snprintf(buf, sizeof buf, "%.0f %s", v, units[u]);
  else if (std::fabs(v) >= 10)
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

std::string format_rate(double bytes_per_s) {
  char buf[32];
  if (bytes_per_s >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2f GB/s", bytes_per_s * 1e-9);
  else if (bytes_per_s >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2f MB/s", bytes_per_s * 1e-6);
  else
    std::snprintf(buf, sizeof buf, "%.2f KB/s", bytes_per_s * 1e-3);
  return buf;
}

}  // namespace shardlab::viewer
