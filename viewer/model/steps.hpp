// Training steps of a run as time ranges: a step ends at its latest step event over the ranks and
// begins where the previous one ended (the first at its earliest start, t - step_time).
#pragma once

#include <cstdint>
#include <vector>

#include "core/trace/run_reader.hpp"

namespace shardlab::viewer {

struct StepInfo {
  int step = 0;
  int64_t t_begin = 0, t_end = 0;
  double loss = 0;       // mean over the ranks that reported it
  int64_t tokens = 0;    // sum over ranks
  double step_time = 0;  // slowest rank, seconds
  int ranks_seen = 0;
};

std::vector<StepInfo> build_steps(const RunData& run);
// Index of the step whose [t_begin, t_end) holds t, else -1.
int step_at(const std::vector<StepInfo>& steps, int64_t t);
// Index of the step numbered `step`, else -1.
int find_step(const std::vector<StepInfo>& steps, int step);

}  // namespace shardlab::viewer
