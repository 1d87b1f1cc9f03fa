#include "core/trace/flight_report.hpp"

#include <algorithm>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "core/base/error.hpp"
#include "core/base/file_io.hpp"
#include "core/base/json_get.hpp"
#include "core/base/json_read.hpp"

namespace shardlab {

namespace {

using nlohmann::json;

// A flight record is 64 collectives per rank; 64 MiB holds thousands of ranks.
constexpr int64_t kMaxFlightFileBytes = int64_t(64) << 20;

// "#25 all_gather unit 1 step 3 (16662 x f32, 3 ranks)" from one record of "collectives", as the
// communicator describes it (core/comm/flight_recorder.cpp, describe).
std::string describe_record(const json& c, const std::string& where) {
  const std::string op = json_string(c, "op", where);
  std::string s = "#" + std::to_string(json_int(c, "seq", where, 0)) + " " + op;
  const int64_t unit = json_int(c, "unit", where, -1);
  if (unit >= 0) s += " unit " + std::to_string(unit);
  s += " step " + std::to_string(json_int(c, "step", where, -1));
  const int64_t group = json_int(c, "group_size", where, 0);
  if (op != "barrier" && op != "split" && group > 0)
    s += " (" + std::to_string(json_int(c, "count", where, 0)) + " x " +
         json_string(c, "dtype", where) + ", " + std::to_string(group) + " ranks)";
  return s;
}

// What a watchdog's entry says the rank was doing: its oldest collective still in flight, else the
// last one it finished (as core/comm/flight_file.cpp says it for a rank ended with the job).
std::string doing_from_records(const json& records, const std::string& where) {
  if (!records.is_array()) SL_THROW(IoError, where, ": field 'collectives' must be an array");
  for (const json& c : records)  // the oldest still in flight: collectives complete in order
    if (json_string(c, "state", where) == "issued")
      return "waiting in " + describe_record(c, where);
  for (auto it = records.rbegin(); it != records.rend(); ++it)
    if (json_string(*it, "state", where) == "done")
      return "busy outside collectives since " + describe_record(*it, where);
  return "busy before its first collective";
}

}  // namespace

std::optional<FlightReport> read_flight_report(const std::string& run_dir) {
  const std::string path = run_dir + "/flight.json";
  if (!path_exists(path)) return std::nullopt;
  const json j = parse_json_strict(read_text_file(path, kMaxFlightFileBytes), path);
  FlightReport f;
  f.path = path;
  f.reason = json_string(j, "reason", path);
  f.backend = j.contains("backend") ? json_string(j, "backend", path) : "";
  if (!j.contains("ranks") || !j.at("ranks").is_array())
    SL_THROW(IoError, path, ": field 'ranks' must be an array");
  std::set<int> seen;
  for (size_t i = 0; i < j.at("ranks").size(); ++i) {
    const json& e = j.at("ranks")[i];
    const std::string where = path + ": ranks[" + std::to_string(i) + "]";
    FlightRank r;
    r.rank = static_cast<int>(json_int(e, "rank", where, 0, (int64_t(1) << 24) - 1));
    if (!seen.insert(r.rank).second)
      SL_THROW(IoError, where, ": rank ", r.rank, " is listed twice");
    if (e.contains("answered") && e.at("answered") == false) {
      r.answered = false;
    } else {
      r.step = static_cast<int>(json_int(e, "step", where, -1, std::numeric_limits<int>::max()));
      r.doing = e.contains("doing") ? json_string(e, "doing", where)
                                    : doing_from_records(e.value("collectives", json()), where);
      if (e.contains("terminated_by")) r.ended_by = json_string(e, "terminated_by", where);
    }
    f.ranks.push_back(std::move(r));
  }
  std::sort(f.ranks.begin(), f.ranks.end(),
            [](const FlightRank& a, const FlightRank& b) { return a.rank < b.rank; });
  return f;
}

void print_flight_report(const FlightReport& f, int world_size, std::ostream& os) {
  const std::string first_line = f.reason.substr(0, f.reason.find('\n'));
  os << "how the run ended (" << f.path << "): " << first_line << "\n";
  size_t next = 0;
  auto line = [&](const FlightRank& r) {
    os << "  rank " << r.rank << ": ";
    if (!r.answered) {
      os << "did not answer the watchdog's probe (hung, or computing outside any collective)\n";
      return;
    }
    if (r.step >= 0) os << "(step " << r.step << ") ";
    if (!r.ended_by.empty()) os << "ended by " << r.ended_by << " while ";
    os << r.doing << "\n";
  };
  for (int rank = 0; rank < world_size; ++rank) {  // f.ranks is sorted, each rank once
    if (next < f.ranks.size() && f.ranks[next].rank == rank) {
      line(f.ranks[next++]);
    } else {
      os << "  rank " << rank << ": not in the file (the rank that ended first, or one killed "
         << "before it could write)\n";
    }
  }
  while (next < f.ranks.size()) line(f.ranks[next++]);
}

}  // namespace shardlab
