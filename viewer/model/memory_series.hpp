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

// The order of the stacked plot, bottom to top: persistent state first (params, grads, optimizer
// state), then what comes and goes within a step, so the floor stays flat and the transients
// ride on it.
inline constexpr std::array<MemCategory, kNumMemCategories> kStackOrder = {
    MemCategory::params,           MemCategory::grads,           MemCategory::optimizer_state,
    MemCategory::params_unsharded, MemCategory::grads_unsharded, MemCategory::activations,
    MemCategory::comm_buffers,     MemCategory::workspace,       MemCategory::unattributed};

// Where each category's band sits in the stack (indexed by category): [bottom, bottom + cat).
// The top of the last band in kStackOrder is the total.
struct Stack {
  MemArray bottom{};
  int64_t total = 0;
  int64_t top(int k, const MemArray& cat) const { return bottom[k] + cat[k]; }
};
Stack stack_categories(const MemArray& cat);

struct MemColumn {
  double x0 = 0, x1 = 0;  // pixels
  MemArray cat{};
  int64_t total = 0;
};
// Columns covering the axis' pixels from the first sample to t_last (no data is drawn beyond it).
// Each pixel column shows the highest-total state inside it (or the state carried into it);
// neighbouring columns with equal values are merged.
std::vector<MemColumn> memory_columns(const MemorySeries& s, const TimeAxis& axis, int64_t t_last);

// One filled rectangle of the stacked plot: category k's band over a run of columns.
struct BandRect {
  double x0 = 0, x1 = 0;
  double y_top = 0, y_bottom = 0;  // pixels, rounded to whole pixels
  MemCategory category = MemCategory::params;
  bool widened = false;  // drawn kMinBandPx tall although its bytes round to less
};
// A category holding any bytes is never drawn thinner than this, so a small model's gathered
// parameters (a few KiB beside MiB of activations) still show; such a band grows upward over its
// neighbour's bottom pixel and is drawn last. The stack's top (the total) is not moved.
inline constexpr double kMinBandPx = 2;
// The stacked plot as rectangles: each category's band in each column, with y rounded to whole
// pixels, and neighbouring columns whose band covers the same pixels merged into one rectangle
// (a persistent category becomes one rectangle however many columns it spans). Widened bands
// come after all others in the result, so drawing in order leaves them on top.
std::vector<BandRect> memory_bands(const std::vector<MemColumn>& cols, const ValueAxis& va);

}  // namespace shardlab::viewer
