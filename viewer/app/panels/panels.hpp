// The viewer's panels, one file each in viewer/app/panels/. main.cpp shows them every frame in this
// order, after apply_view() has laid them out: the toolbar, then per run the memory, timeline and
// FSDP unit panels (side by side in compare mode), then the summary across runs.
#pragma once

#include "viewer/app/viewer_state.hpp"
#include "viewer/model/gantt.hpp"
#include "viewer/model/time_axis.hpp"

namespace shardlab::viewer {

// Runs, follow/all, the step selector, the view-start scrubber, overlay ranks (toolbar.cpp).
void show_toolbar_panel(ViewerState& s);
// Per rank: bytes stacked by category over time, capacity, peak; or every rank's total overlaid.
void show_memory_panel(ViewerState& s);
// Per rank a compute and a comm lane of op bars, exposed communication underlined, step lines.
void show_timeline_panel(ViewerState& s);
// One rank's FSDP units: sharded, gathering, unsharded, resharded over time.
void show_units_panel(ViewerState& s);
// The table of figures per run beside the peak memory of every rank (summary.cpp).
void show_summary_panel(ViewerState& s);

// Where rows sit inside a panel's canvas (the rectangle RunView records as memory_plot,
// timeline_plot or units_plot); the panels draw with these and --mark places its numbers with them.
// Memory: row `row` of `rows`, on a value axis up to v_max. With host rows (a run with host-tier
// memory, not overlaid) rank r's device row is row 2r and its host row 2r + 1.
ValueAxis memory_row_axis(const Rect& canvas, int row, int rows, int64_t v_max);
// A memory row thinner than this has no label, scale or peak marker (a line of text is 13 px).
constexpr double kMinLabelledRowPx = 14;
int memory_rows_per_rank(const ViewerState& s, const RunModel& m);
// Timeline: the lanes of each of n ranks (compute, comm, and copy when `copy_lane`), below the
// time ruler.
GanttRows timeline_rows(const Rect& canvas, int n_ranks, bool copy_lane);
// Units: the height of one unit's strip.
double unit_row_height(const Rect& canvas, int n_units);

}  // namespace shardlab::viewer
