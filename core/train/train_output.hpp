// What `shardlab train` prints and records besides the step lines: the run header, the parallel
// line, the closing summary, the run's description (meta.json, and the checkpoint's `extra`) and
// the shared run directory.
#pragma once

#include <iosfwd>
#include <string>

#include <nlohmann/json.hpp>

#include "core/comm/launcher.hpp"
#include "core/train/corpus.hpp"
#include "core/train/trainer.hpp"

namespace shardlab {

// "printf" of one number, e.g. fmt("%.4f", loss).
std::string fmt(const char* f, double v);

void print_run_header(std::ostream& out, const TrainConfig& cfg, const GPTConfig& m,
                      const TokenCorpus& corpus);
void print_parallel_line(std::ostream& out, const TrainConfig& cfg, int world, const char* backend);
// Final loss, tokens/s, peak memory with its breakdown, checkpoints, run directory.
void print_run_summary(std::ostream& out, const TrainResult& r, const MemoryTracker& tracker);

// The options that shape the trajectory (steps, batch, optimizer, lr, dtypes, ...): meta.json's
// "config" and a checkpoint's extra.train.
nlohmann::json train_config_json(const TrainConfig& cfg);

// Collective: rank 0 creates the run directory (cfg.run_dir, or a default name under runs/ for
// "auto") with meta.json, broadcasts the path, and every rank returns it. `resumed_from` (empty
// when not resuming) goes into meta.json's config.
std::string open_run_dir(const TrainConfig& cfg, const GPTConfig& m, RankContext& ctx,
                         const std::string& resumed_from);

}  // namespace shardlab
