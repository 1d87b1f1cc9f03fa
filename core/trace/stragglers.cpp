// Per-rank collective wait, the slowest rank of each step, memory imbalance (stragglers.hpp).
#include "core/trace/stragglers.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
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

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Straggler (stragglers.hpp): the rank that waited least over the measured steps, its lead per
// step, and whether the lead stands above the run's noise.
Straggler find_straggler(const RunData& run, const std::map<int, std::vector<int64_t>>& per_step,
                         int n) {
  Straggler s;
  if (n < 2) return s;
  // Steps and their times: the step's time is its slowest rank's step_time, as in the summary.
  std::map<int, double> step_time;
  for (const RankTrace& rt : run.ranks)
    for (const StepEvent& e : rt.steps) {
      double& t = step_time[e.step];
      if (std::isfinite(e.step_time)) t = std::max(t, e.step_time * 1e9);
    }
  const int warmup = step_time.size() > 2 ? step_time.begin()->first : INT_MIN;
  std::vector<double> times;
  for (const auto& [step, t] : step_time)
    if (step != warmup) times.push_back(t);
  s.step_ns = median(times);

  std::vector<const std::pair<const int, std::vector<int64_t>>*> measured;
  for (const auto& kv : per_step)
    if (kv.first != warmup && step_time.count(kv.first)) measured.push_back(&kv);
  s.steps = static_cast<int>(measured.size());
  if (measured.empty()) return s;
  std::vector<double> total(static_cast<size_t>(n), 0.0);
  for (const auto* kv : measured)
    for (int r = 0; r < n; ++r) total[static_cast<size_t>(r)] += static_cast<double>(kv->second[r]);
  s.rank = static_cast<int>(std::min_element(total.begin(), total.end()) - total.begin());

  std::vector<double> leads;
  for (const auto* kv : measured) {
    double others = 0;
    for (int r = 0; r < n; ++r)
      if (r != s.rank) others += static_cast<double>(kv->second[r]);
    const double lead = others / (n - 1) - static_cast<double>(kv->second[s.rank]);
    leads.push_back(lead);
    s.lead_by_step.emplace_back(kv->first, lead);
  }
  s.lead_ns = median(leads);
  std::vector<double> dev;
  for (double l : leads) dev.push_back(std::fabs(l - s.lead_ns));
  s.noise_ns = 1.4826 * median(dev);
  s.error_ns = 1.2533 * s.noise_ns / std::sqrt(static_cast<double>(s.steps));
  s.threshold_ns =
      std::max(Straggler::kNoiseFactor * s.error_ns, Straggler::kMinStepFraction * s.step_ns);
  return s;
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

  out.straggler = find_straggler(run, per_step, n);

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
  nlohmann::json leads = nlohmann::json::array();
  for (const auto& [step, lead] : s.straggler.lead_by_step)
    leads.push_back({{"step", step}, {"lead_ns", lead}});
  const Straggler& g = s.straggler;
  return {{"wait", s.estimated ? "estimated" : "exact"},
          {"ranks", std::move(ranks)},
          {"steps", std::move(steps)},
          {"straggler",
           {{"named", g.named()},
            {"rank", g.rank},
            {"measured_steps", g.steps},
            {"lead_ns", g.lead_ns},
            {"noise_ns", g.noise_ns},
            {"error_ns", g.error_ns},
            {"step_ns", g.step_ns},
            {"threshold_ns", g.threshold_ns},
            {"lead_by_step", std::move(leads)}}},
          {"memory_imbalance",
           {{"peak_max_bytes", s.peak_max},
            {"peak_max_rank", s.peak_max_rank},
            {"peak_min_bytes", s.peak_min},
            {"peak_min_rank", s.peak_min_rank}}}};
}

void print_stragglers(const StragglerReport& s, std::ostream& os, int max_steps) {
  if (s.empty()) return;
  if (s.ranks.size() < 2) {  // one rank (an imported subset of one): no other rank to wait for
    os << "waiting for other ranks: one rank in this run, none to compare it with\n";
    return;
  }
  char buf[320];
  const Straggler& g = s.straggler;
  // Per step: the run's waits over the steps that have any (all steps, the warm-up included).
  const double steps = s.steps.empty() ? 1.0 : static_cast<double>(s.steps.size());
  os << "waiting for other ranks ("
     << (s.estimated ? "estimated: time in a collective beyond "
                       "the fastest of its op and size"
                     : "exact: time until the last rank arrived")
     << "), per step: the run's sums / " << steps << (steps == 1 ? " step\n" : " steps\n");
  std::snprintf(buf, sizeof buf, "%-5s %14s %18s %22s\n", "rank", "waited ms/step",
                "collectives/step", "waited least (steps)");
  os << buf;
  for (const RankWait& r : s.ranks) {
    std::snprintf(buf, sizeof buf, "%-5d %14.3f %18.4g %22d\n", r.rank, r.wait_ns * 1e-6 / steps,
                  static_cast<double>(r.collectives) / steps, r.slowest_steps);
    os << buf;
  }
  if (g.rank >= 0 && g.steps >= 2) {
    // The lead: how much longer the other ranks waited than rank g.rank, per step.
    std::snprintf(buf, sizeof buf,
                  "lead of rank %d, the rank that waited least: the other ranks' mean wait minus "
                  "its own, per step; median %.3f ms over %d measured steps, spread %.3f ms "
                  "(1.4826 x median absolute deviation), standard error of the median %.3f ms "
                  "(1.2533 x spread / sqrt(steps))\n",
                  g.rank, g.lead_ns * 1e-6, g.steps, g.noise_ns * 1e-6, g.error_ns * 1e-6);
    os << buf;
    if (g.named()) {
      std::snprintf(buf, sizeof buf,
                    "straggler: rank %d; the others waited %.3f ms per step longer than it "
                    "(median), above this run's threshold of %.3f ms (the larger of %.0f x the "
                    "standard error and %.0f%% of the %.3f ms median step)\n",
                    g.rank, g.lead_ns * 1e-6, g.threshold_ns * 1e-6, Straggler::kNoiseFactor,
                    100 * Straggler::kMinStepFraction, g.step_ns * 1e-6);
    } else {
      std::snprintf(buf, sizeof buf,
                    "straggler: none beyond this run's noise (the lead is within the threshold "
                    "of %.3f ms: the larger of %.0f x the standard error and %.0f%% of the %.3f "
                    "ms median step)\n",
                    g.threshold_ns * 1e-6, Straggler::kNoiseFactor,
                    100 * Straggler::kMinStepFraction, g.step_ns * 1e-6);
    }
    os << buf;
    // Step by step, named or not: a steady lead is a straggler, one that swings is noise.
    std::snprintf(buf, sizeof buf,
                  "rank %d's lead by step (step:+X ms: the others' mean wait minus rank %d's, in "
                  "that step):",
                  g.rank, g.rank);
    os << buf;
    int shown = 0;
    for (const auto& [step, lead] : g.lead_by_step) {
      if (shown++ == max_steps) {
        os << " ...";
        break;
      }
      std::snprintf(buf, sizeof buf, " %d:%+.1fms", step, lead * 1e-6);
      os << buf;
    }
    os << "\n";
  }
  if (s.peak_max <= 0) {
    // no memory events: nothing to compare
  } else if (s.peak_max_rank >= 0 && s.ranks.size() > 1 && s.peak_max == s.peak_min) {
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
