// RunReader: reads a run directory (meta.json, rank<R>.jsonl, summary.json) into memory, and keeps
// reading as the files grow, so the viewer can follow a run live. It tolerates a run that has not
// started, a truncated last line (kept for the next poll), and files that disappear; problems are
// reported in `status`, never thrown, once the directory has been opened.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/memory/tracker.hpp"
#include "core/trace/recorder.hpp"

namespace shardlab {

// The most ranks a run directory may describe. A damaged meta.json ("world_size": 2000000000) or a
// stray rank999999.jsonl must not make the summary or the viewer size tables for millions of ranks.
constexpr int kMaxRunRanks = 4096;
// Unit indices an event may carry: [-1, kMaxRunUnits) (-1: none). A unit is what a wrap policy
// gathers together; the viewer keeps a strip per unit index, so an index of 2e9 was 48 GB.
constexpr int kMaxRunUnits = 65536;
// The most ranks a simulated run may stand for (meta.json "simulated": {"ranks": N, "rank": r}):
// a cluster spec's bound on nodes x ranks_per_node (core/device/cluster_spec.cpp).
constexpr int64_t kMaxSimulatedRanks = int64_t(1) << 24;

struct MemEvent {
  int64_t t;
  MemCategory category;
  int64_t bytes;      // signed change
  int64_t cat_total;  // the category after the change
  int64_t total;      // the rank after the change
};

struct SpanEvent {
  Lane lane;
  std::string op;  // forward, backward, optimizer, all_gather, reduce_scatter, all_reduce, ...
  int unit;
  int64_t bytes;
  DType dtype;
  int64_t t_issue, t_start, t_end, t_wait;  // t_wait -1 when none
  int64_t wait_ns = -1;  // waited for the last rank to arrive (comm spans, local backend), else -1
  int last_rank = -1;    // the world rank that arrived last, -1 when not recorded
  int64_t sent = -1;     // bytes this rank sent (comm spans; -1 in runs recorded before it was)
};

struct UnitEvent {
  int64_t t;
  int unit;
  UnitState state;
};

struct StepEvent {
  int64_t t;
  int step;
  double loss;
  int64_t tokens;
  double step_time;
};

struct MarkEvent {
  int64_t t;
  std::string text;
};

// One rank's events in file order (the order they were recorded; mem events in the tracker's
// order).
struct RankTrace {
  std::vector<MemEvent> mem;       // device memory (events without a "tier")
  std::vector<MemEvent> host_mem;  // the host tier ("tier":"host", --offload)
  std::vector<SpanEvent> spans;
  std::vector<UnitEvent> units;
  std::vector<StepEvent> steps;
  std::vector<MarkEvent> marks;
  int64_t t_last = 0;  // latest timestamp seen on this rank
};

struct RunData {
  std::string dir;
  nlohmann::json meta = nlohmann::json::object();     // empty until meta.json exists
  nlohmann::json summary = nlohmann::json::object();  // empty until summary.json exists
  std::vector<RankTrace> ranks;
  bool finished() const { return !summary.empty(); }
};

class RunReader {
 public:
  // Throws IoError if `dir` does not exist and `wait_for_start` is false.
  explicit RunReader(std::string dir, bool wait_for_start = false);
  // Reads whatever is new. Returns true when anything changed. Never throws for file problems.
  bool poll();
  const RunData& data() const { return data_; }
  // A human-readable line about the latest problem ("waiting for meta.json", "run directory
  // removed", "rank1.jsonl:57: skipped malformed line"), empty when all is well.
  // Ranks: meta.json's world_size when valid (else a problem, and none); a non-empty rank file
  // beyond it is read only while the directory has a non-empty rank file for every row it adds
  // (rank < world_size + non-empty rank files) and below kMaxRunRanks; others are skipped and
  // named.
  const std::string& status() const { return status_; }

 private:
  struct FileState {
    int64_t offset = 0;
    std::string partial;  // an incomplete last line, completed by a later poll
    int64_t line_no = 0;
  };
  // The pieces of poll(), each returning whether it changed data_. read_meta also says whether
  // meta.json is still awaited (and why, when it is there but unreadable).
  bool read_meta(const std::string& dir, bool& waiting, std::string& why);
  bool read_ranks(const std::string& dir, int world, bool& removed);
  bool read_summary(const std::string& dir);

  RunData data_;
  std::vector<FileState> files_;
  std::string status_;
  bool seen_dir_ = false;  // the directory existed at some poll
  std::string problem_;    // the latest file problem, kept until a newer one
};

// Reads a whole finished run once (tests, reports). Throws IoError naming the file on failure.
// The ranks are meta.json's world_size (an integer in [1, kMaxRunRanks]) and must agree with the
// non-empty rank files present: each one's rank below world_size, and one per rank. Without a
// world_size, the non-empty rank files must be rank0 .. rank<K-1>. Empty rank files hold nothing
// and are ignored. Integer fields must be JSON integers within range (core/base/json_get.hpp).
RunData read_run(const std::string& dir);

// One line of rank `rank`'s file added to `rt`, as both readers take each line: "" when added,
// else why not (malformed: not JSON, a field missing, mistyped or out of range, another rank's
// event, an unknown kind; impossible: a span ending before it starts, a negative total, events
// out of order, a step repeated), starting with `where` ("rank0.jsonl:12").
std::string add_run_event_line(const std::string& line, int rank, RankTrace& rt,
                               const std::string& where);

}  // namespace shardlab
