// `shardlab plan`: builds one PlanInput per strategy and prints the planner's tables.
#include "apps/shardlab/plan_command.hpp"

#include <cstdio>
#include <ostream>

#include "core/base/error.hpp"
#include "core/fsdp/memory_plan.hpp"
#include "core/model/config.hpp"

namespace shardlab {

int plan_command(const PlanCommandOptions& o, std::ostream& out) {
  SL_CHECK(o.ranks >= 1, "plan: --ranks ", o.ranks, " must be >= 1");
  SL_CHECK(o.params >= 0, "plan: --params ", o.params, " must be >= 0");
  o.engine.validate();
  std::vector<Strategy> strategies = o.strategies;
  if (strategies.empty())
    strategies = {Strategy::no_shard, Strategy::shard_optim, Strategy::shard_grad_op,
                  Strategy::full_shard, Strategy::hybrid_shard};
  EngineConfig engine = o.engine;
  if (engine.hybrid_group == 0) engine.hybrid_group = o.ranks % 2 == 0 && o.ranks > 2 ? 2 : o.ranks;

  std::vector<MemoryPlan> plans;
  GPTConfig model;
  if (o.params == 0) model = GPTConfig::preset(o.model);
  std::vector<Strategy> refused;  // by --offload params: full parameters on every rank
  for (Strategy s : strategies) {
    engine.strategy = s;
    if (engine.offload == Offload::params && keeps_full_params(s)) {
      if (!o.strategies.empty()) engine.validate();  // asked for by name: the refusal
      refused.push_back(s);
      continue;
    }
    PlanInput in;
    if (o.params > 0) {
      in.engine = engine;
      in.world = o.ranks;
      in.unit_numels = {o.params};
    } else {
      in = plan_input(engine, o.ranks, model, o.batch, o.seq, o.accum);
      in.token_buffers = true;  // as `shardlab train` runs it
    }
    in.capacity = o.capacity;
    plans.push_back(plan_memory(in));
  }

  char line[256];
  if (o.params > 0) {
    std::snprintf(line, sizeof line,
                  "model states for Psi = %lld parameters on N = %d ranks, params %s, grads %s, "
                  "Adam (fp32 m, v%s)\n",
                  static_cast<long long>(o.params), o.ranks, dtype_name(engine.param_dtype),
                  dtype_name(engine.reduce_dtype),
                  engine.param_dtype == DType::f32 ? "" : ", fp32 master");
  } else {
    std::snprintf(line, sizeof line,
                  "model %s: %s; N = %d ranks, B = %d x T = %d per rank, K = %d, params %s, "
                  "grads %s, prefetch %d%s\n",
                  o.model.c_str(), model.describe().c_str(), o.ranks, o.batch,
                  o.seq > 0 ? o.seq : model.max_seq_len, o.accum, dtype_name(engine.param_dtype),
                  dtype_name(engine.reduce_dtype), engine.prefetch,
                  engine.act_ckpt ? ", activation ckpt" : "");
  }
  out << line << format_plan_table(plans, o.decimal);
  if (!refused.empty()) {
    out << "not planned with --offload params (they keep full parameters on every rank, so there "
           "is no shard to copy up; train refuses them):";
    for (Strategy s : refused) out << " " << strategy_name(s);
    out << "\n";
  }

  if (o.params == 0) {
    const double unit = o.decimal ? 1e9 : 1048576.0;
    out << "\ntransient at the peak (" << (o.decimal ? "GB" : "MiB") << ")\n";
    std::snprintf(line, sizeof line, "%-14s %10s %10s %10s %10s %10s  %s\n", "strategy",
                  "p_unshard", "g_unshard", "activation", "comm", "workspace", "peak during");
    out << line;
    for (const MemoryPlan& p : plans) {
      const auto v = [&](MemCategory c) {
        return static_cast<double>(p.transient[static_cast<int>(c)]) / unit;
      };
      std::snprintf(line, sizeof line, "%-14s %10.3f %10.3f %10.3f %10.3f %10.3f  %s\n",
                    strategy_name(p.input.engine.strategy), v(MemCategory::params_unsharded),
                    v(MemCategory::grads_unsharded), v(MemCategory::activations),
                    v(MemCategory::comm_buffers), v(MemCategory::workspace), p.peak_where.c_str());
      out << line;
    }
  }
  if (o.capacity > 0 || o.engine.host_mem_limit > 0) {
    for (const MemoryPlan& p : plans)
      if (p.fits()) return 0;
    return 2;
  }
  return 0;
}

}  // namespace shardlab
