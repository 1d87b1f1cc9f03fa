// Drawing `--mark` callouts (viewer/model/marks.hpp) over the panels, after they are laid out:
// a numbered disc just above the point a mark names, with a short stem down to it.
#pragma once

#include "viewer/app/viewer_state.hpp"
#include "viewer/model/marks.hpp"

namespace shardlab::viewer {

// Places every mark of s.marks on the canvases the panels recorded this frame, draws the shown
// ones on top of all windows and records where each landed in s.placed_marks.
void draw_marks(ViewerState& s);

}  // namespace shardlab::viewer
