// One rank's memory over time, by category, built from its mem events; the per-pixel columns the
// stacked plot draws (each column keeps the highest total inside it, so no peak is lost when
// zoomed out); the value at a time for hover; and the peak.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/memory/tracker.hpp"
#include "core/trace/run_reader.hpp"
#include "viewer/model/time_axis.hpp"

namespace shardlab::viewer {

struct MemSample {
  int64_t t = 0;
  MemArray cat{};     // bytes by category after the event
  int64_t total = 0;  // sum of cat
};

struct MemorySeries {
  std::vector<MemSample> samples;  // in event order; t never decreases
  MemArray peak_by_cat{};          // each category's own peak
  int64_t peak_total = 0;
  int64_t t_peak = 0;
  MemArray at_peak{};  // categories when the total peaked

  // The state at time t: the last sample at or before t (all zero before the first one).
  MemSample at(int64_t t) const;
};

// Events in file order. A category's value comes from the event's cat_total (the tracker's own
// count), and the total is always the sum of categories so the stack adds up.
MemorySeries build_memory_series(const std::vector<MemEvent>& events);

// Bottom of each category's band in a stack: stack[k] = sum of cat[0..k), stack[K] = the total.
std::array<int64_t, kNumMemCategories + 1> stack_categories(const MemArray& cat);

struct MemColumn {
  double x0 = 0, x1 = 0;  // pixels
  MemArray cat{};
  int64_t total = 0;
};
// Columns covering the axis' pixels from the first sample to t_last (no data is drawn beyond it).
// Each pixel column shows the highest-total state inside it (or the state carried into it);
// neighbouring columns with equal values are merged.
std::vector<MemColumn> memory_columns(const MemorySeries& s, const TimeAxis& axis, int64_t t_last);

}  // namespace shardlab::viewer
