// How the view moves as a whole: panel rectangles and axis pixels each frame, the first view once
// data arrives, live follow (the last three steps of each run), showing everything, selecting a
// step in every run, and the memory scale every plot shares.
#pragma once

#include <string>
#include <vector>

#include "viewer/app/viewer_state.hpp"

namespace shardlab::viewer {

// Once per frame before the panels.
void apply_view(ViewerState& s, double width, double height);
void show_all(ViewerState& s);
// Step `step` of every run, each from its own start on one scale (a run without it: its last).
void select_step(ViewerState& s, int step);
void follow_latest(ViewerState& s);
// The top of every memory plot: a round number above every run's peak and capacity.
int64_t shared_memory_scale(const ViewerState& s);
// "waiting", "live" or "finished".
std::string run_state(const LiveRun& run);

}  // namespace shardlab::viewer
