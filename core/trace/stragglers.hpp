// Straggler and imbalance monitoring, from a run's recorded events: how long each rank waited in
// collectives for the last rank to arrive, which rank was the slowest in each step, and how far
// the ranks' memory peaks differ. On the local backend the waits are exact (the rendezvous
// records them: "wait" on comm spans). On MPI and NCCL they are estimates: a collective's time
// from issue (or from the wait, for async ones) to completion, minus the shortest time any rank
// took for a collective of the same op and size (the transfer alone).
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardlab {

struct RunData;

struct RankWait {
  int rank = 0;
  int64_t wait_ns = 0;      // summed over its collectives
  int64_t collectives = 0;  // comm spans with a wait
  int slowest_steps = 0;    // steps in which this rank was the slowest
};

struct StepStraggler {
  int step = 0;
  int slowest_rank = -1;        // the rank that waited least: the others waited for it
  double others_wait_ns = 0;    // mean wait of the other ranks in this step
  int64_t slowest_wait_ns = 0;  // the slowest rank's own wait in this step
};

struct StragglerReport {
  bool estimated = false;  // waits estimated from durations (no exact "wait" recorded)
  std::vector<RankWait> ranks;
  std::vector<StepStraggler> steps;
  // Memory imbalance: the ranks' peak totals (padding and hybrid groups make them differ).
  int64_t peak_max = 0, peak_min = 0;
  int peak_max_rank = -1, peak_min_rank = -1;
  bool empty() const { return ranks.empty(); }
};

// peaks: each rank's peak total bytes (RankSummary::peak_total), by rank.
StragglerReport compute_stragglers(const RunData& run, const std::vector<int64_t>& peaks);
nlohmann::json stragglers_to_json(const StragglerReport& s);
// A few lines: per-rank wait, the slowest rank overall and per step (at most `max_steps`), and
// the memory imbalance.
void print_stragglers(const StragglerReport& s, std::ostream& os, int max_steps = 10);

}  // namespace shardlab
