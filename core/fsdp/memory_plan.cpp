// The memory planner: persistent state from the strategy table, transient state from the engine's
// schedule, and a fixed-width table for `shardlab plan`.
#include "core/fsdp/memory_plan.hpp"
#include "core/fsdp/wrap_policy.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "core/base/error.hpp"
#include "core/fsdp/flat_param.hpp"
#include "core/model/params.hpp"

namespace shardlab {

int64_t PlanInput::psi() const {
  return std::accumulate(unit_numels.begin(), unit_numels.end(), int64_t{0});
}

PlanInput plan_input(const EngineConfig& engine, int world, const GPTConfig& model, int batch,
                     int seq_len, int accum) {
  PlanInput in;
  in.engine = engine;
  in.world = world;
  in.model = model;
  in.batch = batch;
  in.seq_len = seq_len;
  in.accum = accum;
  return in;
}

int64_t MemoryPlan::persistent_total() const {
  return std::accumulate(persistent.begin(), persistent.end(), int64_t{0});
}

int64_t MemoryPlan::peak_total() const {
  return persistent_total() + std::accumulate(transient.begin(), transient.end(), int64_t{0});
}

int64_t MemoryPlan::host_peak_total() const {
  return std::accumulate(host_persistent.begin(), host_persistent.end(), int64_t{0}) +
         std::accumulate(host_transient.begin(), host_transient.end(), int64_t{0});
}

MemArray MemoryPlan::peak_by_category() const {
  MemArray out{};
  for (int i = 0; i < kNumMemCategories; ++i) out[i] = persistent[i] + transient[i];
  return out;
}

StateBytes state_bytes(DType param_dtype, DType reduce_dtype, int64_t optim_bytes) {
  const int64_t master = param_dtype == DType::f32 ? 0 : 4;
  return {static_cast<int64_t>(dtype_size(param_dtype)),
          static_cast<int64_t>(dtype_size(reduce_dtype)), optim_bytes + master};
}

int64_t optimizer_bytes_per_param(const OptimizerConfig& o) {
  if (o.kind == OptimizerKind::adamw) return 8;
  return o.momentum != 0.0f ? 4 : 0;
}

double formula_persistent_bytes(Strategy s, double psi, int world, int hybrid_group,
                                DType param_dtype, DType reduce_dtype) {
  const StateBytes b = state_bytes(param_dtype, reduce_dtype);
  const double p = static_cast<double>(b.params), g = static_cast<double>(b.grads),
               o = static_cast<double>(b.optimizer);
  const double n = world;
  switch (s) {
    case Strategy::no_shard: return (p + g + o) * psi;
    case Strategy::shard_optim: return (p + g) * psi + o * psi / n;
    case Strategy::shard_grad_op: return p * psi + (g + o) * psi / n;
    case Strategy::full_shard: return (p + g + o) * psi / n;
    case Strategy::hybrid_shard:
      return (p + g + o) * psi / shard_group_size(s, world, hybrid_group);
  }
  return 0;
}

namespace {

int64_t& at(MemArray& a, MemCategory c) { return a[static_cast<int>(c)]; }

}  // namespace

MemoryPlan plan_memory(const PlanInput& in) {
  SL_CHECK(in.world >= 1, "plan: world size ", in.world, " must be at least 1");
  MemoryPlan plan;
  plan.input = in;
  if (in.model) {
    plan.input.unit_numels.clear();
    const WrapPlan w = make_wrap_plan(*in.model, parse_wrap_policy(in.engine.wrap));
    for (const WrapUnit& u : w.units) plan.input.unit_numels.push_back(u.numel);
  }
  SL_CHECK(!plan.input.unit_numels.empty(), "plan: no units (give Psi or a model)");
  const EngineConfig& e = in.engine;
  plan.group =
      shard_group_size(e.strategy, in.world, e.hybrid_group > 0 ? e.hybrid_group : in.world);
  const StateBytes b =
      state_bytes(e.param_dtype, e.reduce_dtype, optimizer_bytes_per_param(e.optim));
  const bool full_p = keeps_full_params(e.strategy), full_g = keeps_full_grads(e.strategy),
             full_o = keeps_full_optim(e.strategy);
  for (int64_t n : plan.input.unit_numels) {
    SL_CHECK(n >= 0, "plan: unit size ", n, " is negative");
    const int64_t padded = round_up(n, plan.group), shard = padded / plan.group;
    plan.padded_psi += padded;
    at(plan.persistent, MemCategory::params) += (full_p ? padded : shard) * b.params;
    at(plan.persistent, MemCategory::grads) += (full_g ? padded : shard) * b.grads;
    at(plan.persistent, MemCategory::optimizer_state) += (full_o ? padded : shard) * b.optimizer;
  }
  const double exact =
      formula_persistent_bytes(e.strategy, static_cast<double>(plan.input.psi()), in.world,
                               plan.group, e.param_dtype, e.reduce_dtype);
  plan.padding_bytes = plan.persistent_total() - static_cast<int64_t>(exact + 0.5);
  // --offload: the optimizer state (optim), and the parameter and gradient shards (params) move
  // to the host tier. What each step holds there on top is the schedule's (plan_schedule.cpp).
  if (e.offload == Offload::params)
    SL_CHECK(!keeps_full_params(e.strategy) && plan.group > 1, "plan: --offload params needs ",
             "sharded parameters in a group of 2 or more ranks (", strategy_name(e.strategy),
             ", group ", plan.group, "), as the engine does");
  if (e.offload != Offload::none) {
    std::swap(at(plan.host_persistent, MemCategory::optimizer_state),
              at(plan.persistent, MemCategory::optimizer_state));
    if (e.offload == Offload::params)
      for (MemCategory c : {MemCategory::params, MemCategory::grads})
        std::swap(at(plan.host_persistent, c), at(plan.persistent, c));
  }
  if (in.model) plan_step_transient(plan);
  return plan;
}

std::string format_plan_table(const std::vector<MemoryPlan>& plans, bool decimal) {
  const double unit = decimal ? 1e9 : 1048576.0;
  const char* uname = decimal ? "GB" : "MiB";
  std::string out;
  char line[512];
  // With --offload a last column: the host tier's planned peak (before "fits", which covers both).
  bool host = false;
  for (const MemoryPlan& p : plans) host = host || p.input.engine.offload != Offload::none;
  std::snprintf(line, sizeof line, "%-14s %4s %4s %10s %10s %10s %10s %10s %10s %10s %s %s\n",
                "strategy", "N", "G", "params", "grads", "optim", "persist", "transient", "peak",
                "padding", host ? "host peak " : "", "fits");
  out += line;
  std::snprintf(line, sizeof line, "%-14s %4s %4s %10s %10s %10s %10s %10s %10s %10s%s%s\n", "", "",
                "", uname, uname, uname, uname, uname, uname, "bytes", host ? "       " : "",
                host ? uname : "");
  out += line;
  for (const MemoryPlan& p : plans) {
    const auto v = [&](int64_t b) { return static_cast<double>(b) / unit; };
    int64_t transient = p.peak_total() - p.persistent_total();
    char host_col[32] = "";
    if (host) std::snprintf(host_col, sizeof host_col, " %10.3f", v(p.host_peak_total()));
    std::snprintf(
        line, sizeof line, "%-14s %4d %4d %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f %10lld%s  %s\n",
        strategy_name(p.input.engine.strategy), p.input.world, p.group,
        v(p.persistent[static_cast<int>(MemCategory::params)]),
        v(p.persistent[static_cast<int>(MemCategory::grads)]),
        v(p.persistent[static_cast<int>(MemCategory::optimizer_state)]), v(p.persistent_total()),
        v(transient), v(p.peak_total()), static_cast<long long>(p.padding_bytes), host_col,
        p.input.capacity <= 0 && p.input.engine.host_mem_limit <= 0 ? "-"
                                                                    : (p.fits() ? "yes" : "NO"));
    out += line;
  }
  return out;
}

}  // namespace shardlab
