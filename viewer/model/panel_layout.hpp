// Where the panels sit in the window: a toolbar on top, one column per run (memory, timeline,
// units, top to bottom, so the three share a time axis), and the summary across the bottom.
// The app places its windows here and reports the rectangles next to a screenshot.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

namespace shardlab::viewer {

struct Rect {
  double x = 0, y = 0, w = 0, h = 0;
  bool contains(double px, double py) const {
    return px >= x && px < x + w && py >= y && py < y + h;
  }
  bool operator==(const Rect& o) const { return x == o.x && y == o.y && w == o.w && h == o.h; }
};

struct RunPanels {
  Rect memory, timeline, units;
};

struct PanelLayout {
  Rect toolbar;
  std::vector<RunPanels> runs;
  Rect summary;
};

PanelLayout layout_panels(double width, double height, int n_runs);
nlohmann::json rect_json(const Rect& r);  // [x, y, w, h]

}  // namespace shardlab::viewer
