// Straggler and imbalance monitoring, from a run's recorded events: how long each rank waited in
// collectives for the last rank to arrive, which rank was the slowest in each step, and how far
// the ranks' memory peaks differ. On the local backend the waits are exact (the rendezvous
// records them: "wait" on comm spans). On MPI and NCCL they are estimates: a collective's time
// from issue (or from the wait, for async ones) to completion, minus the shortest time any rank
// took for a collective of the same op and size (the transfer alone).
#pragma once

#include <cstdint>
#include <ostream>
#include <utility>
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

// Whether one rank held the others up beyond this run's own noise. Over the measured steps (the
// warm-up step left out, as the summary leaves it out), the candidate is the rank that waited
// least in all. Its lead in a step is the other ranks' mean wait minus its own wait: how much
// longer they waited for it. Without a straggler the rank that waits least changes from step to
// step and the lead swings around zero; with one, the lead is large in every step. So the rank
// is named a straggler when its median lead stands above zero by more than the noise of that
// median: kNoiseFactor standard errors of the median (1.2533 x the lead's spread / sqrt(steps),
// the spread being 1.4826 x its median absolute deviation, the standard deviation of normal
// noise), and by at least kMinStepFraction of the median step time. (The spread itself would be
// the wrong yardstick: a real straggler's lead swings with its own slowness, often by a third.)
struct Straggler {
  static constexpr double kNoiseFactor = 3.0;
  static constexpr double kMinStepFraction = 0.05;
  int rank = -1;            // the candidate: the rank that waited least over the steps
  int steps = 0;            // measured steps with a wait from every rank
  double lead_ns = 0;       // its median lead over those steps
  double noise_ns = 0;      // the spread: 1.4826 x the median absolute deviation of the leads
  double error_ns = 0;      // the median's standard error: 1.2533 x noise_ns / sqrt(steps)
  double step_ns = 0;       // the median step time (largest step_time of the step's ranks)
  double threshold_ns = 0;  // max(kNoiseFactor x error_ns, kMinStepFraction x step_ns)
  std::vector<std::pair<int, double>> lead_by_step;  // (step, lead_ns)
  bool named() const { return rank >= 0 && steps >= 2 && lead_ns > threshold_ns; }
};

struct StragglerReport {
  bool estimated = false;  // waits estimated from durations (no exact "wait" recorded)
  std::vector<RankWait> ranks;
  std::vector<StepStraggler> steps;
  Straggler straggler;
  // Memory imbalance: the ranks' peak totals (padding and hybrid groups make them differ).
  int64_t peak_max = 0, peak_min = 0;
  int peak_max_rank = -1, peak_min_rank = -1;
  bool empty() const { return ranks.empty(); }
};

// peaks: each rank's peak total bytes (RankSummary::peak_total), by rank.
StragglerReport compute_stragglers(const RunData& run, const std::vector<int64_t>& peaks);
nlohmann::json stragglers_to_json(const StragglerReport& s);
// A few lines: per-rank wait, the straggler when there is one beyond the run's noise (else why
// none is named), its lead per step (at most `max_steps`), and the memory imbalance.
void print_stragglers(const StragglerReport& s, std::ostream& os, int max_steps = 10);

}  // namespace shardlab
