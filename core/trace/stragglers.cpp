// Per-rank collective wait, the slowest rank of each step, memory imbalance (stragglers.hpp).
#include "core/trace/stragglers.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <utility>

#include "core/memory/tracker.hpp"
#include "core/trace/run_reader.hpp"

namespace shardlab {

namespace {

// Time a comm span spent between the moment its rank needed it and its completion.
int64_t waited_span(const SpanEvent& s) {
  const int64_t from = s.t_wait >= 0 ? std::max(s.t_start, s.t_wait) : s.t_start;
  return std::max<int64_t>(0, s.t_end - from);
}

// The step a span at time t belongs to: the first step event at or after t (0: none).
int step_of(const std::vector<StepEvent>& steps, int64_t t) {
  auto it = std::lower_bound(steps.begin(), steps.end(), t,
                             [](const StepEvent& e, int64_t v) { return e.t < v; });
  return it == steps.end() ? 0 : it->step;
}

}  // namespace

StragglerReport compute_stragglers(const RunData& run, const std::vector<int64_t>& peaks) {
  StragglerReport out;
  const int n = static_cast<int>(run.ranks.size());
  if (n == 0) return out;

  // Exact waits when the backend recorded them, else the estimate's floor per (op, bytes).
  bool exact = false;
  std::map<std::pair<std::string, int64_t>, int64_t> floor_ns;
  for (const RankTrace& rt : run.ranks)
    for (const SpanEvent& s : rt.spans) {
      if (s.lane != Lane::comm) continue;
      if (s.wait_ns >= 0) exact = true;
      const auto key = std::make_pair(s.op, s.bytes);
      const int64_t d = waited_span(s);
      auto it = floor_ns.find(key);
      if (it == floor_ns.end() || d < it->second) floor_ns[key] = d;
    }
  out.estimated = !exact;

  std::map<int, std::vector<int64_t>> per_step;  // step -> wait by rank
  for (int r = 0; r < n; ++r) {
    const RankTrace& rt = run.ranks[r];
    RankWait rw;
    rw.rank = r;
    for (const SpanEvent& s : rt.spans) {
      if (s.lane != Lane::comm) continue;
      int64_t w = 0;
      if (exact) {
        if (s.wait_ns < 0) continue;
        w = s.wait_ns;
      } else {
        w = std::max<int64_t>(0, waited_span(s) - floor_ns[{s.op, s.bytes}]);
      }
      rw.wait_ns += w;
      ++rw.collectives;
      const int step = step_of(rt.steps, s.t_end);
      if (step <= 0) continue;
      std::vector<int64_t>& v = per_step[step];
      v.resize(static_cast<size_t>(n), 0);
      v[static_cast<size_t>(r)] += w;
    }
    out.ranks.push_back(rw);
  }

  for (const auto& [step, waits] : per_step) {
    if (n < 2) break;
    StepStraggler st;
    st.step = step;
    st.slowest_rank =
        static_cast<int>(std::min_element(waits.begin(), waits.end()) - waits.begin());
    st.slowest_wait_ns = waits[static_cast<size_t>(st.slowest_rank)];
    double others = 0;
    for (int r = 0; r < n; ++r)
      if (r != st.slowest_rank) others += static_cast<double>(waits[static_cast<size_t>(r)]);
    st.others_wait_ns = others / (n - 1);
    out.ranks[static_cast<size_t>(st.slowest_rank)].slowest_steps += 1;
    out.steps.push_back(st);
  }

  for (int r = 0; r < static_cast<int>(peaks.size()); ++r) {
    if (out.peak_max_rank < 0 || peaks[r] > out.peak_max) {
      out.peak_max = peaks[r];
      out.peak_max_rank = r;
    }
    if (out.peak_min_rank < 0 || peaks[r] < out.peak_min) {
      out.peak_min = peaks[r];
      out.peak_min_rank = r;
    }
  }
  return out;
}

nlohmann::json stragglers_to_json(const StragglerReport& s) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankWait& r : s.ranks)
    ranks.push_back({{"rank", r.rank},
                     {"wait_ns", r.wait_ns},
                     {"collectives", r.collectives},
                     {"slowest_steps", r.slowest_steps}});
  nlohmann::json steps = nlohmann::json::array();
  for (const StepStraggler& st : s.steps)
    steps.push_back({{"step", st.step},
                     {"slowest_rank", st.slowest_rank},
                     {"others_wait_ns", st.others_wait_ns},
                     {"slowest_wait_ns", st.slowest_wait_ns}});
  return {{"wait", s.estimated ? "estimated" : "exact"},
          {"ranks", std::move(ranks)},
          {"steps", std::move(steps)},
          {"memory_imbalance",
           {{"peak_max_bytes", s.peak_max},
            {"peak_max_rank", s.peak_max_rank},
            {"peak_min_bytes", s.peak_min},
            {"peak_min_rank", s.peak_min_rank}}}};
}

void print_stragglers(const StragglerReport& s, std::ostream& os, int max_steps) {
  if (s.empty()) return;
  char buf[256];
  os << "waiting for other ranks ("
     << (s.estimated ? "estimated: time in a collective beyond "
                       "the fastest of its op and size"
                     : "exact: time until the last rank arrived")
     << ")\n";
  std::snprintf(buf, sizeof buf, "%-5s %12s %12s %14s\n", "rank", "waited ms", "collectives",
                "slowest steps");
  os << buf;
  for (const RankWait& r : s.ranks) {
    std::snprintf(buf, sizeof buf, "%-5d %12.3f %12lld %14d\n", r.rank, r.wait_ns * 1e-6,
                  static_cast<long long>(r.collectives), r.slowest_steps);
    os << buf;
  }
  if (!s.steps.empty()) {
    const RankWait& top = *std::max_element(
        s.ranks.begin(), s.ranks.end(),
        [](const RankWait& a, const RankWait& b) { return a.slowest_steps < b.slowest_steps; });
    double cost = 0;
    for (const StepStraggler& st : s.steps)
      if (st.slowest_rank == top.rank) cost += st.others_wait_ns;
    std::snprintf(buf, sizeof buf,
                  "slowest rank: rank %d in %d of %zu steps; the others waited %.3f ms per step "
                  "for it (mean)\n",
                  top.rank, top.slowest_steps, s.steps.size(),
                  top.slowest_steps ? cost / top.slowest_steps * 1e-6 : 0.0);
    os << buf;
    os << "slowest rank by step:";
    int shown = 0;
    for (const StepStraggler& st : s.steps) {
      if (shown++ == max_steps) {
        os << " ...";
        break;
      }
      std::snprintf(buf, sizeof buf, " %d:r%d(+%.1fms)", st.step, st.slowest_rank,
                    st.others_wait_ns * 1e-6);
      os << buf;
    }
    os << "\n";
  }
  if (s.peak_max_rank >= 0 && s.ranks.size() > 1 && s.peak_max == s.peak_min) {
    os << "memory imbalance: none, every rank peaks at " << format_bytes(s.peak_max) << "\n";
  } else if (s.peak_max_rank >= 0 && s.ranks.size() > 1) {
    std::snprintf(
        buf, sizeof buf, "memory imbalance: peak %s on rank %d, %s on rank %d (%s apart)\n",
        format_bytes(s.peak_max).c_str(), s.peak_max_rank, format_bytes(s.peak_min).c_str(),
        s.peak_min_rank, format_bytes(s.peak_max - s.peak_min).c_str());
    os << buf;
  }
}

}  // namespace shardlab
