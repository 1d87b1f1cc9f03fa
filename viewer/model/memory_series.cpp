// Memory series, stacking and per-pixel columns (see memory_series.hpp).
#include "viewer/model/memory_series.hpp"

#include <algorithm>
#include <cmath>

namespace shardlab::viewer {

MemSample MemorySeries::at(int64_t t) const {
  auto it = std::upper_bound(samples.begin(), samples.end(), t,
                             [](int64_t v, const MemSample& s) { return v < s.t; });
  if (it == samples.begin()) {
    MemSample zero;
    zero.t = t;
    return zero;
  }
  return *(it - 1);
}

MemorySeries build_memory_series(const std::vector<MemEvent>& events) {
  MemorySeries s;
  s.samples.reserve(events.size());
  MemSample cur;
  for (const MemEvent& e : events) {
    int c = static_cast<int>(e.category);
    if (c < 0 || c >= kNumMemCategories) continue;
    cur.t = std::max(cur.t, e.t);
    cur.cat[c] = std::max<int64_t>(0, e.cat_total);
    cur.total = 0;
    for (int64_t v : cur.cat) cur.total += v;
    s.samples.push_back(cur);
    s.peak_by_cat[c] = std::max(s.peak_by_cat[c], cur.cat[c]);
    if (cur.total > s.peak_total) {
      s.peak_total = cur.total;
      s.t_peak = cur.t;
      s.at_peak = cur.cat;
    }
  }
  return s;
}

Stack stack_categories(const MemArray& cat) {
  Stack st;
  for (MemCategory c : kStackOrder) {
    int k = static_cast<int>(c);
    st.bottom[k] = st.total;
    st.total += cat[k];
  }
  return st;
}

std::vector<MemColumn> memory_columns(const MemorySeries& s, const TimeAxis& axis, int64_t t_last) {
  std::vector<MemColumn> cols;
  if (s.samples.empty()) return cols;
  double t_first = static_cast<double>(s.samples.front().t);
  double t_stop = std::max(static_cast<double>(t_last), static_cast<double>(s.samples.back().t));
  // Pixel columns [px, px+1) relative to x0, clipped to the data's time range.
  double px_begin = std::max(0.0, std::floor(axis.to_x(t_first) - axis.x0()));
  // The pixel holding t_stop is the last one drawn, so the state after the last event shows.
  double px_end = std::min(axis.width(), std::floor(axis.to_x(t_stop) - axis.x0()) + 1);
  if (!(px_end > px_begin)) return cols;

  auto first_after = [&](double t) {
    return std::upper_bound(
        s.samples.begin(), s.samples.end(), t,
        [](double v, const MemSample& m) { return v < static_cast<double>(m.t); });
  };
  for (double px = px_begin; px < px_end; px += 1) {
    double ta = axis.to_t(axis.x0() + px), tb = axis.to_t(axis.x0() + px + 1);
    ta = std::max(ta, t_first);
    tb = std::min(tb, t_stop + 1);
    // The state entering the column, then every sample inside it; keep the highest total.
    auto it = first_after(ta);
    MemSample best = it == s.samples.begin() ? MemSample{} : *(it - 1);
    for (; it != s.samples.end() && static_cast<double>(it->t) < tb; ++it)
      if (it->total > best.total) best = *it;
    double x0 = axis.x0() + px, x1 = x0 + 1;
    if (!cols.empty() && cols.back().cat == best.cat && cols.back().x1 == x0) {
      cols.back().x1 = x1;
    } else {
      MemColumn c;
      c.x0 = x0;
      c.x1 = x1;
      c.cat = best.cat;
      c.total = best.total;
      cols.push_back(c);
    }
  }
  return cols;
}

std::vector<BandRect> memory_bands(const std::vector<MemColumn>& cols, const ValueAxis& va) {
  std::vector<BandRect> out;
  // The open rectangle of each category, or -1.
  std::array<int, kNumMemCategories> open;
  open.fill(-1);
  for (const MemColumn& c : cols) {
    Stack st = stack_categories(c.cat);
    for (int k = 0; k < kNumMemCategories; ++k) {
      double yt = std::round(va.to_y(static_cast<double>(st.top(k, c.cat))));
      double yb = std::round(va.to_y(static_cast<double>(st.bottom[k])));
      if (c.cat[k] <= 0) {
        open[k] = -1;
        continue;
      }
      bool widened = yb - yt < kMinBandPx;
      if (widened) yt = yb - kMinBandPx;
      if (open[k] >= 0) {
        BandRect& r = out[open[k]];
        if (r.y_top == yt && r.y_bottom == yb && r.x1 == c.x0) {
          r.x1 = c.x1;
          continue;
        }
      }
      open[k] = static_cast<int>(out.size());
      out.push_back({c.x0, c.x1, yt, yb, static_cast<MemCategory>(k), widened});
    }
  }
  std::stable_partition(out.begin(), out.end(), [](const BandRect& b) { return !b.widened; });
  return out;
}

}  // namespace shardlab::viewer
