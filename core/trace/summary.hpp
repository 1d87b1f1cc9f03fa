// Run summary computed from the recorded events alone (RunData), so the same files always give
// the same numbers: per-rank memory peaks by category, step-time statistics, tokens/s,
// communication bytes by op and dtype, and exposed communication. Definitions:
// docs/observability.md.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/dtype.hpp"
#include "core/memory/tracker.hpp"
#include "core/trace/run_reader.hpp"
#include "core/trace/stragglers.hpp"

namespace shardlab {

// Comm-lane spans of one (op, dtype), in the two measures of core/comm/traffic.hpp, which every
// report prints with the same labels: "sent per rank" and "buffer".
struct CommStat {
  std::string op;
  DType dtype = DType::f32;
  int64_t calls = 0;
  // Buffer: the sum of the spans' bytes, the collectives' full sizes (collective_bytes,
  // nccl-tests' convention, the base of busbw).
  int64_t bytes = 0;
  double bytes_per_step = 0;  // bytes / steps (bytes when there are no steps)
  // Sent: what the ranks sent (ring traffic, sent_bytes). -1 when a span lacks it (runs recorded
  // before spans carried it).
  int64_t sent = 0;
  double sent_per_step = -1;  // sent / steps, -1 when unknown
};

// The stats of every op together (op "total"): sums of calls, bytes and sent (-1 when one is
// unknown) and of their per-step figures.
CommStat comm_total(const std::vector<CommStat>& v);

// One collective op on one unit, over the measured steps: its calls, the time its spans took and
// the part of it with no compute on the rank. Collectives in flight together each count their
// own time, so these add up to more than the rank's exposed comm when they overlap.
struct ExposedStat {
  std::string op;
  int unit = -1;  // -1: no unit (the loss's all-reduce, a PyTorch trace without FSDP2 labels)
  int64_t calls = 0;
  int64_t comm_ns = 0, exposed_ns = 0;
};

struct RankSummary {
  int rank = 0;
  int steps = 0;           // step events of this rank
  MemArray peak{};         // each category's own peak (they may peak at different times)
  int64_t peak_total = 0;  // the highest total
  MemArray at_peak{};      // the categories at the first moment the total reached peak_total
  // The host-memory tier (--offload; all 0 without it): its highest total and categories then.
  int64_t host_peak_total = 0;
  MemArray host_at_peak{};
  // Copies between host and device memory (copy-lane spans): bytes by direction, and time.
  int64_t copy_h2d_bytes = 0, copy_d2h_bytes = 0;
  int64_t copy_ns = 0;  // length of the union of copy-lane spans
  // Run totals: every span of the rank, in steps or not.
  int64_t compute_ns = 0;            // length of the union of compute-lane spans
  int64_t comm_ns = 0;               // length of the union of comm-lane spans
  int64_t exposed_comm_ns = 0;       // length of (union of comm) minus (union of compute)
  double exposed_comm_fraction = 0;  // exposed_comm_ns / comm_ns, 0 without comm
  // Per step: the same three lengths within each measured step of this rank (the spans that
  // start at or after its previous step event and before its own; the warm-up step left out as
  // in StepTimeStats), averaged over those steps. 0 when no step is measured.
  int measured_steps = 0;
  double compute_ns_per_step = 0, comm_ns_per_step = 0, exposed_comm_ns_per_step = 0;
  std::vector<CommStat> comm;        // sorted by op, then dtype
  std::vector<ExposedStat> exposed;  // the measured steps' collectives, by op and unit
};

struct StepTimeStats {
  int steps = 0;                 // distinct step numbers seen
  int measured = 0;              // steps in the statistics
  bool warmup_excluded = false;  // the first step left out (only when steps > 2)
  double mean_s = 0, median_s = 0, min_s = 0, max_s = 0;
};

struct RunSummary {
  int world_size = 0;
  StepTimeStats step_time;     // a step's time is the largest step_time any rank reported for it
  double tokens_per_step = 0;  // all ranks' tokens, mean over measured steps
  double tokens_per_s = 0;     // measured steps: sum of all ranks' tokens / sum of step times
  int64_t comm_ns = 0;         // run totals, summed over ranks
  int64_t exposed_comm_ns = 0;
  double exposed_comm_fraction = 0;
  // Per step and rank: RankSummary's per-step lengths, averaged over the ranks.
  double comm_ns_per_step = 0, exposed_comm_ns_per_step = 0;
  std::vector<CommStat> comm;  // all ranks together; bytes_per_step = bytes / steps
  // The ranks' ExposedStat summed, most exposed first; measured_steps is the ranks' largest.
  std::vector<ExposedStat> exposed;
  int measured_steps = 0;
  std::vector<RankSummary> ranks;
  StragglerReport stragglers;  // who waited for whom, memory imbalance (stragglers.hpp)
};

RunSummary compute_summary(const RunData& run);
nlohmann::json summary_to_json(const RunSummary& s);

// Prints the summary as fixed-width tables (run line from meta, steps, memory, communication).
// Figures under a "per step" heading are per step (means); run totals are labelled as totals.
void print_summary_table(const RunSummary& s, const nlohmann::json& meta, std::ostream& os);

// Several runs side by side, one column each, per step and rank (calls, bytes sent per rank and
// buffer by op, step time, peak), then every run after the first against the first: sent per
// rank, buffer, peak, median step time as ratios. `names` label the columns.
void print_summary_comparison(const std::vector<std::string>& names,
                              const std::vector<RunSummary>& runs,
                              const std::vector<nlohmann::json>& metas, std::ostream& os);

// `shardlab summary RUN_DIR`: reads the run's files, computes and prints the summary to `os`.
// Returns the exit code: 0, or 1 after printing the error (e.g. a missing meta.json) to stderr.
int print_summary(const std::string& run_dir, std::ostream& os);
// `shardlab summary RUN_DIR RUN_DIR...`: the comparison of print_summary_comparison; one run
// directory prints as print_summary does.
int print_summaries(const std::vector<std::string>& run_dirs, std::ostream& os);

// a + b held at the int64 limits instead of overflowing (undefined behaviour): sums of bytes,
// tokens and nanoseconds over every event of a damaged run can pass 2^63. The viewer uses it too.
int64_t saturating_add(int64_t a, int64_t b);

// ---- interval arithmetic, exposed for tests (intervals are [begin, end) in ns) -----------------
using Interval = std::pair<int64_t, int64_t>;
// Sorted, disjoint, non-empty intervals covering the same points as `iv`.
std::vector<Interval> interval_union(std::vector<Interval> iv);
int64_t total_length(const std::vector<Interval>& disjoint);
// Length of the points in `a` not in `b` (both as returned by interval_union).
int64_t length_not_covered(const std::vector<Interval>& a, const std::vector<Interval>& b);

}  // namespace shardlab
