// `shardlab plan`: the memory planner as a command. Prints, per strategy, the persistent bytes per
// rank by category, the transient at the step's peak and whether it fits a capacity.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "core/fsdp/engine_config.hpp"
#include "core/fsdp/strategy.hpp"

namespace shardlab {

struct PlanCommandOptions {
  std::string model = "small";  // a GPTConfig preset; ignored when params > 0
  int64_t params = 0;           // Psi for a states-only plan (no model: no transient part)
  int ranks = 4;
  // The engine's settings, as `shardlab train` takes them; each listed strategy replaces
  // engine.strategy in turn. engine.hybrid_group 0: a group of 2 when N is even, else N.
  EngineConfig engine;
  std::vector<Strategy> strategies;  // empty: all five
  int batch = 4;                     // B per rank per micro-batch
  int seq = 0;                       // T (0: the model's max_seq_len)
  int accum = 1;
  int64_t capacity = 0;  // bytes per rank, 0 = none
  bool decimal = false;  // GB (1e9 bytes, the ZeRO paper's unit) instead of MiB
};

// Prints the plan to `out`; returns 0, or 2 when a capacity is given and no listed strategy fits.
int plan_command(const PlanCommandOptions& opts, std::ostream& out);

}  // namespace shardlab
