// A synthetic run for the viewer's tests and measurements: a schedule of FSDP (full_shard) or DDP
// (no_shard) steps simulated on N ranks with a simple timing model (compute per unit, collectives
// at a fixed bandwidth that wait for the slowest rank, a comm stream per rank, prefetch of the next
// all-gather), turned into the events a Recorder would write. Also writes it as a run directory,
// all at once or a little at a time (to test live following).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "core/trace/run_reader.hpp"

namespace shardlab::viewer::testing {

struct SyntheticOptions {
  int ranks = 4;
  int steps = 10;
  int units = 6;
  std::string strategy = "full_shard";  // full_shard | no_shard
  int64_t unit_param_bytes = 8 << 20;   // a unit's full flat parameter, fp32
  int64_t unit_act_bytes = 6 << 20;     // activations a unit's forward saves
  int64_t workspace_bytes = 4 << 20;    // logits etc. around the loss
  double fwd_ms = 2.0, bwd_ms = 4.0, opt_ms = 1.5, loss_ms = 1.0;  // per unit / per step
  double comm_gbps = 10.0;  // bytes per ns: time of a collective = bytes / (comm_gbps * 1e9) s
  double jitter = 0.05;     // compute times vary by up to this fraction per rank and step
  int64_t tokens_per_rank = 4096;
  int64_t mem_limit = 0;  // written to meta.json when > 0
  // As --offload params: parameter shards and optimizer state in the host tier ("tier":"host" mem
  // events), each shard copied up before its all-gather and each reduced shard copied down after
  // its reduce-scatter (h2d / d2h spans on the copy lane). full_shard only.
  bool offload = false;
  double copy_gbps = 20.0;  // bytes per ns of a copy between the tiers
  uint32_t seed = 1;
};

RunData make_synthetic_run(const SyntheticOptions& opt, const std::string& dir = "synthetic");

// meta.json content for the options.
nlohmann::json synthetic_meta(const SyntheticOptions& opt);

// One rank's events as JSON lines in time order (the recorder's schema).
std::vector<std::pair<int64_t, std::string>> rank_lines(const RunData& run, int rank);

// Writes meta.json, rank<R>.jsonl and summary.json.
void write_run_dir(const RunData& run, const std::string& dir);

// Writes a run directory in pieces: meta.json, then events up to a time on each append_until().
class RunDirWriter {
 public:
  RunDirWriter(const RunData& run, std::string dir);
  void write_meta();
  // Appends every event with t <= t_ns to each rank's file; returns how many lines were written.
  int64_t append_until(int64_t t_ns);
  // Writes the first `chars` characters of the next line of rank `rank` without a newline (a line
  // cut short, as a reader may see mid-write); the next append_until() completes it.
  void append_partial(int rank, size_t chars);
  void write_summary();
  bool done() const;

 private:
  const RunData& run_;
  std::string dir_;
  std::vector<std::vector<std::pair<int64_t, std::string>>> lines_;
  std::vector<size_t> next_;
  std::vector<size_t> partial_;  // characters of lines_[r][next_[r]] already written
};

}  // namespace shardlab::viewer::testing
