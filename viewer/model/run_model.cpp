// Building a RunModel from RunData (see run_model.hpp).
#include "viewer/model/run_model.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>

#include "core/base/json_get.hpp"
#include "core/trace/summary.hpp"

namespace shardlab::viewer {

namespace {

// A capacity from meta.json: a number of bytes or a string like "512MiB"; 0 (no capacity line)
// for anything else, negative or beyond 2^62 (get<int64_t>() of 1e30 is undefined behaviour).
int64_t meta_bytes(const nlohmann::json& v) {
  constexpr int64_t kMax = int64_t(1) << 62;
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= uint64_t(kMax) ? v.get<int64_t>() : 0;
  if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    return x >= 0 && x <= kMax ? x : 0;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    return d >= 0 && d <= static_cast<double>(kMax) ? static_cast<int64_t>(d) : 0;
  }
  if (v.is_string()) {
    try {
      return parse_bytes(v.get<std::string>());
    } catch (const Error&) {
      return 0;
    }
  }
  return 0;
}

std::string meta_string(const nlohmann::json& meta, const char* key) {
  auto it = meta.find(key);
  return it != meta.end() && it->is_string() ? it->get<std::string>() : std::string();
}

void finish_bandwidth(std::array<OpStats, kNumOpKinds>& ops, int world) {
  for (int k = 0; k < kNumOpKinds; ++k)
    ops[k].bandwidth = collective_bandwidth(static_cast<OpKind>(k), ops[k].bytes, ops[k].ns, world);
}

}  // namespace

std::string unit_label(const RunInfo& info, int unit) {
  std::string label = "unit " + std::to_string(unit);
  if (unit >= 0 && unit < static_cast<int>(info.unit_names.size()) &&
      !info.unit_names[static_cast<size_t>(unit)].empty())
    label += ": " + info.unit_names[static_cast<size_t>(unit)];
  return label;
}

RunInfo read_run_info(const RunData& run) {
  RunInfo info;
  info.dir = run.dir;
  const nlohmann::json& m = run.meta;
  if (m.is_object()) {
    info.name = meta_string(m, "name");
    info.strategy = meta_string(m, "strategy");
    info.backend = meta_string(m, "backend");
    // A world beyond kMaxRunRanks (or not an integer) is damage: the rank count then comes from
    // the ranks the reader accepted, below.
    for (const char* key : {"world_size", "world", "ranks"}) {
      auto it = m.find(key);
      if (it != m.end() && it->is_number_integer()) {
        try {
          info.world = static_cast<int>(json_int(m, key, "meta.json", 1, kMaxRunRanks));
        } catch (const IoError&) {
          info.world = 0;
        }
        break;
      }
    }
    if (auto sim = m.find("simulated"); sim != m.end() && sim->is_object()) {
      auto n = sim->find("ranks");
      info.simulated_ranks = n != sim->end() && n->is_number_integer() && n->get<int64_t>() > 0 &&
                                     n->get<int64_t>() <= kMaxSimulatedRanks
                                 ? static_cast<int>(n->get<int64_t>())
                                 : 1;
      info.cluster = meta_string(*sim, "cluster");
    }
    // `shardlab train` writes the capacity inside "config"; other writers put it at the top.
    auto lim = m.find("mem_limit");
    if (lim != m.end()) {
      info.mem_limit = meta_bytes(*lim);
    } else if (auto cfg = m.find("config"); cfg != m.end() && cfg->is_object()) {
      auto c = cfg->find("mem_limit");
      if (c != cfg->end()) info.mem_limit = meta_bytes(*c);
    }
    // At most one name per possible unit of a real run (a damaged list sizes nothing).
    if (auto units = m.find("units"); units != m.end() && units->is_array())
      for (const nlohmann::json& u : *units) {
        if (info.unit_names.size() >= RunInfo::kMaxUnitNames) break;
        info.unit_names.push_back(u.is_object() && u.contains("name") && u.at("name").is_string()
                                      ? u.at("name").get<std::string>()
                                      : std::string());
      }
  }
  if (info.world <= 0) info.world = static_cast<int>(run.ranks.size());
  if (info.name.empty()) {
    std::string d = run.dir;
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    size_t slash = d.find_last_of('/');
    info.name = slash == std::string::npos ? d : d.substr(slash + 1);
  }
  // Panel titles carry the name: a prediction must never pass for a measurement.
  if (info.simulated_ranks > 0)
    info.name += " (simulated: " + std::to_string(info.simulated_ranks) + " ranks on " +
                 (info.cluster.empty() ? std::string("?") : info.cluster) + ", virtual time)";
  return info;
}

std::string beyond_note(const RunModel& m) {
  if (m.n_beyond == 0) return "";
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "%lld event%s far beyond the last step (from t = %.3g s): zoom out to see them",
                static_cast<long long>(m.n_beyond), m.n_beyond == 1 ? "" : "s",
                static_cast<double>(m.t_beyond_first) * 1e-9);
  return buf;
}

RunModel build_run_model(const RunData& run) {
  RunModel m;
  m.info = read_run_info(run);
  m.finished = run.finished();
  m.ranks.resize(run.ranks.size());
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    const RankTrace& tr = run.ranks[r];
    RankModel& rm = m.ranks[r];
    rm.t_last = tr.t_last;
    for (const SpanEvent& s : tr.spans) rm.t_last = std::max(rm.t_last, s.t_end);
    rm.mem = build_memory_series(tr.mem);
    rm.host_mem = build_memory_series(tr.host_mem);
    rm.bars = build_rank_bars(tr.spans);
    rm.units = build_unit_strips(tr.units, rm.t_last);
    rm.exposed = exposed_comm(tr.spans);
    for (const SpanEvent& s : tr.spans) {
      OpStats& o = rm.ops[static_cast<int>(classify_op(s.op))];
      ++o.count;
      o.bytes = saturating_add(o.bytes, s.bytes);
      o.sent = (o.sent < 0 || s.sent < 0) ? -1 : saturating_add(o.sent, s.sent);
      o.ns = saturating_add(o.ns, std::max<int64_t>(0, s.t_end - s.t_start));
    }
    finish_bandwidth(rm.ops, m.info.job_ranks());
    m.t_last = std::max(m.t_last, rm.t_last);
    m.n_events += static_cast<int64_t>(tr.mem.size() + tr.spans.size() + tr.units.size() +
                                       tr.steps.size() + tr.marks.size());

    for (int k = 0; k < kNumOpKinds; ++k) {
      OpStats& o = m.summary.ops[k];
      o.count += rm.ops[k].count;
      o.bytes = saturating_add(o.bytes, rm.ops[k].bytes);
      o.sent = (o.sent < 0 || rm.ops[k].sent < 0) ? -1 : saturating_add(o.sent, rm.ops[k].sent);
      o.ns = saturating_add(o.ns, rm.ops[k].ns);
    }
    m.summary.comm_ns = saturating_add(m.summary.comm_ns, rm.exposed.comm_ns);
    m.summary.exposed_ns = saturating_add(m.summary.exposed_ns, rm.exposed.exposed_ns);
    m.summary.max_peak = std::max(m.summary.max_peak, rm.mem.peak_total);
    m.has_host_mem = m.has_host_mem || !tr.host_mem.empty();
    m.has_copies = m.has_copies || !rm.bars.lane(Lane::copy).bars.empty();
    m.host_max_peak = std::max(m.host_max_peak, rm.host_mem.peak_total);
  }
  finish_bandwidth(m.summary.ops, m.info.job_ranks());

  m.steps = build_steps(run);
  m.t_view = m.t_last;
  if (!m.steps.empty()) {
    const int64_t body = std::max<int64_t>(m.steps.back().t_end, 0);
    const double bound =
        static_cast<double>(body) + std::max(10.0 * static_cast<double>(body), 1e10);
    if (static_cast<double>(m.t_last) > bound) {
      int64_t view = 0, first = INT64_MAX, beyond = 0;
      const auto see = [&](int64_t t) {
        if (static_cast<double>(t) > bound) {
          ++beyond;
          first = std::min(first, t);
        } else {
          view = std::max(view, t);
        }
      };
      for (const RankTrace& tr : run.ranks) {
        for (const MemEvent& e : tr.mem) see(e.t);
        for (const MemEvent& e : tr.host_mem) see(e.t);
        for (const SpanEvent& e : tr.spans) see(e.t_end);
        for (const UnitEvent& e : tr.units) see(e.t);
        for (const StepEvent& e : tr.steps) see(e.t);
        for (const MarkEvent& e : tr.marks) see(e.t);
      }
      m.t_view = std::max(view, body);
      m.n_beyond = beyond;
      m.t_beyond_first = first;
    }
  }
  // Throughput as `shardlab summary` defines it (core/trace/summary.hpp): tokens of all ranks over
  // the sum of step times (a step's time is the slowest rank's), the first step left out as warmup
  // when there are more than two; here only steps every rank has reported (a live run's last step
  // may be partial).
  int n_ranks = static_cast<int>(run.ranks.size());
  std::vector<const StepInfo*> complete;
  for (const StepInfo& s : m.steps)
    if (s.ranks_seen >= n_ranks) complete.push_back(&s);
  m.summary.n_steps = static_cast<int>(complete.size());
  m.summary.warmup_excluded = complete.size() > 2;
  double tokens = 0, seconds = 0;
  for (size_t i = m.summary.warmup_excluded ? 1 : 0; i < complete.size(); ++i) {
    tokens += static_cast<double>(complete[i]->tokens);
    if (std::isfinite(complete[i]->step_time)) seconds += complete[i]->step_time;
  }
  size_t measured = complete.size() - (m.summary.warmup_excluded ? 1 : 0);
  if (measured > 0) {
    m.summary.tokens_per_s = seconds > 0 ? tokens / seconds : 0;
    m.summary.mean_step_s = seconds / static_cast<double>(measured);
    m.summary.last_loss = complete.back()->loss;
  }
  std::vector<int64_t> peaks;
  for (const RankModel& rm : m.ranks) peaks.push_back(rm.mem.peak_total);
  m.summary.stragglers = compute_stragglers(run, peaks);
  return m;
}

}  // namespace shardlab::viewer
