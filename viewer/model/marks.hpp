// Numbered callouts drawn over the panels (`shardlab-viewer --mark`), for pages that walk a reader
// through a screenshot: "1" on this all-gather, "2" at this memory peak. A mark names a run, a
// panel, a row in it (a rank, or a unit in the units panel) and a time on the trace's own clock
// (the `t_start`/`t` of the events in rank<R>.jsonl, nanoseconds), so a script that picked the
// moment from the events puts the number exactly there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardlab::viewer {

enum class MarkPanel : uint8_t { memory, compute, comm, units };
const char* mark_panel_name(MarkPanel p);

struct Mark {
  int number = 0;  // the label, 1..99
  MarkPanel panel = MarkPanel::memory;
  int row = 0;    // the rank (memory, compute, comm) or the unit (units: of the shown rank)
  int64_t t = 0;  // trace time, ns
  int run = 0;    // which run directory, in command-line order
};

// Where a mark landed in a frame: the point it names (x, y) in window pixels; `shown` is false
// when that point is outside its panel (another step is in view, or the row does not exist).
struct PlacedMark {
  Mark mark;
  double x = 0, y = 0;
  bool shown = false;
};

// Parses `N:PANEL:ROW:T[:RUN]`, e.g. `1:comm:0:403120000`. On a malformed spec returns false and
// says which part is wrong in *error (the spec quoted).
bool parse_mark(const std::string& spec, Mark* out, std::string* error);

// [{"number", "panel", "run", "row", "t", "x", "y", "shown"}, ...] for the screenshot's report.
nlohmann::json marks_json(const std::vector<PlacedMark>& placed);

}  // namespace shardlab::viewer
