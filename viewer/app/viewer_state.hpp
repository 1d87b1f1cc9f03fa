// What the viewer's panels share from frame to frame: the runs being followed, one time view on a
// common scale, the selected step, display options, and the canvas rectangles each panel drew
// (reported next to a screenshot so tests can check where things are).
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "viewer/model/live_run.hpp"
#include "viewer/model/marks.hpp"
#include "viewer/model/panel_layout.hpp"
#include "viewer/model/time_view.hpp"

namespace shardlab::viewer {

// Pixels left of every time axis for row labels; the same in all panels so they line up.
inline constexpr double kGutter = 92;
inline constexpr double kPad = 8;

struct RunView {
  std::unique_ptr<LiveRun> run;
  int units_rank = 0;                           // whose unit strips the units panel shows
  Rect memory_plot, timeline_plot, units_plot;  // canvases drawn this frame
  // --offload runs: each rank's host memory row and copy lane this frame (empty otherwise).
  std::vector<Rect> host_rows, copy_lanes;
};

struct ViewerState {
  std::vector<RunView> runs;
  TimeView time;
  PanelLayout layout;
  double now = 0;      // glfwGetTime()
  bool follow = true;  // keep the newest steps in view while the run grows
  bool overlay_ranks = false;
  bool fitted = false;       // a first view was chosen once data arrived
  int selected_step = -1;    // step number, -1: none
  int requested_step = -1;   // --at-step, applied once that step exists
  double hover_rel_x = NAN;  // cursor position relative to the time axes, NaN when elsewhere
  Rect summary_plot;
  // The summary table as drawn in the last frame, row by row: its label, one text per run, and
  // the row's rectangle (reported next to a screenshot: what the picture says, as text).
  struct SummaryRow {
    std::string name;
    std::vector<std::string> cells;
    Rect rect;
  };
  std::vector<SummaryRow> summary_rows;
  std::string message;                   // one-line status shown in the toolbar (startup problems)
  std::vector<Mark> marks;               // --mark callouts
  std::vector<PlacedMark> placed_marks;  // where they landed in the last frame
};

}  // namespace shardlab::viewer
