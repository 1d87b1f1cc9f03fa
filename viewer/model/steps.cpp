// Step boundaries (see steps.hpp).
#include "viewer/model/steps.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/trace/summary.hpp"

namespace shardlab::viewer {

std::vector<StepInfo> build_steps(const RunData& run) {
  std::map<int, StepInfo> by_step;
  std::map<int, int64_t> earliest_start;
  std::map<int, double> loss_sum;
  for (const RankTrace& r : run.ranks) {
    for (const StepEvent& e : r.steps) {
      StepInfo& s = by_step[e.step];
      s.step = e.step;
      s.t_end = std::max(s.t_end, e.t);
      s.tokens = saturating_add(s.tokens, e.tokens);
      if (std::isfinite(e.step_time)) s.step_time = std::max(s.step_time, e.step_time);
      ++s.ranks_seen;
      loss_sum[e.step] += e.loss;
      // step_time comes from a file: llround(1e300) is unspecified and t minus it overflows.
      const double dt_ns =
          std::isfinite(e.step_time) ? std::clamp(e.step_time * 1e9, 0.0, 4e18) : 0.0;
      int64_t start = e.t - static_cast<int64_t>(std::llround(dt_ns));
      auto it = earliest_start.find(e.step);
      if (it == earliest_start.end() || start < it->second) earliest_start[e.step] = start;
    }
  }
  std::vector<StepInfo> out;
  for (auto& [n, s] : by_step) {
    s.loss = loss_sum[n] / s.ranks_seen;
    s.t_begin = out.empty() ? std::clamp<int64_t>(earliest_start[n], 0, s.t_end) : out.back().t_end;
    s.t_begin = std::min(s.t_begin, s.t_end);
    out.push_back(s);
  }
  return out;
}

int step_at(const std::vector<StepInfo>& steps, int64_t t) {
  auto it = std::upper_bound(steps.begin(), steps.end(), t,
                             [](int64_t v, const StepInfo& s) { return v < s.t_end; });
  if (it == steps.end() || t < it->t_begin) return -1;
  return static_cast<int>(it - steps.begin());
}

int find_step(const std::vector<StepInfo>& steps, int step) {
  for (size_t i = 0; i < steps.size(); ++i)
    if (steps[i].step == step) return static_cast<int>(i);
  return -1;
}

}  // namespace shardlab::viewer
