// Everything the viewer draws for one run, derived from the reader's RunData: per rank the memory
// series, Gantt bars, unit strips and exposed communication; the run's steps; and a summary
// (peaks by category, tokens/s, bytes and bandwidth by collective, overlap). Rebuilt after each
// poll that brought new events; holds indices into the RunData, not copies of its strings.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/trace/stragglers.hpp"

#include "core/trace/run_reader.hpp"
#include "viewer/model/gantt.hpp"
#include "viewer/model/intervals.hpp"
#include "viewer/model/memory_series.hpp"
#include "viewer/model/ops.hpp"
#include "viewer/model/steps.hpp"
#include "viewer/model/unit_strips.hpp"

namespace shardlab::viewer {

struct RunInfo {
  std::string dir;
  std::string name;       // meta "name", else the directory's last component
  std::string strategy;   // meta "strategy", may be empty
  std::string backend;    // meta "backend", may be empty
  int world = 0;          // meta "world_size" (or "world"), else the number of rank files
  int64_t mem_limit = 0;  // meta "mem_limit" in bytes (number or "512MiB"); 0 = no capacity line
  // meta "units"[u].name: what FSDP unit u holds ("root", "blocks 0-1", "block 3 attn"), as the
  // run's wrap policy made them; empty when meta.json does not say (older runs).
  std::vector<std::string> unit_names;
  static constexpr size_t kMaxUnitNames = 65536;
  // A simulated run (meta "simulated", shardlab simulate): the ranks it stands for and the
  // cluster; 0 and empty for a measured run. Its times are predictions, and the name says so.
  int simulated_ranks = 0;  // a simulated run: the ranks it stands for (its file holds one)
  std::string cluster;
  // The ranks of the job whose collectives the run recorded: busbw's n (nccl-tests' factor). A
  // simulated run's file holds one rank of `simulated_ranks`; with n = 1 every busbw read 0.
  int job_ranks() const { return simulated_ranks > 0 ? simulated_ranks : world; }
};
RunInfo read_run_info(const RunData& run);
// "unit 3: block 2" (or "unit 3" when the run does not name its units).
std::string unit_label(const RunInfo& info, int unit);

struct OpStats {
  int64_t count = 0;
  int64_t bytes = 0;    // summed over spans: the collectives' buffer sizes (busbw's base)
  int64_t sent = 0;     // what the ranks sent (ring traffic); -1 when a span does not say
  int64_t ns = 0;       // summed span durations
  Bandwidth bandwidth;  // of the totals: bytes / ns, times the bus factor
};

struct RankModel {
  MemorySeries mem;
  MemorySeries host_mem;  // the host tier (--offload; empty without), apart from device memory
  RankBars bars;
  UnitStrips units;
  ExposedComm exposed;
  std::array<OpStats, kNumOpKinds> ops{};
  int64_t t_last = 0;
};

// The run's figures the summary panel shows (not core/trace's RunSummary, which summary.json
// holds: these are computed from the loaded events, and follow a live run).
struct SummaryFigures {
  int n_steps = 0;               // steps every rank reported
  bool warmup_excluded = false;  // the first of them left out of the two figures below (> 2 steps)
  double tokens_per_s = 0;       // all ranks' tokens / sum of step times, as `shardlab summary`
  double mean_step_s = 0;        // a step's time is its slowest rank's step_time
  double last_loss = 0;
  std::array<OpStats, kNumOpKinds> ops{};  // summed over ranks
  int64_t comm_ns = 0, exposed_ns = 0;     // summed over ranks
  double overlap() const {
    return comm_ns > 0 ? 1.0 - static_cast<double>(exposed_ns) / comm_ns : 1.0;
  }
  int64_t max_peak = 0;        // highest per-rank peak total
  StragglerReport stragglers;  // per-rank wait for the last rank, slowest rank per step
};

struct RunModel {
  RunInfo info;
  std::vector<RankModel> ranks;
  std::vector<StepInfo> steps;
  SummaryFigures summary;
  int64_t t_last = 0;  // latest event time over ranks
  // --offload: some rank has host-tier memory events (a host memory row per rank) or copy spans
  // between the tiers (a copy lane per rank); both false otherwise, and nothing extra is drawn.
  bool has_host_mem = false;
  bool has_copies = false;
  int64_t host_max_peak = 0;  // highest per-rank host-tier peak: the host rows' own scale
  bool finished = false;
  int64_t n_events = 0;
  // Where the whole-run view ends: t_last, unless events lie far beyond the steps (more than 10x
  // the steps' time, and 10 s, after the last step's end: a damaged or hostile time, which made
  // a 56 ms run one pixel wide). Those are counted, and the run's status names them.
  int64_t t_view = 0;
  int64_t n_beyond = 0;        // events after t_view's bound
  int64_t t_beyond_first = 0;  // the earliest of them
};
// "2 events far beyond the last step (from t = 5.8e+08 s): zoom out to see them", or "".
std::string beyond_note(const RunModel& m);

RunModel build_run_model(const RunData& run);

}  // namespace shardlab::viewer
