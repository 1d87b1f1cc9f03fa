// The viewer's panels, one file each in viewer/app/panels/. main.cpp shows them every frame in this
// order, after apply_view() has laid them out: the toolbar, then per run the memory, timeline and
// FSDP unit panels (side by side in compare mode), then the summary across runs.
#pragma once

#include "viewer/app/viewer_state.hpp"

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

}  // namespace shardlab::viewer
