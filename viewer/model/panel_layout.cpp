// Panel rectangles (see panel_layout.hpp).
#include "viewer/model/panel_layout.hpp"

#include <algorithm>
#include <cmath>

namespace shardlab::viewer {

PanelLayout layout_panels(double width, double height, int n_runs) {
  n_runs = std::max(1, n_runs);
  PanelLayout L;
  double toolbar_h = 64;
  double summary_h = std::round(std::clamp(height * 0.24, 140.0, 320.0));
  L.toolbar = {0, 0, width, toolbar_h};
  L.summary = {0, height - summary_h, width, summary_h};
  double top = toolbar_h, avail = std::max(0.0, height - toolbar_h - summary_h);
  double mem_h = std::round(avail * 0.40), tl_h = std::round(avail * 0.40);
  double units_h = avail - mem_h - tl_h;
  double col_w = std::floor(width / n_runs);
  for (int i = 0; i < n_runs; ++i) {
    double x = i * col_w, w = i == n_runs - 1 ? width - x : col_w;
    RunPanels p;
    p.memory = {x, top, w, mem_h};
    p.timeline = {x, top + mem_h, w, tl_h};
    p.units = {x, top + mem_h + tl_h, w, units_h};
    L.runs.push_back(p);
  }
  return L;
}

nlohmann::json rect_json(const Rect& r) { return {r.x, r.y, r.w, r.h}; }

}  // namespace shardlab::viewer
