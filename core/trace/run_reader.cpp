// RunReader and read_run: turn a run directory's files back into events. The live reader keeps a
// byte offset and an incomplete last line per rank file, so each poll parses only what is new.
#include "core/trace/run_reader.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>

#include "core/base/error.hpp"
#include "core/base/file_io.hpp"
#include "core/base/json_get.hpp"
#include "core/base/json_read.hpp"
#include "core/base/virtual_clock.hpp"

namespace shardlab {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// "rank12.jsonl" -> 12; -1 for any other name (rank012.jsonl, rank1234567.jsonl).
int rank_of_file_name(const std::string& name) {
  const std::string prefix = "rank", suffix = ".jsonl";
  if (name.size() <= prefix.size() + suffix.size()) return -1;
  if (name.compare(0, prefix.size(), prefix) != 0) return -1;
  if (name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return -1;
  const std::string digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || digits.size() > 6) return -1;
  if (digits.size() > 1 && digits[0] == '0') return -1;  // rank01.jsonl would read rank 1 twice
  for (char c : digits)
    if (c < '0' || c > '9') return -1;
  return std::stoi(digits);
}

Lane parse_lane(const std::string& s) {
  if (s == "compute") return Lane::compute;
  if (s == "comm") return Lane::comm;
  if (s == "copy") return Lane::copy;
  SL_THROW(InvalidArgument, "unknown lane '", s, "'");
}

UnitState parse_unit_state(const std::string& s) {
  for (UnitState u :
       {UnitState::sharded, UnitState::gathering, UnitState::unsharded, UnitState::resharded})
    if (s == unit_state_name(u)) return u;
  SL_THROW(InvalidArgument, "unknown unit state '", s, "'");
}

double number_or_nan(const json& v) {
  return v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>();
}

// Bounds on an event's integers. A file is user input: 1.5 or 1e30 where an integer belongs is a
// malformed line, not a truncated value, and the bounds keep the summary's differences and sums
// of times and bytes far from int64 overflow (2^60 ns is 36 years; 2^60 bytes is 1 EiB). Times
// are never negative: the recorder's clock starts at the run's start (a simulated run's virtual
// clock at 0, below kMaxVirtualNs, the same bound).
constexpr int64_t kMaxTime = kMaxVirtualNs;
constexpr int64_t kMaxBytes = int64_t(1) << 60;
constexpr int64_t kMaxInt = std::numeric_limits<int>::max();

std::string impossible(const std::string& where, const std::string& why) {
  return where + ": impossible event (" + why + ")";
}

// What a writer guarantees and a reader can check, beyond each field's range (so a summary never
// computes on what cannot be): "" when `e` may follow `rt`'s events, else why not.
std::string mem_problem(const std::vector<MemEvent>& before, const MemEvent& e) {
  if (e.cat_total < 0 || e.total < 0)
    return "negative memory total: cat_total " + std::to_string(e.cat_total) + ", total " +
           std::to_string(e.total);
  if (e.cat_total > e.total)
    return "the category's total " + std::to_string(e.cat_total) + " exceeds the rank's total " +
           std::to_string(e.total);
  // The tracker emits its changes in order, under its lock: a replay depends on that order.
  if (!before.empty() && e.t < before.back().t)
    return "t " + std::to_string(e.t) + " before the previous memory event's t " +
           std::to_string(before.back().t) + ": lines out of order";
  return "";
}

std::string span_problem(const SpanEvent& s) {
  if (s.t_start < s.t_issue || s.t_end < s.t_start)
    return "a span must satisfy t_issue <= t_start <= t_end, not " + std::to_string(s.t_issue) +
           ", " + std::to_string(s.t_start) + ", " + std::to_string(s.t_end);
  if (s.t_wait != -1 && s.t_wait < s.t_issue)
    return "t_wait " + std::to_string(s.t_wait) + " before t_issue " + std::to_string(s.t_issue);
  return "";
}

// Parses the complete lines of `pending` into `rt` and leaves the incomplete tail in it.
// `on_bad(line_no, why)` is told of each malformed line. Returns the number of lines consumed.
int64_t consume_lines(std::string& pending, int rank, RankTrace& rt, int64_t& line_no,
                      const std::string& name,
                      const std::function<void(int64_t, const std::string&)>& on_bad) {
  size_t begin = 0;
  int64_t consumed = 0;
  for (;;) {
    const size_t nl = pending.find('\n', begin);
    if (nl == std::string::npos) break;
    size_t end = nl;
    if (end > begin && pending[end - 1] == '\r') --end;
    ++line_no;
    ++consumed;
    if (end > begin) {
      const std::string why = add_run_event_line(pending.substr(begin, end - begin), rank, rt,
                                                 name + ":" + std::to_string(line_no));
      if (!why.empty()) on_bad(line_no, why);
    }
    begin = nl + 1;
  }
  pending.erase(0, begin);
  return consumed;
}

// Bytes [offset, end of file) of `path` into `out`. Returns "" on success, else why not, for a
// message that names the file: a directory (or a FIFO, which would block) where a file belongs
// is reported, never read (read_file_from opens regular files only, without blocking).
std::string read_from(const fs::path& path, int64_t offset, std::string& out) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return "missing";
  if (fs::is_directory(st)) return "is a directory, not a file";
  if (!fs::is_regular_file(st)) return "is not a regular file";
  try {
    out = read_file_from(path.string(), offset, std::numeric_limits<int64_t>::max());
  } catch (const std::exception& e) {
    return std::string("cannot read: ") + e.what();
  }
  return "";
}

struct RankFile {
  int rank;
  fs::path path;
  bool regular;  // a regular file (not a directory or a FIFO named like a rank file)
  int64_t size;  // 0 unless regular
};

// Rank files present in `dir`, sorted by rank.
std::vector<RankFile> list_rank_files(const fs::path& dir, std::error_code& ec) {
  std::vector<RankFile> out;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const int r = rank_of_file_name(it->path().filename().string());
    if (r < 0) continue;
    std::error_code e2;
    const bool regular = fs::is_regular_file(it->path(), e2);
    const auto size = regular ? fs::file_size(it->path(), e2) : 0;
    out.push_back({r, it->path(), regular && !e2, regular && !e2 ? static_cast<int64_t>(size) : 0});
  }
  std::sort(out.begin(), out.end(),
            [](const RankFile& a, const RankFile& b) { return a.rank < b.rank; });
  return out;
}

int64_t count_non_empty(const std::vector<RankFile>& files) {
  return std::count_if(files.begin(), files.end(), [](const RankFile& f) { return f.size > 0; });
}

// meta.json's world_size: 0 when absent; IoError naming `where` and the field when it is not an
// integer in [1, kMaxRunRanks].
int meta_world_size(const json& meta, const std::string& where) {
  if (!meta.is_object() || !meta.contains("world_size")) return 0;
  return static_cast<int>(json_int(meta, "world_size", where, 1, kMaxRunRanks));
}

}  // namespace

// Adds one event line to `rt`. Returns "" when the line was added, else why it is malformed (not
// JSON, a missing, mistyped or out-of-range field, another rank's event, an unknown kind) or
// impossible (a span ending before it starts, a negative total, events out of order, a step
// repeated), starting with `where` ("rank0.jsonl:12").
std::string add_run_event_line(const std::string& line, int rank, RankTrace& rt,
                               const std::string& where) {
  const std::string deep = json_depth_problem(line);
  if (!deep.empty()) return where + ": malformed event line (" + deep + ")";
  json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return where + ": malformed event line (not a JSON object)";
  try {
    const int64_t line_rank = json_int(j, "rank", where, 0, kMaxInt);
    if (line_rank != rank)
      return where + ": malformed event line (an event of rank " + std::to_string(line_rank) + ")";
    const int64_t t = json_int(j, "t", where, 0, kMaxTime);
    const std::string kind = json_string(j, "kind", where);
    int64_t t_seen = t;
    if (kind == "mem") {
      // "tier": "host" for the host-memory tier (--offload); absent in device events and runs
      // recorded before there was a host tier.
      bool host = false;
      if (j.contains("tier")) {
        const std::string tier = json_string(j, "tier", where);
        if (tier != "host" && tier != "device")
          return where + ": malformed event line (unknown memory tier '" + tier + "')";
        host = tier == "host";
      }
      std::vector<MemEvent>& mem = host ? rt.host_mem : rt.mem;
      const MemEvent e{t, parse_mem_category(json_string(j, "category", where)),
                       json_int(j, "bytes", where, -kMaxBytes, kMaxBytes),
                       json_int(j, "cat_total", where, -kMaxBytes, kMaxBytes),
                       json_int(j, "total", where, -kMaxBytes, kMaxBytes)};
      const std::string bad = mem_problem(mem, e);
      if (!bad.empty()) return impossible(where, bad);
      mem.push_back(e);
    } else if (kind == "span") {
      SpanEvent s;
      s.lane = parse_lane(json_string(j, "lane", where));
      s.op = json_string(j, "op", where);
      s.unit = static_cast<int>(json_int(j, "unit", where, -1, kMaxRunUnits - 1));
      s.bytes = json_int(j, "bytes", where, 0, kMaxBytes);
      s.dtype = parse_dtype(json_string(j, "dtype", where));
      s.t_issue = json_int(j, "t_issue", where, 0, kMaxTime);
      s.t_start = json_int(j, "t_start", where, 0, kMaxTime);
      s.t_end = json_int(j, "t_end", where, 0, kMaxTime);
      s.t_wait = json_int(j, "t_wait", where, -1, kMaxTime);
      const std::string bad = span_problem(s);
      if (!bad.empty()) return impossible(where, bad);
      if (j.contains("wait")) {
        s.wait_ns = json_int(j, "wait", where, 0, kMaxTime);
        s.last_rank = static_cast<int>(json_int(j, "last", where, 0, kMaxInt));
      }
      if (j.contains("sent")) s.sent = json_int(j, "sent", where, 0, kMaxBytes);
      t_seen = std::max(t_seen, s.t_end);
      rt.spans.push_back(std::move(s));
    } else if (kind == "unit") {
      rt.units.push_back({t, static_cast<int>(json_int(j, "unit", where, -1, kMaxRunUnits - 1)),
                          parse_unit_state(json_string(j, "state", where))});
    } else if (kind == "step") {
      const StepEvent e{t, static_cast<int>(json_int(j, "step", where, 0, kMaxInt)),
                        number_or_nan(j.at("loss")), json_int(j, "tokens", where, 0, kMaxBytes),
                        number_or_nan(j.at("step_time"))};
      // A rank runs each step once, in order: a repeated step would be counted twice (tokens
      // per step halved), one out of order would move the step table.
      if (!rt.steps.empty() && e.step <= rt.steps.back().step)
        return impossible(where, "step " + std::to_string(e.step) + " after step " +
                                     std::to_string(rt.steps.back().step) +
                                     ": a rank's steps only increase");
      if (e.step_time < 0 || std::isinf(e.step_time))
        return impossible(
            where, "step_time " + j.at("step_time").dump() + " (a duration: finite and >= 0)");
      rt.steps.push_back(e);
    } else if (kind == "mark") {
      rt.marks.push_back({t, json_string(j, "text", where)});
    } else {
      // Never dropped silently: a newer writer's kind is named, as any line this reader cannot
      // take.
      return where + ": malformed event line (unknown kind '" + kind.substr(0, 64) + "')";
    }
    rt.t_last = std::max(rt.t_last, t_seen);
    return "";
  } catch (const IoError& e) {
    return e.what();  // json_int / json_string: already names where and the field
  } catch (const std::exception& e) {
    return where + ": malformed event line (" + e.what() + ")";
  }
}

// ---- RunReader ----------------------------------------------------------------------------------

RunReader::RunReader(std::string dir, bool wait_for_start) {
  data_.dir = std::move(dir);
  std::error_code ec;
  if (!wait_for_start && !fs::is_directory(data_.dir, ec))
    SL_THROW(IoError, data_.dir, ": no such run directory");
}

bool RunReader::read_meta(const std::string& dir_name, bool& waiting, std::string& why) {
  waiting = false;
  if (!data_.meta.empty()) return false;
  std::string text;
  const std::string err = read_from(fs::path(dir_name) / "meta.json", 0, text);
  if (!err.empty()) {
    if (err != "missing") why = "meta.json: " + err;
    waiting = true;
    return false;
  }
  json m = json_depth_problem(text).empty() ? json::parse(text, nullptr, false)
                                            : json(json::value_t::discarded);
  if (m.is_discarded() || !m.is_object()) {
    problem_ = "meta.json: malformed, will retry";
    waiting = true;
    return false;
  }
  data_.meta = std::move(m);
  return true;
}

bool RunReader::read_ranks(const std::string& dir_name, int world, bool& removed) {
  bool changed = false;
  std::error_code ec;
  const auto rank_files = list_rank_files(fs::path(dir_name), ec);
  removed = static_cast<bool>(ec);
  if (ec) return false;
  // Rows beyond world_size each need a non-empty file: a stray rank999999.jsonl adds no rows.
  const int64_t rank_limit = std::min<int64_t>(kMaxRunRanks, world + count_non_empty(rank_files));
  std::vector<const RankFile*> accepted;
  for (const RankFile& rf : rank_files) {
    const std::string name = rf.path.filename().string();
    const bool known = static_cast<size_t>(rf.rank) < files_.size();
    if (!rf.regular) {
      problem_ = name + ": is not a regular file, skipped";
    } else if (rf.size == 0 && !known) {
      // Nothing to read yet (and nothing to size tables by).
    } else if (rf.rank >= rank_limit && !known) {
      problem_ = name + ": rank " + std::to_string(rf.rank) + " is beyond world_size " +
                 std::to_string(world) + " and the rank files present; skipped";
    } else {
      accepted.push_back(&rf);
    }
  }
  size_t n = static_cast<size_t>(world);
  for (const RankFile* rf : accepted) n = std::max(n, static_cast<size_t>(rf->rank) + 1);
  if (data_.ranks.size() < n) {
    data_.ranks.resize(n);
    files_.resize(n);
    changed = true;
  }

  for (const RankFile* rf : accepted) {
    const int rank = rf->rank;
    FileState& fsx = files_[rank];
    RankTrace& rt = data_.ranks[rank];
    const std::string name = rf->path.filename().string();
    const auto size = fs::file_size(rf->path, ec);
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
    if (!read_from(rf->path, fsx.offset, fresh).empty()) continue;
    fsx.offset += static_cast<int64_t>(fresh.size());
    fsx.partial += fresh;
    consume_lines(fsx.partial, rank, rt, fsx.line_no, name, [&](int64_t line, const std::string&) {
      problem_ = name + ":" + std::to_string(line) + ": skipped malformed line";
    });
    changed = true;
  }
  return changed;
}

bool RunReader::read_summary(const std::string& dir_name) {
  if (!data_.summary.empty()) return false;
  std::string text;
  if (!read_from(fs::path(dir_name) / "summary.json", 0, text).empty()) return false;
  json s = json_depth_problem(text).empty() ? json::parse(text, nullptr, false)
                                            : json(json::value_t::discarded);
  if (s.is_discarded() || !s.is_object() || s.empty()) return false;
  data_.summary = std::move(s);
  return true;
}

bool RunReader::poll() {
  bool changed = false;
  try {
    std::error_code ec;
    if (!fs::is_directory(fs::path(data_.dir), ec)) {
      status_ = seen_dir_ ? "run directory removed: " + data_.dir
                          : "waiting for run directory " + data_.dir;
      return false;
    }
    seen_dir_ = true;

    bool waiting_for_meta = false;
    std::string meta_why;  // why meta.json could not be read, when it is there
    changed = read_meta(data_.dir, waiting_for_meta, meta_why);
    int world = 0;
    try {
      world = meta_world_size(data_.meta, "meta.json");
    } catch (const IoError& e) {
      problem_ = e.what();  // ranks then come from the rank files alone
    }
    bool removed = false;
    changed = read_ranks(data_.dir, world, removed) || changed;
    if (removed) {
      status_ = "run directory removed: " + data_.dir;
      return changed;
    }
    changed = read_summary(data_.dir) || changed;
    if (!waiting_for_meta) {
      status_ = problem_;
    } else {
      status_ = "waiting for meta.json";
      if (!meta_why.empty()) status_ += " (" + meta_why + ")";
      if (!problem_.empty()) status_ += "; " + problem_;
    }
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
  std::string why = read_from(meta_path, 0, text);
  if (why == "missing")
    SL_THROW(IoError, meta_path.string(),
             ": missing (not a run directory, or the run never started)");
  if (!why.empty()) SL_THROW(IoError, meta_path.string(), ": ", why);
  run.meta = parse_json_strict(text, meta_path.string());
  if (!run.meta.is_object()) SL_THROW(IoError, meta_path.string(), ": not a JSON object");
  const int world = meta_world_size(run.meta, meta_path.string());
  // A simulated run stands for `ranks` ranks and holds rank `rank`'s timeline.
  if (run.meta.contains("simulated")) {
    const json& sim = run.meta.at("simulated");
    const std::string where = meta_path.string() + ": simulated";
    if (!sim.is_object()) SL_THROW(IoError, where, ": must be an object, not ", sim.dump());
    const int64_t n = json_int(sim, "ranks", where, 1, kMaxSimulatedRanks);
    json_int(sim, "rank", where, 0, n - 1);
  }

  const auto rank_files = list_rank_files(dir, ec);
  if (ec) SL_THROW(IoError, dir, ": cannot list: ", ec.message());
  const int64_t non_empty = count_non_empty(rank_files);
  size_t n = static_cast<size_t>(world);
  for (const RankFile& rf : rank_files) {
    if (!rf.regular) SL_THROW(IoError, rf.path.string(), ": is not a regular file (a directory?)");
    if (rf.size == 0) continue;  // holds nothing
    if (world > 0 && rf.rank >= world)
      SL_THROW(IoError, rf.path.string(), ": rank ", rf.rank, " is outside meta.json's world_size ",
               world);
    if (world == 0 && rf.rank >= non_empty)
      SL_THROW(IoError, rf.path.string(), ": rank ", rf.rank, ", but the directory holds only ",
               non_empty, " non-empty rank files and meta.json has no world_size");
    n = std::max(n, static_cast<size_t>(rf.rank) + 1);
  }
  if (world > non_empty)
    SL_THROW(IoError, meta_path.string(), ": world_size ", world, ", but the directory holds ",
             non_empty, " non-empty rank files");
  run.ranks.resize(n);
  for (const RankFile& rf : rank_files) {
    if (rf.size == 0) continue;
    std::string pending;
    why = read_from(rf.path, 0, pending);
    if (!why.empty()) SL_THROW(IoError, rf.path.string(), ": ", why);
    int64_t line_no = 0;
    consume_lines(pending, rf.rank, run.ranks[rf.rank], line_no, rf.path.string(),
                  [&](int64_t, const std::string& bad) {
                    throw IoError(bad);  // complete already: names the file, line and field
                  });
    // A run killed mid-write leaves an incomplete last line: what came before is still valid.
  }

  const fs::path summary_path = fs::path(dir) / "summary.json";
  why = read_from(summary_path, 0, text);
  if (why.empty()) {
    run.summary = parse_json_strict(text, summary_path.string());
    if (!run.summary.is_object()) SL_THROW(IoError, summary_path.string(), ": not a JSON object");
  } else if (why != "missing") {
    SL_THROW(IoError, summary_path.string(), ": ", why);
  }
  return run;
}

}  // namespace shardlab
