// RunReader and read_run: turn a run directory's files back into events. The live reader keeps a
// byte offset and an incomplete last line per rank file, so each poll parses only what is new.
#include "core/trace/run_reader.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include "core/base/error.hpp"

namespace shardlab {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// "rank12.jsonl" -> 12; -1 for any other name.
int rank_of_file_name(const std::string& name) {
  const std::string prefix = "rank", suffix = ".jsonl";
  if (name.size() <= prefix.size() + suffix.size()) return -1;
  if (name.compare(0, prefix.size(), prefix) != 0) return -1;
  if (name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return -1;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || digits.size() > 6) return -1;
  for (char c : digits)
    if (c < '0' || c > '9') return -1;
  return std::stoi(digits);
}

Lane parse_lane(const std::string& s) {
  if (s == "compute") return Lane::compute;
  if (s == "comm") return Lane::comm;
  SL_THROW(InvalidArgument, "unknown lane '", s, "'");
}

UnitState parse_unit_state(const std::string& s) {
  for (UnitState u : {UnitState::sharded, UnitState::gathering, UnitState::unsharded,
                      UnitState::resharded})
    if (s == unit_state_name(u)) return u;
  SL_THROW(InvalidArgument, "unknown unit state '", s, "'");
}

double number_or_nan(const json& v) {
  return v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>();
}

// Adds one event line to `rt`. Returns false for a malformed line (not JSON, a missing or mistyped
// field, another rank's event). Lines of an unknown kind are ignored (a newer writer).
bool add_event_line(const std::string& line, int rank, RankTrace& rt) {
  json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return false;
  try {
    if (j.at("rank").get<int>() != rank) return false;
    const int64_t t = j.at("t").get<int64_t>();
    const std::string kind = j.at("kind").get<std::string>();
    int64_t t_seen = t;
    if (kind == "mem") {
      rt.mem.push_back({t, parse_mem_category(j.at("category").get<std::string>()),
                        j.at("bytes").get<int64_t>(), j.at("cat_total").get<int64_t>(),
                        j.at("total").get<int64_t>()});
    } else if (kind == "span") {
      SpanEvent s;
      s.lane = parse_lane(j.at("lane").get<std::string>());
      s.op = j.at("op").get<std::string>();
      s.unit = j.at("unit").get<int>();
      s.bytes = j.at("bytes").get<int64_t>();
      s.dtype = parse_dtype(j.at("dtype").get<std::string>());
      s.t_issue = j.at("t_issue").get<int64_t>();
      s.t_start = j.at("t_start").get<int64_t>();
      s.t_end = j.at("t_end").get<int64_t>();
      s.t_wait = j.at("t_wait").get<int64_t>();
      if (j.contains("wait")) {
        s.wait_ns = j.at("wait").get<int64_t>();
        s.last_rank = j.at("last").get<int>();
      }
      t_seen = std::max(t_seen, s.t_end);
      rt.spans.push_back(std::move(s));
    } else if (kind == "unit") {
      rt.units.push_back({t, j.at("unit").get<int>(),
                          parse_unit_state(j.at("state").get<std::string>())});
    } else if (kind == "step") {
      rt.steps.push_back({t, j.at("step").get<int>(), number_or_nan(j.at("loss")),
                          j.at("tokens").get<int64_t>(), number_or_nan(j.at("step_time"))});
    } else if (kind == "mark") {
      rt.marks.push_back({t, j.at("text").get<std::string>()});
    } else {
      return true;
    }
    rt.t_last = std::max(rt.t_last, t_seen);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// Parses the complete lines of `pending` into `rt` and leaves the incomplete tail in it.
// `on_bad(line_no)` is told of each malformed line. Returns the number of lines consumed.
int64_t consume_lines(std::string& pending, int rank, RankTrace& rt, int64_t& line_no,
                      const std::function<void(int64_t)>& on_bad) {
  size_t begin = 0;
  int64_t consumed = 0;
  for (;;) {
    const size_t nl = pending.find('\n', begin);
    if (nl == std::string::npos) break;
    size_t end = nl;
    if (end > begin && pending[end - 1] == '\r') --end;
    ++line_no;
    ++consumed;
    if (end > begin && !add_event_line(pending.substr(begin, end - begin), rank, rt))
      on_bad(line_no);
    begin = nl + 1;
  }
  pending.erase(0, begin);
  return consumed;
}

// Bytes [offset, end of file) of `path`; false when the file cannot be opened.
bool read_from(const fs::path& path, int64_t offset, std::string& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  f.seekg(offset);
  if (!f) return false;
  out.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return true;
}

// Rank files present in `dir`, as (rank, path).
std::vector<std::pair<int, fs::path>> list_rank_files(const fs::path& dir, std::error_code& ec) {
  std::vector<std::pair<int, fs::path>> out;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const int r = rank_of_file_name(it->path().filename().string());
    if (r >= 0) out.emplace_back(r, it->path());
  }
  return out;
}

int world_size_of(const json& meta) {
  auto it = meta.find("world_size");
  if (it != meta.end() && it->is_number_integer()) return std::max(0, it->get<int>());
  return 0;
}

}  // namespace

// ---- RunReader ----------------------------------------------------------------------------------

RunReader::RunReader(std::string dir, bool wait_for_start) {
  data_.dir = std::move(dir);
  std::error_code ec;
  if (!wait_for_start && !fs::is_directory(data_.dir, ec))
    SL_THROW(IoError, data_.dir, ": no such run directory");
}

bool RunReader::poll() {
  bool changed = false;
  const fs::path dir(data_.dir);
  try {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      status_ = seen_dir_ ? "run directory removed: " + data_.dir
                          : "waiting for run directory " + data_.dir;
      return false;
    }
    seen_dir_ = true;

    bool waiting_for_meta = false;
    if (data_.meta.empty()) {
      std::string text;
      if (read_from(dir / "meta.json", 0, text)) {
        json m = json::parse(text, nullptr, false);
        if (!m.is_discarded() && m.is_object()) {
          data_.meta = std::move(m);
          changed = true;
        } else {
          problem_ = "meta.json: malformed, will retry";
          waiting_for_meta = true;
        }
      } else {
        waiting_for_meta = true;
      }
    }

    const auto rank_files = list_rank_files(dir, ec);
    if (ec) {
      status_ = "run directory removed: " + data_.dir;
      return changed;
    }
    size_t n = static_cast<size_t>(world_size_of(data_.meta));
    for (const auto& rf : rank_files) n = std::max(n, static_cast<size_t>(rf.first) + 1);
    if (data_.ranks.size() < n) {
      data_.ranks.resize(n);
      files_.resize(n);
      changed = true;
    }

    for (const auto& [rank, path] : rank_files) {
      FileState& fsx = files_[rank];
      RankTrace& rt = data_.ranks[rank];
      const std::string name = path.filename().string();
      const auto size = fs::file_size(path, ec);
      if (ec) continue;  // vanished between listing and reading: next poll says so
      if (static_cast<int64_t>(size) < fsx.offset) {
        // Replaced or truncated by someone else: start this rank over.
        rt = RankTrace();
        fsx = FileState();
        problem_ = name + ": file shrank, read again from the start";
        changed = true;
      }
      if (static_cast<int64_t>(size) == fsx.offset) continue;
      std::string fresh;
      if (!read_from(path, fsx.offset, fresh)) continue;
      fsx.offset += static_cast<int64_t>(fresh.size());
      fsx.partial += fresh;
      consume_lines(fsx.partial, rank, rt, fsx.line_no, [&](int64_t line) {
        problem_ = name + ":" + std::to_string(line) + ": skipped malformed line";
      });
      changed = true;
    }

    if (data_.summary.empty()) {
      std::string text;
      if (read_from(dir / "summary.json", 0, text)) {
        json s = json::parse(text, nullptr, false);
        if (!s.is_discarded() && s.is_object() && !s.empty()) {
          data_.summary = std::move(s);
          changed = true;
        }
      }
    }
    if (!waiting_for_meta)
      status_ = problem_;
    else
      status_ = problem_.empty() ? "waiting for meta.json" : "waiting for meta.json; " + problem_;
  } catch (const std::exception& e) {
    status_ = std::string("reading ") + data_.dir + ": " + e.what();
  }
  return changed;
}

// ---- read_run -----------------------------------------------------------------------------------

RunData read_run(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) SL_THROW(IoError, dir, ": no such run directory");
  RunData run;
  run.dir = dir;
  const fs::path meta_path = fs::path(dir) / "meta.json";
  std::string text;
  if (!read_from(meta_path, 0, text))
    SL_THROW(IoError, meta_path.string(), ": missing (not a run directory, or the run never started)");
  run.meta = json::parse(text, nullptr, false);
  if (run.meta.is_discarded() || !run.meta.is_object())
    SL_THROW(IoError, meta_path.string(), ": not a JSON object");

  const auto rank_files = list_rank_files(dir, ec);
  if (ec) SL_THROW(IoError, dir, ": cannot list: ", ec.message());
  size_t n = static_cast<size_t>(world_size_of(run.meta));
  for (const auto& rf : rank_files) n = std::max(n, static_cast<size_t>(rf.first) + 1);
  run.ranks.resize(n);
  for (const auto& [rank, path] : rank_files) {
    std::string pending;
    if (!read_from(path, 0, pending)) SL_THROW(IoError, path.string(), ": cannot read");
    int64_t line_no = 0;
    consume_lines(pending, rank, run.ranks[rank], line_no, [&](int64_t line) {
      SL_THROW(IoError, path.string(), ":", line, ": malformed event line");
    });
    // A run killed mid-write leaves an incomplete last line: what came before is still valid.
  }

  const fs::path summary_path = fs::path(dir) / "summary.json";
  if (read_from(summary_path, 0, text)) {
    run.summary = json::parse(text, nullptr, false);
    if (run.summary.is_discarded() || !run.summary.is_object())
      SL_THROW(IoError, summary_path.string(), ": not a JSON object");
  }
  return run;
}

}  // namespace shardlab
