// Summary of a run from its events: memory replay, step statistics, comm bytes, exposed comm.
#include "core/trace/summary.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>

#include "core/base/error.hpp"
#include "core/trace/flight_report.hpp"

namespace shardlab {

using nlohmann::json;

// ---- saturating sums ----------------------------------------------------------------------------

int64_t saturating_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return b > 0 ? INT64_MAX : INT64_MIN;
  return r;
}

namespace {

int64_t sat_add(int64_t a, int64_t b) { return saturating_add(a, b); }

// b - a for b >= a, held at INT64_MAX (an interval from -2^63 to 2^63 has no int64 length).
int64_t sat_length(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(b, a, &r)) return INT64_MAX;
  return r;
}

}  // namespace

// ---- intervals ----------------------------------------------------------------------------------

std::vector<Interval> interval_union(std::vector<Interval> iv) {
  iv.erase(
      std::remove_if(iv.begin(), iv.end(), [](const Interval& i) { return i.second <= i.first; }),
      iv.end());
  std::sort(iv.begin(), iv.end());
  std::vector<Interval> out;
  for (const Interval& i : iv) {
    if (!out.empty() && i.first <= out.back().second)
      out.back().second = std::max(out.back().second, i.second);
    else
      out.push_back(i);
  }
  return out;
}

int64_t total_length(const std::vector<Interval>& disjoint) {
  int64_t n = 0;
  for (const Interval& i : disjoint) n = sat_add(n, sat_length(i.first, i.second));
  return n;
}

// The part of [x.first, x.second) that `disjoint` (sorted, disjoint) does not cover, found by
// binary search: a run's spans each against its compute without a quadratic sweep.
int64_t uncovered(const Interval& x, const std::vector<Interval>& disjoint) {
  int64_t covered = 0;
  auto it = std::upper_bound(disjoint.begin(), disjoint.end(), x.first,
                             [](int64_t t, const Interval& i) { return t < i.second; });
  for (; it != disjoint.end() && it->first < x.second; ++it)
    covered =
        sat_add(covered, sat_length(std::max(x.first, it->first), std::min(x.second, it->second)));
  return sat_length(x.first, x.second) - covered;
}

int64_t length_not_covered(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  // Sweep both sorted lists: subtract from each interval of `a` its overlaps with `b`.
  int64_t overlap = 0;
  size_t j = 0;
  for (const Interval& x : a) {
    while (j < b.size() && b[j].second <= x.first) ++j;
    for (size_t k = j; k < b.size() && b[k].first < x.second; ++k)
      overlap = sat_add(overlap,
                        sat_length(std::max(x.first, b[k].first), std::min(x.second, b[k].second)));
  }
  return std::max<int64_t>(0, sat_add(total_length(a), -overlap));
}

// ---- compute_summary ----------------------------------------------------------------------------

namespace {

using CommKey = std::pair<std::string, DType>;

std::vector<CommStat> comm_stats(const std::map<CommKey, CommStat>& m, int steps) {
  std::vector<CommStat> out;
  for (const auto& kv : m) {
    CommStat c = kv.second;
    const double div = steps > 0 ? steps : 1;
    c.bytes_per_step = static_cast<double>(c.bytes) / div;
    c.sent_per_step = c.sent >= 0 ? static_cast<double>(c.sent) / div : -1.0;
    out.push_back(c);
  }
  return out;
}

}  // namespace

CommStat comm_total(const std::vector<CommStat>& v) {
  CommStat t;
  t.op = "total";
  t.sent_per_step = 0;
  for (const CommStat& c : v) {
    t.calls += c.calls;
    t.bytes = sat_add(t.bytes, c.bytes);
    t.bytes_per_step += c.bytes_per_step;
    t.sent = (t.sent < 0 || c.sent < 0) ? -1 : sat_add(t.sent, c.sent);
    t.sent_per_step = t.sent < 0 ? -1.0 : t.sent_per_step + c.sent_per_step;
  }
  return t;
}

namespace {

// The compute and comm intervals of one step of a rank (the spans that start in it).
struct StepLengths {
  std::vector<Interval> compute, comm;
};

RankSummary summarize_rank(int rank, const RankTrace& rt, int warmup_step) {
  RankSummary r;
  r.rank = rank;
  r.steps = static_cast<int>(rt.steps.size());

  // Replay the tracker: each mem event carries its category's and the rank's totals after the
  // change, so the replay needs no starting state and survives a skipped line.
  MemArray cur{};
  for (const MemEvent& e : rt.mem) {
    const int c = static_cast<int>(e.category);
    cur[c] = e.cat_total;
    r.peak[c] = std::max(r.peak[c], e.cat_total);
    if (e.total > r.peak_total) {
      r.peak_total = e.total;
      r.at_peak = cur;
    }
  }

  // The host tier (--offload), replayed the same way.
  MemArray host_cur{};
  for (const MemEvent& e : rt.host_mem) {
    host_cur[static_cast<int>(e.category)] = e.cat_total;
    if (e.total > r.host_peak_total) {
      r.host_peak_total = e.total;
      r.host_at_peak = host_cur;
    }
  }

  // Step windows: step k holds the spans that start at or after step k-1's event and before step
  // k's own.
  std::vector<int64_t> step_ends;
  for (const StepEvent& e : rt.steps) step_ends.push_back(e.t);
  std::sort(step_ends.begin(), step_ends.end());
  std::vector<int> step_numbers(step_ends.size(), 0);
  {
    std::vector<StepEvent> sorted = rt.steps;
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const StepEvent& a, const StepEvent& b) { return a.t < b.t; });
    for (size_t k = 0; k < sorted.size(); ++k) step_numbers[k] = sorted[k].step;
  }
  std::vector<StepLengths> in_step(step_ends.size());
  auto window = [&](int64_t t) -> StepLengths* {
    const size_t k = static_cast<size_t>(std::upper_bound(step_ends.begin(), step_ends.end(), t) -
                                         step_ends.begin());
    if (k == step_ends.size() || step_numbers[k] == warmup_step) return nullptr;
    return &in_step[k];
  };

  std::vector<Interval> compute, comm, copy;
  std::map<CommKey, CommStat> by_op;
  for (const SpanEvent& s : rt.spans) {
    if (s.lane == Lane::compute) {
      compute.emplace_back(s.t_start, s.t_end);
      if (StepLengths* w = window(s.t_start)) w->compute.emplace_back(s.t_start, s.t_end);
      continue;
    }
    if (s.lane == Lane::copy) {
      copy.emplace_back(s.t_start, s.t_end);
      (s.op == "h2d" ? r.copy_h2d_bytes : r.copy_d2h_bytes) += s.bytes;
      continue;
    }
    comm.emplace_back(s.t_start, s.t_end);
    if (StepLengths* w = window(s.t_start)) w->comm.emplace_back(s.t_start, s.t_end);
    CommStat& c = by_op[{s.op, s.dtype}];
    c.op = s.op;
    c.dtype = s.dtype;
    c.calls += 1;
    c.bytes = sat_add(c.bytes, s.bytes);
    c.sent = (c.sent < 0 || s.sent < 0) ? -1 : sat_add(c.sent, s.sent);
  }
  const std::vector<Interval> compute_u = interval_union(std::move(compute));
  const std::vector<Interval> comm_u = interval_union(std::move(comm));
  r.compute_ns = total_length(compute_u);
  r.comm_ns = total_length(comm_u);
  r.copy_ns = total_length(interval_union(std::move(copy)));
  r.exposed_comm_ns = length_not_covered(comm_u, compute_u);
  r.exposed_comm_fraction =
      r.comm_ns > 0 ? static_cast<double>(r.exposed_comm_ns) / static_cast<double>(r.comm_ns) : 0.0;
  r.comm = comm_stats(by_op, r.steps);

  // Each collective of the measured steps against the rank's compute, by op and unit.
  std::map<std::pair<std::string, int>, ExposedStat> exposed_by;
  for (const SpanEvent& sp : rt.spans) {
    if (sp.lane != Lane::comm || !window(sp.t_start)) continue;
    ExposedStat& e = exposed_by[{sp.op, sp.unit}];
    e.op = sp.op;
    e.unit = sp.unit;
    e.calls += 1;
    e.comm_ns = sat_add(e.comm_ns, sat_length(sp.t_start, sp.t_end));
    e.exposed_ns = sat_add(e.exposed_ns, uncovered({sp.t_start, sp.t_end}, compute_u));
  }
  for (auto& [key, e] : exposed_by) r.exposed.push_back(e);

  // Per step: the mean of each measured step's lengths.
  double comp = 0, com = 0, exposed = 0;
  for (size_t k = 0; k < in_step.size(); ++k) {
    if (step_numbers[k] == warmup_step) continue;
    const std::vector<Interval> cu = interval_union(std::move(in_step[k].compute));
    const std::vector<Interval> mu = interval_union(std::move(in_step[k].comm));
    comp += static_cast<double>(total_length(cu));
    com += static_cast<double>(total_length(mu));
    exposed += static_cast<double>(length_not_covered(mu, cu));
    ++r.measured_steps;
  }
  if (r.measured_steps > 0) {
    r.compute_ns_per_step = comp / r.measured_steps;
    r.comm_ns_per_step = com / r.measured_steps;
    r.exposed_comm_ns_per_step = exposed / r.measured_steps;
  }
  return r;
}

}  // namespace

RunSummary compute_summary(const RunData& run) {
  RunSummary s;
  s.world_size = static_cast<int>(run.ranks.size());

  struct StepAcc {
    double time = 0;
    int64_t tokens = 0;
  };
  std::map<int, StepAcc> steps;  // by step number
  for (const RankTrace& rt : run.ranks)
    for (const StepEvent& e : rt.steps) steps[e.step];
  // The warm-up step, left out of every per-step mean when there are more than 2 steps.
  const int warmup_step = steps.size() > 2 ? steps.begin()->first : INT_MIN;
  std::map<CommKey, CommStat> by_op;
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    RankSummary rs = summarize_rank(static_cast<int>(r), run.ranks[r], warmup_step);
    s.comm_ns = sat_add(s.comm_ns, rs.comm_ns);
    s.exposed_comm_ns = sat_add(s.exposed_comm_ns, rs.exposed_comm_ns);
    for (const CommStat& c : rs.comm) {
      CommStat& a = by_op[{c.op, c.dtype}];
      a.op = c.op;
      a.dtype = c.dtype;
      a.calls += c.calls;
      a.bytes = sat_add(a.bytes, c.bytes);
      a.sent = (a.sent < 0 || c.sent < 0) ? -1 : sat_add(a.sent, c.sent);
    }
    for (const StepEvent& e : run.ranks[r].steps) {
      StepAcc& a = steps[e.step];
      if (std::isfinite(e.step_time)) a.time = std::max(a.time, e.step_time);
      a.tokens = sat_add(a.tokens, e.tokens);
    }
    s.ranks.push_back(std::move(rs));
  }
  s.exposed_comm_fraction =
      s.comm_ns > 0 ? static_cast<double>(s.exposed_comm_ns) / static_cast<double>(s.comm_ns) : 0.0;
  s.comm = comm_stats(by_op, static_cast<int>(steps.size()));
  std::map<std::pair<std::string, int>, ExposedStat> exposed_by;
  for (const RankSummary& r : s.ranks) {
    s.measured_steps = std::max(s.measured_steps, r.measured_steps);
    for (const ExposedStat& e : r.exposed) {
      ExposedStat& a = exposed_by[{e.op, e.unit}];
      a.op = e.op;
      a.unit = e.unit;
      a.calls += e.calls;
      a.comm_ns = sat_add(a.comm_ns, e.comm_ns);
      a.exposed_ns = sat_add(a.exposed_ns, e.exposed_ns);
    }
  }
  for (auto& [key, e] : exposed_by) s.exposed.push_back(e);
  std::stable_sort(
      s.exposed.begin(), s.exposed.end(),
      [](const ExposedStat& a, const ExposedStat& b) { return a.exposed_ns > b.exposed_ns; });
  int measured_ranks = 0;
  for (const RankSummary& r : s.ranks) {
    if (r.measured_steps == 0) continue;
    s.comm_ns_per_step += r.comm_ns_per_step;
    s.exposed_comm_ns_per_step += r.exposed_comm_ns_per_step;
    ++measured_ranks;
  }
  if (measured_ranks > 0) {
    s.comm_ns_per_step /= measured_ranks;
    s.exposed_comm_ns_per_step /= measured_ranks;
  }

  StepTimeStats& st = s.step_time;
  st.steps = static_cast<int>(steps.size());
  st.warmup_excluded = st.steps > 2;
  std::vector<double> times;
  double tokens = 0, seconds = 0;
  for (auto it = steps.begin(); it != steps.end(); ++it) {
    if (st.warmup_excluded && it == steps.begin()) continue;
    times.push_back(it->second.time);
    tokens += static_cast<double>(it->second.tokens);
    seconds += it->second.time;
  }
  st.measured = static_cast<int>(times.size());
  if (!times.empty()) {
    std::sort(times.begin(), times.end());
    const size_t n = times.size();
    st.min_s = times.front();
    st.max_s = times.back();
    st.mean_s = seconds / static_cast<double>(n);
    st.median_s = n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
    s.tokens_per_step = tokens / static_cast<double>(n);
    s.tokens_per_s = seconds > 0 ? tokens / seconds : 0.0;
  }
  std::vector<int64_t> peaks;
  for (const RankSummary& r : s.ranks) peaks.push_back(r.peak_total);
  s.stragglers = compute_stragglers(run, peaks);
  return s;
}

// ---- JSON ---------------------------------------------------------------------------------------

namespace {

json mem_json(const MemArray& a) {
  json j = json::object();
  for (int c = 0; c < kNumMemCategories; ++c)
    if (mem_category_shown(static_cast<MemCategory>(c), a[c]))
      j[mem_category_name(static_cast<MemCategory>(c))] = a[c];
  return j;
}

json comm_json(const std::vector<CommStat>& v) {
  json out = json::array();
  for (const CommStat& c : v)
    out.push_back({{"op", c.op},
                   {"dtype", dtype_name(c.dtype)},
                   {"calls", c.calls},
                   {"bytes", c.bytes},
                   {"bytes_per_step", c.bytes_per_step},
                   {"sent", c.sent >= 0 ? json(c.sent) : json(nullptr)},
                   {"sent_per_step", c.sent >= 0 ? json(c.sent_per_step) : json(nullptr)}});
  return out;
}

}  // namespace

json summary_to_json(const RunSummary& s) {
  json j;
  j["version"] = SHARDLAB_VERSION;
  j["world_size"] = s.world_size;
  j["step_time"] = {{"steps", s.step_time.steps},
                    {"measured", s.step_time.measured},
                    {"warmup_excluded", s.step_time.warmup_excluded},
                    {"mean_s", s.step_time.mean_s},
                    {"median_s", s.step_time.median_s},
                    {"min_s", s.step_time.min_s},
                    {"max_s", s.step_time.max_s}};
  j["tokens_per_step"] = s.tokens_per_step;
  j["tokens_per_s"] = s.tokens_per_s;
  j["exposed_comm"] = {{"comm_ns", s.comm_ns},
                       {"exposed_ns", s.exposed_comm_ns},
                       {"fraction", s.exposed_comm_fraction},
                       {"comm_ns_per_step_per_rank", s.comm_ns_per_step},
                       {"exposed_ns_per_step_per_rank", s.exposed_comm_ns_per_step}};
  j["comm"] = comm_json(s.comm);
  // All ops together, per step and per rank: the figures of `shardlab summary`'s total row.
  {
    const CommStat t = comm_total(s.comm);
    const double ranks = s.world_size > 0 ? s.world_size : 1;
    const double steps = s.step_time.steps > 0 ? s.step_time.steps : 1;
    j["comm_per_step_per_rank"] = {
        {"calls", static_cast<double>(t.calls) / steps / ranks},
        {"sent", t.sent >= 0 ? json(t.sent_per_step / ranks) : json(nullptr)},
        {"buffer", t.bytes_per_step / ranks}};
  }
  json ranks = json::array();
  for (const RankSummary& r : s.ranks)
    ranks.push_back({{"rank", r.rank},
                     {"steps", r.steps},
                     {"peak_bytes", mem_json(r.peak)},
                     {"peak_total_bytes", r.peak_total},
                     {"at_peak_bytes", mem_json(r.at_peak)},
                     {"compute_ns", r.compute_ns},
                     {"comm_ns", r.comm_ns},
                     {"exposed_comm_ns", r.exposed_comm_ns},
                     {"exposed_comm_fraction", r.exposed_comm_fraction},
                     {"per_step",
                      {{"measured_steps", r.measured_steps},
                       {"compute_ns", r.compute_ns_per_step},
                       {"comm_ns", r.comm_ns_per_step},
                       {"exposed_comm_ns", r.exposed_comm_ns_per_step}}},
                     {"comm", comm_json(r.comm)}});
  for (size_t k = 0; k < s.ranks.size(); ++k) {
    const RankSummary& r = s.ranks[k];
    if (r.host_peak_total == 0 && r.copy_h2d_bytes == 0 && r.copy_d2h_bytes == 0) continue;
    ranks[k]["host_peak_total_bytes"] = r.host_peak_total;
    ranks[k]["host_at_peak_bytes"] = mem_json(r.host_at_peak);
    ranks[k]["copy_h2d_bytes"] = r.copy_h2d_bytes;
    ranks[k]["copy_d2h_bytes"] = r.copy_d2h_bytes;
    ranks[k]["copy_ns"] = r.copy_ns;
  }
  j["ranks"] = std::move(ranks);
  json exposed = json::array();
  for (const ExposedStat& e : s.exposed)
    exposed.push_back({{"op", e.op},
                       {"unit", e.unit},
                       {"calls", e.calls},
                       {"comm_ns", e.comm_ns},
                       {"exposed_ns", e.exposed_ns}});
  j["exposed_by_op_and_unit"] = {{"measured_steps", s.measured_steps},
                                 {"sums_over_ranks", std::move(exposed)}};
  j["stragglers"] = stragglers_to_json(s.stragglers);
  return j;
}

// ---- table --------------------------------------------------------------------------------------

namespace {

std::string meta_str(const json& meta, const char* key) {
  auto it = meta.find(key);
  if (it == meta.end() || it->is_null()) return "?";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

// "imported from torch.profiler: ..." for a run directory `shardlab import` wrote: which of the
// job's ranks it holds, on what, and the collectives whose size the traces do not hold.
void print_imported(const json& meta, std::ostream& os) {
  const auto imp = meta.is_object() ? meta.find("imported") : meta.end();
  if (imp == meta.end() || !imp->is_object()) return;
  const auto ranks = imp->find("ranks");
  const auto job = imp->find("job_world_size");
  std::string list;
  size_t held = 0;
  if (ranks != imp->end() && ranks->is_array()) {
    held = ranks->size();
    for (size_t i = 0; i < held && i < 8; ++i) list += (i ? ", " : "") + (*ranks)[i].dump();
    if (held > 8) list += ", ...";
  }
  os << "imported from " << meta_str(*imp, "from") << ": ";
  if (job != imp->end() && job->is_number_integer() && job->get<int64_t>() != int64_t(held))
    os << (held == 1 ? "rank " : "ranks ") << list << " of a " << job->dump() << "-rank job, as "
       << (held == 1 ? "row 0" : "rows 0-" + std::to_string(held - 1))
       << " (a subset: the other ranks' waits are not seen)";
  else
    os << "all " << held << " ranks of the job";
  const auto gpu = imp->find("gpu");
  if (gpu != imp->end() && gpu->is_string()) os << ", on " << gpu->get<std::string>();
  const auto mem = imp->find("memory");
  if (mem != imp->end() && mem->is_object())
    os << "; memory from the profiler's [memory] events, its categories inferred (unattributed: "
          "what the rules cannot place; docs/import.md)";
  const auto unknown = imp->find("comm_size_unknown");
  if (unknown != imp->end() && unknown->is_number_integer() && unknown->get<int64_t>() > 0)
    os << "; " << unknown->dump() << " collectives of a size the traces do not hold, as op(?)";
  os << "\n";
}

// Short column names of the categories, in MemCategory order.
constexpr const char* kShortNames[kNumMemCategories] = {
    "params", "params_u", "grads", "grads_u", "optim", "activ", "comm_buf", "work", "unattrib"};

void print_mem_table(const char* title, const RunSummary& s, bool at_peak, std::ostream& os) {
  os << title << "\n";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%-5s", "rank");
  os << buf;
  // A category's column shows when mem_category_shown says so of its largest value.
  MemArray most{};
  for (const RankSummary& r : s.ranks)
    for (int c = 0; c < kNumMemCategories; ++c)
      most[c] = std::max(most[c], (at_peak ? r.at_peak : r.peak)[c]);
  const auto shown = [&](int c) {
    return mem_category_shown(static_cast<MemCategory>(c), most[c]);
  };
  for (int c = 0; c < kNumMemCategories; ++c) {
    if (!shown(c)) continue;
    std::snprintf(buf, sizeof buf, " %10s", kShortNames[c]);
    os << buf;
  }
  std::snprintf(buf, sizeof buf, " %10s\n", "total");
  os << buf;
  for (const RankSummary& r : s.ranks) {
    std::snprintf(buf, sizeof buf, "%-5d", r.rank);
    os << buf;
    const MemArray& a = at_peak ? r.at_peak : r.peak;
    for (int c = 0; c < kNumMemCategories; ++c) {
      if (!shown(c)) continue;
      std::snprintf(buf, sizeof buf, " %10s", format_bytes(a[c]).c_str());
      os << buf;
    }
    std::snprintf(buf, sizeof buf, " %10s\n", format_bytes(r.peak_total).c_str());
    os << buf;
  }
}

}  // namespace

namespace {

// The collectives with the most exposed time, by op and unit, per step and rank.
void print_exposed(const RunSummary& s, const json& meta, std::ostream& os) {
  if (s.exposed.empty() || s.measured_steps == 0) return;
  const auto units = meta.is_object() ? meta.find("units") : meta.end();
  auto unit_name = [&](int u) -> std::string {
    if (u < 0) return "-";
    if (units != meta.end() && units->is_array() && u < static_cast<int>(units->size())) {
      const json& n = (*units)[static_cast<size_t>(u)];
      if (n.is_object() && n.contains("name") && n.at("name").is_string())
        return n.at("name").get<std::string>();
    }
    return std::to_string(u);
  };
  const double div = static_cast<double>(s.measured_steps) * std::max<size_t>(1, s.ranks.size());
  const size_t shown = std::min<size_t>(s.exposed.size(), 8);
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "\nexposed comm by collective and unit, per step and rank (the %zu most exposed of "
                "%zu; each collective's own time with no compute on its rank: collectives in "
                "flight together each count theirs)\n",
                shown, s.exposed.size());
  os << buf;
  std::snprintf(buf, sizeof buf, "%-16s %-16s %10s %13s %16s %10s\n", "op", "unit", "calls/step",
                "comm ms/step", "exposed ms/step", "exposed %");
  os << buf;
  for (size_t i = 0; i < shown; ++i) {
    const ExposedStat& e = s.exposed[i];
    std::snprintf(
        buf, sizeof buf, "%-16s %-16s %10.2f %13.3f %16.3f %10.1f\n", e.op.c_str(),
        unit_name(e.unit).c_str(), static_cast<double>(e.calls) / div,
        static_cast<double>(e.comm_ns) * 1e-6 / div, static_cast<double>(e.exposed_ns) * 1e-6 / div,
        e.comm_ns > 0 ? 100.0 * static_cast<double>(e.exposed_ns) / static_cast<double>(e.comm_ns)
                      : 0.0);
    os << buf;
  }
}
}  // namespace

void print_summary_table(const RunSummary& s, const json& meta, std::ostream& os) {
  char buf[256];
  os << "strategy " << meta_str(meta, "strategy") << "   world " << s.world_size << "   backend "
     << meta_str(meta, "backend") << "   started " << meta_str(meta, "start_time") << "\n";
  // The FSDP units (meta.json of shardlab train: config.wrap and the units by name).
  const auto units = meta.find("units");
  if (units != meta.end() && units->is_array()) {
    const auto cfg = meta.find("config");
    os << "units " << units->size() << " (wrap "
       << (cfg != meta.end() && cfg->is_object() ? meta_str(*cfg, "wrap") : std::string("?"))
       << "):";
    size_t shown = 0;
    for (const json& u : *units) {
      if (++shown > 8) {
        os << " ... (" << units->size() - 8 << " more)";
        break;
      }
      os << (shown == 1 ? " " : " | ")
         << (u.is_object() && u.contains("name") && u.at("name").is_string()
                 ? u.at("name").get<std::string>()
                 : std::string("?"));
    }
    os << "\n";
  }
  const auto sim = meta.is_object() ? meta.find("simulated") : meta.end();
  if (sim != meta.end() && sim->is_object()) {
    const auto n = sim->find("ranks");
    const auto r = sim->find("rank");
    os << "simulated: the predicted timeline of rank "
       << (r != sim->end() && r->is_number_integer() ? r->dump() : std::string("?")) << " of "
       << (n != sim->end() && n->is_number_integer() ? n->dump() : std::string("?"))
       << " ranks on cluster " << meta_str(*sim, "cluster")
       << " (virtual times; tokens/s below counts this rank's tokens)\n";
  }
  print_imported(meta, os);
  const StepTimeStats& st = s.step_time;
  std::snprintf(
      buf, sizeof buf,
      "steps %d (%d measured%s)   step time ms: mean %.3f  median %.3f  min %.3f  max %.3f\n",
      st.steps, st.measured, st.warmup_excluded ? ", first excluded as warm-up" : "",
      st.mean_s * 1e3, st.median_s * 1e3, st.min_s * 1e3, st.max_s * 1e3);
  os << buf;
  if (s.tokens_per_step > 0)
    std::snprintf(buf, sizeof buf, "tokens/s %.1f   tokens/step %.1f (all ranks)\n", s.tokens_per_s,
                  s.tokens_per_step);
  else  // an imported trace: its steps carry no token counts
    std::snprintf(buf, sizeof buf, "tokens/s ?   (the steps record no tokens)\n");
  os << buf;
  if (s.comm_ns_per_step > 0) {
    std::snprintf(buf, sizeof buf,
                  "exposed comm %.1f%% of comm time: %.3f of %.3f ms per step and rank (mean over "
                  "the measured steps and the ranks)\n\n",
                  100.0 * s.exposed_comm_ns_per_step / s.comm_ns_per_step,
                  s.exposed_comm_ns_per_step * 1e-6, s.comm_ns_per_step * 1e-6);
  } else {  // no measured step holds a span (a run of two steps, or spans outside the steps)
    std::snprintf(buf, sizeof buf,
                  "exposed comm %.1f%% of comm time: %.3f of %.3f ms, run totals summed over the "
                  "ranks\n\n",
                  100.0 * s.exposed_comm_fraction, s.exposed_comm_ns * 1e-6, s.comm_ns * 1e-6);
  }
  os << buf;

  bool memory = false;  // a run imported without [memory] events has none
  for (const RankSummary& r : s.ranks) memory = memory || r.peak_total > 0;
  if (memory) {
    print_mem_table("peak by category", s, false, os);
    os << "\n";
    print_mem_table("breakdown at the overall peak", s, true, os);
    os << "\n";
  } else {
    os << "memory: no memory events in the rank files\n\n";
  }
  // The host tier, apart from device memory (--offload): only when the run has one.
  bool host = false;
  for (const RankSummary& r : s.ranks)
    host = host || r.host_peak_total > 0 || r.copy_h2d_bytes > 0 || r.copy_d2h_bytes > 0;
  if (host) {
    os << "host memory and copies between tiers (--offload)\n";
    std::snprintf(buf, sizeof buf, "%-5s %12s %12s %12s %12s %12s %12s %12s\n", "rank",
                  "device peak", "host peak", "host params", "host grads", "host optim", "h2d/step",
                  "d2h/step");
    os << buf;
    for (const RankSummary& r : s.ranks) {
      const int64_t div = r.steps > 0 ? r.steps : 1;
      std::snprintf(
          buf, sizeof buf, "%-5d %12s %12s %12s %12s %12s %12s %12s\n", r.rank,
          format_bytes(r.peak_total).c_str(), format_bytes(r.host_peak_total).c_str(),
          format_bytes(r.host_at_peak[static_cast<int>(MemCategory::params)]).c_str(),
          format_bytes(r.host_at_peak[static_cast<int>(MemCategory::grads)]).c_str(),
          format_bytes(r.host_at_peak[static_cast<int>(MemCategory::optimizer_state)]).c_str(),
          format_bytes(r.copy_h2d_bytes / div).c_str(),
          format_bytes(r.copy_d2h_bytes / div).c_str());
      os << buf;
    }
    os << "\n";
  }

  // The two measures of core/comm/traffic.hpp, labelled as every report labels them: "sent per
  // rank" (ring traffic, what one rank sends) and "buffer" (the collective's full size). Per step
  // and rank: the run's sums divided by its steps (every step moves the same bytes) and ranks.
  const int steps = s.step_time.steps > 0 ? s.step_time.steps : 1;
  const double ranks = s.world_size > 0 ? s.world_size : 1;
  std::snprintf(buf, sizeof buf,
                "communication per step and rank (the run's sums / %d step%s / %d rank%s; sent "
                "per rank = the bytes one rank sends, ring traffic; buffer = the collective's full "
                "size, nccl-tests' convention)\n",
                steps, steps == 1 ? "" : "s", s.world_size, s.world_size == 1 ? "" : "s");
  os << buf;
  std::snprintf(buf, sizeof buf, "%-16s %-5s %10s %16s %16s\n", "op", "dtype", "calls/step",
                "sent per rank", "buffer");
  os << buf;
  auto sent_text = [&](const CommStat& c) {
    return c.sent >= 0 ? format_bytes(std::llround(c.sent_per_step / ranks)) : std::string("-");
  };
  auto calls_text = [&](int64_t calls) {
    char b[32];
    std::snprintf(b, sizeof b, "%.4g", static_cast<double>(calls) / steps / ranks);
    return std::string(b);
  };
  for (const CommStat& c : s.comm) {
    std::snprintf(buf, sizeof buf, "%-16s %-5s %10s %16s %16s\n", c.op.c_str(), dtype_name(c.dtype),
                  calls_text(c.calls).c_str(), sent_text(c).c_str(),
                  format_bytes(std::llround(c.bytes_per_step / ranks)).c_str());
    os << buf;
  }
  const CommStat total = comm_total(s.comm);
  if (s.comm.size() > 1) {
    std::snprintf(buf, sizeof buf, "%-16s %-5s %10s %16s %16s\n", "total", "",
                  calls_text(total.calls).c_str(), sent_text(total).c_str(),
                  format_bytes(std::llround(total.bytes_per_step / ranks)).c_str());
    os << buf;
  }
  if (s.comm.empty()) {
    os << "(no collectives recorded)\n";
  } else {
    std::snprintf(buf, sizeof buf,
                  "run totals, all ranks and steps: %lld calls, sent %s, buffer %s\n",
                  static_cast<long long>(total.calls),
                  total.sent >= 0 ? format_bytes(total.sent).c_str() : "-",
                  format_bytes(total.bytes).c_str());
    os << buf;
  }
  os << "\n";

  int measured = 0;
  for (const RankSummary& r : s.ranks) measured = std::max(measured, r.measured_steps);
  std::snprintf(buf, sizeof buf,
                "time per step and rank (mean over the %d measured step%s; exposed = comm with "
                "no compute on the rank)\n",
                measured, measured == 1 ? "" : "s");
  os << buf;
  std::snprintf(buf, sizeof buf, "%-5s %16s %16s %16s %10s\n", "rank", "compute ms/step",
                "comm ms/step", "exposed ms/step", "exposed %");
  os << buf;
  for (const RankSummary& r : s.ranks) {
    std::snprintf(
        buf, sizeof buf, "%-5d %16.3f %16.3f %16.3f %10.1f\n", r.rank, r.compute_ns_per_step * 1e-6,
        r.comm_ns_per_step * 1e-6, r.exposed_comm_ns_per_step * 1e-6,
        r.comm_ns_per_step > 0 ? 100.0 * r.exposed_comm_ns_per_step / r.comm_ns_per_step : 0.0);
    os << buf;
  }
  int64_t compute_total = 0;
  for (const RankSummary& r : s.ranks) compute_total = sat_add(compute_total, r.compute_ns);
  std::snprintf(buf, sizeof buf,
                "run totals, all ranks and steps: compute %.3f ms, comm %.3f ms, exposed %.3f ms "
                "(%.1f%%)\n",
                compute_total * 1e-6, s.comm_ns * 1e-6, s.exposed_comm_ns * 1e-6,
                100.0 * s.exposed_comm_fraction);
  os << buf;
  print_exposed(s, meta, os);
  if (!s.stragglers.empty()) {
    os << "\n";
    print_stragglers(s.stragglers, os);
  }
}

// flight.json's account of a run that did not end by itself, before the tables. A damaged file is
// said to be so, and the tables still follow: they are computed from the rank files alone.
static void print_how_it_ended(const std::string& run_dir, int world_size, std::ostream& os) {
  try {
    if (const std::optional<FlightReport> f = read_flight_report(run_dir))
      print_flight_report(*f, world_size, os);
  } catch (const Error& e) {
    os << "how the run ended: unknown, " << e.what() << "\n";
  }
}

int print_summary(const std::string& run_dir, std::ostream& os) {
  try {
    RunData run = read_run(run_dir);
    os << "run " << run_dir << (run.finished() ? "" : " (not finished: no summary.json yet)")
       << "\n";
    print_how_it_ended(run_dir, static_cast<int>(run.ranks.size()), os);
    print_summary_table(compute_summary(run), run.meta, os);
    return 0;
  } catch (const Error& e) {
    std::cerr << "shardlab summary: " << e.what() << "\n";
    return 1;
  }
}

// ---- several runs side by side ------------------------------------------------------------------

void print_summary_comparison(const std::vector<std::string>& names,
                              const std::vector<RunSummary>& runs, const std::vector<json>& metas,
                              std::ostream& os) {
  const size_t n = runs.size();
  // Each column is as wide as its run's name, at least 16.
  std::vector<int> width(n, 16);
  for (size_t i = 0; i < n; ++i) width[i] = std::max<int>(16, static_cast<int>(names[i].size()));
  char buf[256];
  auto row = [&](const std::string& label, auto&& cell) {
    std::snprintf(buf, sizeof buf, "%-30s", label.c_str());
    os << buf;
    for (size_t i = 0; i < n; ++i) {
      std::snprintf(buf, sizeof buf, "  %*s", width[i], cell(i).c_str());
      os << buf;
    }
    os << "\n";
  };
  auto num = [](const char* f, double v) {
    char b[64];
    std::snprintf(b, sizeof b, f, v);
    return std::string(b);
  };
  auto per_rank_step = [&](size_t i, double v) {
    const double steps = runs[i].step_time.steps > 0 ? runs[i].step_time.steps : 1;
    const double ranks = runs[i].world_size > 0 ? runs[i].world_size : 1;
    return v / steps / ranks;
  };
  row("", [&](size_t i) { return names[i]; });
  row("strategy", [&](size_t i) { return meta_str(metas[i], "strategy"); });
  row("ranks", [&](size_t i) { return std::to_string(runs[i].world_size); });
  row("parameters", [&](size_t i) {
    const auto m = metas[i].find("model");
    return m != metas[i].end() && m->is_object() ? meta_str(*m, "num_params") : std::string("?");
  });
  row("steps (measured)", [&](size_t i) {
    return std::to_string(runs[i].step_time.steps) + " (" +
           std::to_string(runs[i].step_time.measured) + ")";
  });
  row("step time ms, median",
      [&](size_t i) { return num("%.3f", runs[i].step_time.median_s * 1e3); });
  row("tokens/s (all ranks)", [&](size_t i) { return num("%.1f", runs[i].tokens_per_s); });
  row("peak memory, largest rank", [&](size_t i) {
    int64_t p = 0;
    for (const RankSummary& r : runs[i].ranks) p = std::max(p, r.peak_total);
    return format_bytes(p);
  });
  os << "per step and rank:\n";
  std::vector<std::string> ops;
  for (const RunSummary& s : runs)
    for (const CommStat& c : s.comm)
      if (std::find(ops.begin(), ops.end(), c.op) == ops.end()) ops.push_back(c.op);
  std::sort(ops.begin(), ops.end());
  for (const std::string& op : ops) {
    row("  " + op + " sent per rank", [&](size_t i) {
      double sent = 0;
      bool any = false, unknown = false;
      for (const CommStat& c : runs[i].comm)
        if (c.op == op) {
          any = true;
          unknown = unknown || c.sent < 0;
          sent += static_cast<double>(c.sent);
        }
      if (!any) return std::string("-");
      if (unknown) return std::string("?");
      return format_bytes(std::llround(per_rank_step(i, sent)));
    });
  }
  auto sent_of = [&](size_t i) {
    const CommStat t = comm_total(runs[i].comm);
    return t.sent >= 0 ? per_rank_step(i, static_cast<double>(t.sent)) : -1.0;
  };
  auto buffer_of = [&](size_t i) {
    return per_rank_step(i, static_cast<double>(comm_total(runs[i].comm).bytes));
  };
  row("  calls", [&](size_t i) {
    return num("%.4g", per_rank_step(i, static_cast<double>(comm_total(runs[i].comm).calls)));
  });
  row("  sent per rank, all ops", [&](size_t i) {
    return sent_of(i) >= 0 ? format_bytes(std::llround(sent_of(i))) : std::string("?");
  });
  row("  buffer, all ops", [&](size_t i) { return format_bytes(std::llround(buffer_of(i))); });
  row("  comm ms", [&](size_t i) { return num("%.3f", runs[i].comm_ns_per_step * 1e-6); });
  row("  exposed comm ms",
      [&](size_t i) { return num("%.3f", runs[i].exposed_comm_ns_per_step * 1e-6); });
  for (size_t i = 1; i < n; ++i) {
    auto ratio = [](double a, double b) {
      char r[32];
      if (a < 0 || b <= 0) return std::string("-");
      std::snprintf(r, sizeof r, "%.2fx", a / b);
      return std::string(r);
    };
    int64_t p0 = 0, pi = 0;
    for (const RankSummary& r : runs[0].ranks) p0 = std::max(p0, r.peak_total);
    for (const RankSummary& r : runs[i].ranks) pi = std::max(pi, r.peak_total);
    os << names[i] << " against " << names[0] << ", per step and rank: sent per rank "
       << ratio(sent_of(i), sent_of(0)) << ", buffer " << ratio(buffer_of(i), buffer_of(0))
       << "; peak memory " << ratio(static_cast<double>(pi), static_cast<double>(p0))
       << "; median step time " << ratio(runs[i].step_time.median_s, runs[0].step_time.median_s)
       << "\n";
  }
}

int print_summaries(const std::vector<std::string>& run_dirs, std::ostream& os) {
  if (run_dirs.size() == 1) return print_summary(run_dirs[0], os);
  std::vector<RunSummary> runs;
  std::vector<json> metas;
  for (const std::string& dir : run_dirs) {
    try {
      RunData run = read_run(dir);
      runs.push_back(compute_summary(run));
      metas.push_back(run.meta);
    } catch (const Error& e) {
      std::cerr << "shardlab summary: " << e.what() << "\n";
      return 1;
    }
  }
  print_summary_comparison(run_dirs, runs, metas, os);
  return 0;
}

}  // namespace shardlab
