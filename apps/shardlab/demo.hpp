// `shardlab demo`: DP against FSDP. The same model trains on 4 local ranks with no_shard and with
// full_shard; a side-by-side table shows peak memory per rank by category, tokens/s and bytes
// communicated per step, and each run leaves a run directory for the viewer.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

namespace shardlab {

struct DemoOptions {
  int64_t steps = 30;
  int ranks = 4;
  std::string runs_root = "runs";  // run directories: <root>/demo-no_shard, <root>/demo-full_shard
};

// Returns 0; throws on failure like run_training.
int run_demo(const DemoOptions& opts, std::ostream& out);

}  // namespace shardlab
