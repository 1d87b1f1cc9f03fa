// The synthetic run generator (see synthetic_run.hpp).
#include "tests/viewer/synthetic_run.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <string>

#include "core/base/error.hpp"

namespace shardlab::viewer::testing {

namespace {

struct RawMem {
  int64_t t;
  int seq;  // keeps same-time events in the order they were made
  MemCategory c;
  int64_t delta;
};

int64_t ms(double v) { return static_cast<int64_t>(std::llround(v * 1e6)); }

// Per-rank simulation state.
struct RankSim {
  int64_t t_c = 0;     // compute stream free
  int64_t t_comm = 0;  // comm stream free
  int64_t t_copy = 0;  // copy stream free (--offload)
  std::vector<RawMem> mem, host_mem;
  int seq = 0;
  void alloc(int64_t t, MemCategory c, int64_t d) { mem.push_back({t, seq++, c, d}); }
  void host_alloc(int64_t t, MemCategory c, int64_t d) { host_mem.push_back({t, seq++, c, d}); }
};

}  // namespace

nlohmann::json synthetic_meta(const SyntheticOptions& opt) {
  nlohmann::json m = {{"name", opt.strategy == "no_shard" ? "synthetic-dp" : "synthetic-fsdp"},
                      {"strategy", opt.strategy},
                      {"backend", "local"},
                      {"world_size", opt.ranks},
                      {"synthetic", true},
                      {"units", opt.units},
                      {"steps", opt.steps}};
  if (opt.mem_limit > 0) m["mem_limit"] = opt.mem_limit;
  return m;
}

RunData make_synthetic_run(const SyntheticOptions& opt, const std::string& dir) {
  SL_CHECK(opt.ranks >= 1 && opt.units >= 1 && opt.steps >= 0, "synthetic run: bad sizes");
  const bool fsdp = opt.strategy != "no_shard";
  SL_CHECK(!opt.offload || fsdp, "synthetic run: --offload needs full_shard");
  const bool off = opt.offload;
  const int N = opt.ranks, U = opt.units;
  const int64_t P = opt.unit_param_bytes, A = opt.unit_act_bytes;
  const int64_t shard = (P + N - 1) / N;
  std::mt19937 rng(opt.seed);
  std::uniform_real_distribution<double> jit(1.0, 1.0 + opt.jitter);

  RunData run;
  run.dir = dir;
  run.meta = synthetic_meta(opt);
  run.ranks.resize(N);
  std::vector<RankSim> sim(N);

  auto comm_ns = [&](int64_t bytes) { return static_cast<int64_t>(bytes / opt.comm_gbps); };
  // A collective issued on every rank at issue[r]: starts when every rank's comm stream is free
  // and it has been issued everywhere; the same interval on every rank.
  auto collective = [&](const char* op, int unit, int64_t bytes,
                        const std::vector<int64_t>& issue) {
    int64_t start = 0;
    for (int r = 0; r < N; ++r) start = std::max({start, issue[r], sim[r].t_comm});
    int64_t end = start + comm_ns(bytes);
    // What each rank sends in a ring: (N-1)/N of the buffer, twice for an all-reduce.
    int64_t sent = bytes * (N - 1) / N * (std::string(op) == "all_reduce" ? 2 : 1);
    for (int r = 0; r < N; ++r) {
      sim[r].t_comm = end;
      SpanEvent e{Lane::comm, op, unit, bytes, DType::f32, issue[r], start, end, -1};
      e.sent = sent;
      run.ranks[r].spans.push_back(e);
    }
    return end;
  };
  auto compute = [&](int r, const char* op, int unit, double dur_ms, int64_t ready) {
    int64_t t0 = std::max(sim[r].t_c, ready);
    int64_t t1 = t0 + ms(dur_ms * jit(rng));
    run.ranks[r].spans.push_back({Lane::compute, op, unit, 0, DType::f32, t0, t0, t1, -1});
    sim[r].t_c = t1;
    return t0;
  };
  // A copy between the tiers on rank r's copy stream, from `ready` on; returns its end.
  auto copy = [&](int r, const char* op, int unit, int64_t bytes, int64_t ready) {
    int64_t t0 = std::max(sim[r].t_copy, ready);
    int64_t t1 = t0 + static_cast<int64_t>(bytes / opt.copy_gbps);
    run.ranks[r].spans.push_back({Lane::copy, op, unit, bytes, DType::f32, t0, t0, t1, -1});
    sim[r].t_copy = t1;
    return t1;
  };
  auto unit_state = [&](int r, int64_t t, int u, UnitState s) {
    run.ranks[r].units.push_back({t, u, s});
  };
  // Marks the span of `unit`'s last collective on rank r as waited on at time t.
  auto mark_wait = [&](int r, size_t span_index, int64_t t) {
    run.ranks[r].spans[span_index].t_wait = t;
  };

  // Persistent state at start: parameters (sharded or full), in the host tier under offload.
  for (int r = 0; r < N; ++r) {
    if (off)
      sim[r].host_alloc(0, MemCategory::params, shard * U);
    else
      sim[r].alloc(0, MemCategory::params, fsdp ? shard * U : P * U);
  }
  if (fsdp)
    for (int r = 0; r < N; ++r)
      for (int u = 0; u < U; ++u) unit_state(r, 0, u, UnitState::sharded);

  std::vector<int64_t> issue(N);
  std::vector<int64_t> ag_end(U);
  std::vector<std::vector<size_t>> ag_span(U, std::vector<size_t>(N));
  auto issue_gather = [&](int u, std::vector<int64_t> when) {
    if (off)  // the shard goes up first; the gather starts once it is there
      for (int r = 0; r < N; ++r) when[r] = copy(r, "h2d", u, shard, when[r]);
    for (int r = 0; r < N; ++r) {
      sim[r].alloc(when[r], MemCategory::params_unsharded, P);
      unit_state(r, when[r], u, UnitState::gathering);
      ag_span[u][r] = run.ranks[r].spans.size();
    }
    ag_end[u] = collective("all_gather", u, P, when);
    for (int r = 0; r < N; ++r) unit_state(r, ag_end[u], u, UnitState::unsharded);
  };
  auto reshard = [&](int r, int u, int64_t t) {
    sim[r].alloc(t, MemCategory::params_unsharded, -P);
    unit_state(r, t, u, UnitState::resharded);
  };

  for (int step = 0; step < opt.steps; ++step) {
    std::vector<int64_t> step_start(N);
    for (int r = 0; r < N; ++r) step_start[r] = sim[r].t_c;
    // ---- forward
    if (fsdp) {
      issue_gather(0, step_start);
    }
    for (int u = 0; u < U; ++u) {
      if (fsdp && u + 1 < U) {
        for (int r = 0; r < N; ++r) issue[r] = sim[r].t_c;
        issue_gather(u + 1, issue);  // prefetch the next unit while this one computes
      }
      for (int r = 0; r < N; ++r) {
        int64_t ready = fsdp ? ag_end[u] : 0;
        if (fsdp && ready > sim[r].t_c) mark_wait(r, ag_span[u][r], sim[r].t_c);
        int64_t t0 = compute(r, "forward", u, opt.fwd_ms, ready);
        sim[r].alloc(t0, MemCategory::activations, A);
        if (fsdp) reshard(r, u, sim[r].t_c);
      }
    }
    for (int r = 0; r < N; ++r) {
      int64_t t0 = compute(r, "loss", -1, opt.loss_ms, 0);
      sim[r].alloc(t0, MemCategory::workspace, opt.workspace_bytes);
      sim[r].alloc(sim[r].t_c, MemCategory::workspace, -opt.workspace_bytes);
    }
    // ---- backward, units in reverse; gradients leave by reduce-scatter (FSDP) or all-reduce
    if (fsdp) {
      for (int r = 0; r < N; ++r) issue[r] = sim[r].t_c;
      issue_gather(U - 1, issue);
    }
    int64_t last_comm_end = 0;
    for (int u = U - 1; u >= 0; --u) {
      if (fsdp && u - 1 >= 0) {
        for (int r = 0; r < N; ++r) issue[r] = sim[r].t_c;
        issue_gather(u - 1, issue);
      }
      for (int r = 0; r < N; ++r) {
        int64_t ready = fsdp ? ag_end[u] : 0;
        if (fsdp && ready > sim[r].t_c) mark_wait(r, ag_span[u][r], sim[r].t_c);
        int64_t t0 = compute(r, "backward", u, opt.bwd_ms, ready);
        sim[r].alloc(t0, MemCategory::grads_unsharded, P);
        sim[r].alloc(sim[r].t_c, MemCategory::activations, -A);
        if (step == 0 && u == U - 1) {
          if (off)
            sim[r].host_alloc(t0, MemCategory::grads, shard * U);
          else
            sim[r].alloc(t0, MemCategory::grads, fsdp ? shard * U : P * U);
        }
        issue[r] = sim[r].t_c;
      }
      int64_t end = collective(fsdp ? "reduce_scatter" : "all_reduce", u, P, issue);
      last_comm_end = end;
      for (int r = 0; r < N; ++r) {
        sim[r].alloc(end, MemCategory::grads_unsharded, -P);
        if (fsdp) reshard(r, u, std::max(end, sim[r].t_c));
        if (off) last_comm_end = std::max(last_comm_end, copy(r, "d2h", u, shard, end));
      }
    }
    // ---- optimizer on local shards, after the last gradient arrived
    for (int r = 0; r < N; ++r) {
      if (last_comm_end > sim[r].t_c) {
        // The last collective was waited on: note it on that rank's span.
        auto& spans = run.ranks[r].spans;
        for (size_t j = spans.size(); j-- > 0;)
          if (spans[j].lane == Lane::comm) {
            spans[j].t_wait = sim[r].t_c;
            break;
          }
      }
      int64_t t0 = compute(r, "optimizer", -1, opt.opt_ms, last_comm_end);
      if (step == 0 && off)
        sim[r].host_alloc(t0, MemCategory::optimizer_state, 2 * shard * U);
      else if (step == 0)
        sim[r].alloc(t0, MemCategory::optimizer_state, 2 * (fsdp ? shard * U : P * U));
      if (off) {  // the host step's scratch
        sim[r].host_alloc(t0, MemCategory::workspace, shard);
        sim[r].host_alloc(sim[r].t_c, MemCategory::workspace, -shard);
      }
      double loss = 4.0 * std::exp(-0.02 * step) + 1.5 + 0.01 * r;
      double step_s = static_cast<double>(sim[r].t_c - step_start[r]) * 1e-9;
      run.ranks[r].steps.push_back({sim[r].t_c, step, loss, opt.tokens_per_rank, step_s});
    }
  }

  // Mem events in time order with running totals, as the tracker reports them (the host tier's
  // tracker apart).
  auto replay = [](std::vector<RawMem>& raw, std::vector<MemEvent>& out) {
    std::sort(raw.begin(), raw.end(), [](const RawMem& a, const RawMem& b) {
      return a.t != b.t ? a.t < b.t : a.seq < b.seq;
    });
    MemArray cur{};
    int64_t total = 0;
    for (const RawMem& m : raw) {
      cur[static_cast<int>(m.c)] += m.delta;
      total += m.delta;
      out.push_back({m.t, m.c, m.delta, cur[static_cast<int>(m.c)], total});
    }
  };
  for (int r = 0; r < N; ++r) {
    RankTrace& tr = run.ranks[r];
    replay(sim[r].mem, tr.mem);
    replay(sim[r].host_mem, tr.host_mem);
    std::stable_sort(tr.units.begin(), tr.units.end(),
                     [](const UnitEvent& a, const UnitEvent& b) { return a.t < b.t; });
    tr.t_last = 0;
    for (const MemEvent& e : tr.mem) tr.t_last = std::max(tr.t_last, e.t);
    for (const MemEvent& e : tr.host_mem) tr.t_last = std::max(tr.t_last, e.t);
    for (const SpanEvent& e : tr.spans) tr.t_last = std::max(tr.t_last, e.t_end);
    for (const StepEvent& e : tr.steps) tr.t_last = std::max(tr.t_last, e.t);
  }
  if (opt.steps > 0) run.summary = {{"steps", opt.steps}, {"synthetic", true}};
  return run;
}

std::vector<std::pair<int64_t, std::string>> rank_lines(const RunData& run, int rank) {
  const RankTrace& tr = run.ranks[rank];
  std::vector<std::pair<int64_t, std::string>> out;
  // One line per memory event; the host tier's carry "tier": "host", as the recorder writes them.
  const auto mem_line = [rank](const MemEvent& e, bool host) {
    nlohmann::json j{{"t", e.t},         {"rank", rank},
                     {"kind", "mem"},    {"category", mem_category_name(e.category)},
                     {"bytes", e.bytes}, {"cat_total", e.cat_total},
                     {"total", e.total}};
    if (host) j["tier"] = "host";
    return j.dump();
  };
  for (const MemEvent& e : tr.mem) out.emplace_back(e.t, mem_line(e, false));
  for (const MemEvent& e : tr.host_mem) out.emplace_back(e.t, mem_line(e, true));
  for (const SpanEvent& e : tr.spans) {
    nlohmann::json j{{"t", e.t_end},         {"rank", rank},
                     {"kind", "span"},       {"lane", lane_name(e.lane)},
                     {"op", e.op},           {"unit", e.unit},
                     {"bytes", e.bytes},     {"dtype", dtype_name(e.dtype)},
                     {"t_issue", e.t_issue}, {"t_start", e.t_start},
                     {"t_end", e.t_end},     {"t_wait", e.t_wait}};
    if (e.sent >= 0) j["sent"] = e.sent;
    out.emplace_back(e.t_end, j.dump());
  }
  for (const UnitEvent& e : tr.units)
    out.emplace_back(e.t, nlohmann::json{{"t", e.t},
                                         {"rank", rank},
                                         {"kind", "unit"},
                                         {"unit", e.unit},
                                         {"state", unit_state_name(e.state)}}
                              .dump());
  for (const StepEvent& e : tr.steps)
    out.emplace_back(e.t, nlohmann::json{{"t", e.t},
                                         {"rank", rank},
                                         {"kind", "step"},
                                         {"step", e.step},
                                         {"loss", e.loss},
                                         {"tokens", e.tokens},
                                         {"step_time", e.step_time}}
                              .dump());
  for (const MarkEvent& e : tr.marks)
    out.emplace_back(
        e.t, nlohmann::json{{"t", e.t}, {"rank", rank}, {"kind", "mark"}, {"text", e.text}}.dump());
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

RunDirWriter::RunDirWriter(const RunData& run, std::string dir) : run_(run), dir_(std::move(dir)) {
  for (size_t r = 0; r < run.ranks.size(); ++r)
    lines_.push_back(rank_lines(run, static_cast<int>(r)));
  next_.assign(lines_.size(), 0);
  partial_.assign(lines_.size(), 0);
}

void RunDirWriter::write_meta() {
  std::filesystem::create_directories(dir_);
  std::ofstream(dir_ + "/meta.json") << run_.meta.dump(2) << "\n";
}

int64_t RunDirWriter::append_until(int64_t t_ns) {
  int64_t n = 0;
  for (size_t r = 0; r < lines_.size(); ++r) {
    std::ofstream f(dir_ + "/rank" + std::to_string(r) + ".jsonl", std::ios::app);
    while (next_[r] < lines_[r].size() && lines_[r][next_[r]].first <= t_ns) {
      f << lines_[r][next_[r]].second.substr(partial_[r]) << "\n";
      partial_[r] = 0;
      ++next_[r];
      ++n;
    }
  }
  return n;
}

void RunDirWriter::append_partial(int rank, size_t chars) {
  if (next_[rank] >= lines_[rank].size()) return;
  const std::string& line = lines_[rank][next_[rank]].second;
  chars = std::min(chars, line.size() - 1);
  if (chars <= partial_[rank]) return;
  std::ofstream f(dir_ + "/rank" + std::to_string(rank) + ".jsonl", std::ios::app);
  f << line.substr(partial_[rank], chars - partial_[rank]);
  partial_[rank] = chars;
}

void RunDirWriter::write_summary() {
  std::ofstream(dir_ + "/summary.json") << run_.summary.dump(2) << "\n";
}

bool RunDirWriter::done() const {
  for (size_t r = 0; r < lines_.size(); ++r)
    if (next_[r] < lines_[r].size()) return false;
  return true;
}

void write_run_dir(const RunData& run, const std::string& dir) {
  RunDirWriter w(run, dir);
  w.write_meta();
  w.append_until(INT64_MAX);
  if (run.finished()) w.write_summary();
}

}  // namespace shardlab::viewer::testing
