// Run directory: where one run's files live, and who writes them.
//   <dir>/meta.json      written by create(): the caller's description + start_time + version
//   <dir>/rank<R>.jsonl  appended by each rank's Recorder (make_recorder), live
//   <dir>/summary.json   written by finish(), computed from the rank files
//   <dir>/trace.json     written by finish(), Chrome trace event format
// Every file except the live rank files is written atomically (a temporary name, then rename).
#pragma once

#include <ctime>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/base/file_io.hpp"

#include "core/trace/recorder.hpp"
#include "core/trace/summary.hpp"

namespace shardlab {

struct RunDirOptions {
  std::string dir;            // the run's directory; empty: <root>/<default_run_name(meta)>
  std::string root = "runs";  // parent of default-named runs
  bool overwrite = false;     // allow reusing a non-empty `dir` (its run files are removed first)
};

class RunDir {
 public:
  // Creates the directory and writes meta.json: `meta` (config, strategy, world_size, mesh,
  // model size, backend, dtypes: whatever the caller describes) plus "start_time" (UTC, ISO 8601),
  // "start_time_unix" and "version". Resets the trace clock: event times count from here.
  // Throws InvalidArgument when `dir` holds files and overwrite is false; IoError on I/O failure.
  // Under MPI only rank 0 creates; the others open() after a barrier.
  static RunDir create(nlohmann::json meta, const RunDirOptions& opts = {});
  // An existing run directory (made by create() in another process). Throws IoError if absent.
  static RunDir open(const std::string& dir);

  const std::string& path() const { return dir_; }
  std::string rank_path(int rank) const;
  // A recorder appending to rank<R>.jsonl.
  std::unique_ptr<Recorder> make_recorder(int rank) const;

  // Reads every rank file back, computes the summary and writes summary.json and trace.json.
  // Call once all ranks are done and their recorders flushed (or destroyed).
  RunSummary finish() const;

 private:
  explicit RunDir(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

// "<strategy>-n<world_size>-<YYYYmmdd-HHMMSS>" (local time), from meta's "strategy" and
// "world_size" when present ("run" and no -n part otherwise); unsafe path characters become '_'.
std::string default_run_name(const nlohmann::json& meta, std::time_t now);

}  // namespace shardlab
