// Parsing `--mark` specs (see marks.hpp).
#include "viewer/model/marks.hpp"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <vector>

namespace shardlab::viewer {

const char* mark_panel_name(MarkPanel p) {
  switch (p) {
    case MarkPanel::memory: return "memory";
    case MarkPanel::compute: return "compute";
    case MarkPanel::comm: return "comm";
    case MarkPanel::units: return "units";
  }
  return "?";
}

namespace {

// A whole-string base-10 integer in [lo, hi].
bool to_int(const std::string& s, int64_t lo, int64_t hi, int64_t* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

bool parse_mark(const std::string& spec, Mark* out, std::string* error) {
  std::vector<std::string> parts(1);
  for (char c : spec) {
    if (c == ':')
      parts.emplace_back();
    else
      parts.back() += c;
  }
  auto fail = [&](const std::string& why) {
    *error = "--mark '" + spec + "': " + why + " (expected N:PANEL:ROW:T_NS[:RUN])";
    return false;
  };
  if (parts.size() != 4 && parts.size() != 5) return fail("needs 4 or 5 fields separated by ':'");
  Mark m;
  int64_t v = 0;
  if (!to_int(parts[0], 1, 99, &v)) return fail("the number must be 1..99");
  m.number = static_cast<int>(v);
  bool known = false;
  for (MarkPanel p : {MarkPanel::memory, MarkPanel::compute, MarkPanel::comm, MarkPanel::units}) {
    if (parts[1] == mark_panel_name(p)) {
      m.panel = p;
      known = true;
    }
  }
  if (!known) return fail("unknown panel '" + parts[1] + "' (memory, compute, comm or units)");
  if (!to_int(parts[2], 0, 1 << 20, &v)) return fail("the row must be a rank or unit >= 0");
  m.row = static_cast<int>(v);
  if (!to_int(parts[3], 0, INT64_MAX, &m.t)) return fail("the time must be ns >= 0");
  if (parts.size() == 5) {
    if (!to_int(parts[4], 0, 1 << 10, &v)) return fail("the run must be an index >= 0");
    m.run = static_cast<int>(v);
  }
  *out = m;
  return true;
}

nlohmann::json marks_json(const std::vector<PlacedMark>& placed) {
  nlohmann::json out = nlohmann::json::array();
  for (const PlacedMark& p : placed)
    out.push_back({{"number", p.mark.number},
                   {"panel", mark_panel_name(p.mark.panel)},
                   {"run", p.mark.run},
                   {"row", p.mark.row},
                   {"t", p.mark.t},
                   {"x", p.x},
                   {"y", p.y},
                   {"shown", p.shown}});
  return out;
}

}  // namespace shardlab::viewer
