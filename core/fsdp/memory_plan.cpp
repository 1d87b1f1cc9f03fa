// The memory planner: persistent state from the strategy table, transient state from the engine's
// schedule, and a fixed-width table for `shardlab plan`.
#include "core/fsdp/memory_plan.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "core/base/error.hpp"
#include "core/fsdp/flat_param.hpp"

namespace shardlab {

int64_t PlanInput::psi() const {
  return std::accumulate(unit_numels.begin(), unit_numels.end(), int64_t{0});
}

int64_t MemoryPlan::persistent_total() const {
  return std::accumulate(persistent.begin(), persistent.end(), int64_t{0});
}

int64_t MemoryPlan::peak_total() const {
  return persistent_total() + std::accumulate(transient.begin(), transient.end(), int64_t{0});
}

MemArray MemoryPlan::peak_by_category() const {
  MemArray out{};
  for (int i = 0; i < kNumMemCategories; ++i) out[i] = persistent[i] + transient[i];
  return out;
}

StateBytes state_bytes(DType param_dtype, DType reduce_dtype) {
  const int64_t master = param_dtype == DType::f32 ? 0 : 4;
  return {static_cast<int64_t>(dtype_size(param_dtype)),
          static_cast<int64_t>(dtype_size(reduce_dtype)), 8 + master};
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

// Transient bytes at the step's peak. The engine (engine.cpp) allocates, per unit and in this order:
// the gathered flat params (params_unsharded, param dtype; only for full_shard/hybrid_shard, plus
// `prefetch` more units in flight), an fp32 compute copy when the param dtype is not f32 (workspace),
// the unit's full fp32 gradient during its backward (grads_unsharded; the root's lives through the
// whole backward because the tied wte gets gradient from the head first and the embedding last),
// and a reduce-dtype staging copy of it for the collective when the reduce dtype is not f32.
void plan_transient(const PlanInput& in, int group, MemoryPlan& plan) {
  std::vector<int64_t> padded;
  for (int64_t n : in.unit_numels) padded.push_back(round_up(n, group));
  const int64_t root = padded.empty() ? 0 : padded[0];
  int64_t block = 0;
  for (size_t i = 1; i < padded.size(); ++i) block = std::max(block, padded[i]);
  const int64_t p = dtype_size(in.param_dtype), g = dtype_size(in.reduce_dtype);
  const bool mixed = in.param_dtype != DType::f32;

  int64_t gathered = 0;  // elements of params gathered or cast at the peak
  if (gathers_params_per_unit(in.strategy)) {
    gathered = root + (1 + std::max(in.prefetch, 0)) * block;
    at(plan.transient, MemCategory::params_unsharded) = gathered * p;
  } else if (mixed) {
    gathered = root + block;  // fp32 compute copies of the root and the current block
  }
  if (mixed) at(plan.transient, MemCategory::workspace) += gathered * 4;
  at(plan.transient, MemCategory::grads_unsharded) = (root + block) * 4;
  if (in.reduce_dtype != DType::f32)
    at(plan.transient, MemCategory::comm_buffers) = std::max(root, block) * g;
  at(plan.transient, MemCategory::activations) += in.activations;
  at(plan.transient, MemCategory::workspace) += in.workspace;
}

}  // namespace

MemoryPlan plan_memory(const PlanInput& in) {
  SL_CHECK(in.world >= 1, "plan: world size ", in.world, " must be at least 1");
  SL_CHECK(!in.unit_numels.empty(), "plan: no units (give Psi or a model)");
  MemoryPlan plan;
  plan.input = in;
  plan.group = shard_group_size(in.strategy, in.world,
                                in.hybrid_group > 0 ? in.hybrid_group : in.world);
  const StateBytes b = state_bytes(in.param_dtype, in.reduce_dtype);
  const bool full_p = keeps_full_params(in.strategy), full_g = keeps_full_grads(in.strategy),
             full_o = keeps_full_optim(in.strategy);
  for (int64_t n : in.unit_numels) {
    SL_CHECK(n >= 0, "plan: unit size ", n, " is negative");
    const int64_t padded = round_up(n, plan.group), shard = padded / plan.group;
    plan.padded_psi += padded;
    at(plan.persistent, MemCategory::params) += (full_p ? padded : shard) * b.params;
    at(plan.persistent, MemCategory::grads) += (full_g ? padded : shard) * b.grads;
    at(plan.persistent, MemCategory::optimizer_state) += (full_o ? padded : shard) * b.optimizer;
  }
  const double exact = formula_persistent_bytes(in.strategy, static_cast<double>(in.psi()),
                                                in.world, plan.group, in.param_dtype,
                                                in.reduce_dtype);
  plan.padding_bytes = plan.persistent_total() - static_cast<int64_t>(exact + 0.5);
  plan_transient(in, plan.group, plan);
  return plan;
}

std::string format_plan_table(const std::vector<MemoryPlan>& plans, bool decimal) {
  const double unit = decimal ? 1e9 : 1048576.0;
  const char* uname = decimal ? "GB" : "MiB";
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-14s %4s %4s %10s %10s %10s %10s %10s %10s %10s  %s\n",
                "strategy", "N", "G", "params", "grads", "optim", "persist", "transient",
                "peak", "padding", "fits");
  out += line;
  std::snprintf(line, sizeof line, "%-14s %4s %4s %10s %10s %10s %10s %10s %10s %10s\n", "", "",
                "", uname, uname, uname, uname, uname, uname, "bytes");
  out += line;
  for (const MemoryPlan& p : plans) {
    const auto v = [&](int64_t b) { return static_cast<double>(b) / unit; };
    int64_t transient = p.peak_total() - p.persistent_total();
    std::snprintf(line, sizeof line,
                  "%-14s %4d %4d %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f %10lld  %s\n",
                  strategy_name(p.input.strategy), p.input.world, p.group,
                  v(p.persistent[static_cast<int>(MemCategory::params)]),
                  v(p.persistent[static_cast<int>(MemCategory::grads)]),
                  v(p.persistent[static_cast<int>(MemCategory::optimizer_state)]),
                  v(p.persistent_total()), v(transient), v(p.peak_total()),
                  static_cast<long long>(p.padding_bytes),
                  p.input.capacity <= 0 ? "-" : (p.fits() ? "yes" : "NO"));
    out += line;
  }
  return out;
}

}  // namespace shardlab
