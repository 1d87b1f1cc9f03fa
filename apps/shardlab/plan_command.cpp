// `shardlab plan`: builds one PlanInput per strategy, runs the planner (the engine on the meta
// device) and prints its tables.
#include "apps/shardlab/plan_command.hpp"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <ostream>

#include "core/base/error.hpp"
#include "core/checkpoint/hf_config.hpp"
#include "core/device/cluster_spec.hpp"
#include "core/fsdp/memory_plan.hpp"
#include "core/model/family.hpp"

namespace shardlab {

GPTConfig plan_model(const PlanCommandOptions& o) {
  GPTConfig m = o.hf_config.empty() ? GPTConfig::preset(o.model) : read_hf_config(o.hf_config);
  const struct {
    const char* flag;
    int value;
    int GPTConfig::*field;
  } overrides[] = {{"--n-layer", o.n_layer, &GPTConfig::n_layer},
                   {"--n-head", o.n_head, &GPTConfig::n_head},
                   {"--n-embd", o.n_embd, &GPTConfig::n_embd},
                   {"--vocab-size", o.vocab_size, &GPTConfig::vocab_size},
                   {"--max-seq-len", o.max_seq_len, &GPTConfig::max_seq_len}};
  for (const auto& ov : overrides) {
    if (ov.value < 0)
      SL_THROW(InvalidArgument, ov.flag, " ", ov.value, ": must be >= 1 (or 0 for the preset's)");
    if (ov.value > 0) m.*ov.field = ov.value;
  }
  if (m.n_embd % m.n_head != 0)
    SL_THROW(InvalidArgument, "--n-head ", m.n_head, " does not divide --n-embd ", m.n_embd,
             " (model ", o.model, "): each head takes n_embd / n_head channels");
  if (o.seq > m.max_seq_len)
    SL_THROW(InvalidArgument, "--seq ", o.seq, " exceeds the model's max_seq_len ", m.max_seq_len,
             " (lower --seq or raise --max-seq-len)");
  m.validate();
  if (m.n_layer > kMaxSimulatedLayers)
    SL_THROW(InvalidArgument, "--n-layer ", m.n_layer, ": more than the ", kMaxSimulatedLayers,
             " blocks the planner simulates (each block's layout and schedule is kept on the "
             "host)");
  return m;
}

int plan_command(const PlanCommandOptions& o, std::ostream& out) {
  SL_CHECK(o.ranks >= 1, "plan: --ranks ", o.ranks, " must be >= 1");
  SL_CHECK(o.params >= 0, "plan: --params ", o.params, " must be >= 0");
  const bool states_only = o.params > 0;
  if (states_only && !o.shape_flags_given.empty())
    SL_THROW(InvalidArgument, "--params with ", o.shape_flags_given.front(),
             ": --params plans model states of a bare parameter count; a shape (--model and its "
             "overrides) plans the whole step. Give one or the other");
  if (o.batch < 1) SL_THROW(InvalidArgument, "--batch ", o.batch, ": must be >= 1");
  if (o.seq < 0) SL_THROW(InvalidArgument, "--seq ", o.seq, ": must be >= 1 (0: the model's max)");
  o.engine.validate();
  std::vector<Strategy> strategies = o.strategies;
  if (strategies.empty())
    strategies = {Strategy::no_shard, Strategy::shard_optim, Strategy::shard_grad_op,
                  Strategy::full_shard, Strategy::hybrid_shard};
  // Settings that no planned strategy uses would be ignored without a word: refused, as train
  // refuses them.
  const auto planned = [&](bool (*pred)(Strategy)) {
    return std::any_of(strategies.begin(), strategies.end(), pred);
  };
  if (o.engine.hybrid_group > 0 && !planned([](Strategy s) { return s == Strategy::hybrid_shard; }))
    SL_THROW(InvalidArgument, "--hybrid-group ", o.engine.hybrid_group,
             " applies only to hybrid_shard, which this plan leaves out: drop it, or add "
             "--strategy hybrid_shard");
  if (o.engine.keep_root && !planned(gathers_params_per_unit))
    SL_THROW(InvalidArgument,
             "--keep-root applies only to full_shard and hybrid_shard (they free a unit's "
             "gathered parameters after forward), which this plan leaves out: drop it");
  EngineConfig engine = o.engine;
  if (engine.hybrid_group == 0) engine.hybrid_group = o.ranks % 2 == 0 && o.ranks > 2 ? 2 : o.ranks;

  std::shared_ptr<const ClusterSpec> cluster;
  if (o.cluster.empty() && !o.cluster_overrides.empty())
    SL_THROW(InvalidArgument,
             "--nodes, --gpus-per-node, --inter-node-gbps, --fabric and --headroom change "
             "--cluster's spec: give --cluster");
  if (!o.cluster.empty()) {
    if (states_only)
      SL_THROW(InvalidArgument, "--cluster with --params: timing needs a model shape (--model)");
    cluster =
        std::make_shared<const ClusterSpec>(load_cluster_spec(o.cluster, o.cluster_overrides));
    cluster->check_ranks(o.ranks);
  } else if (!o.math.empty()) {
    SL_THROW(InvalidArgument, "--math ", o.math,
             " without --cluster: GEMMs are timed only on a "
             "cluster");
  }

  std::vector<MemoryPlan> plans;
  GPTConfig model;
  if (!states_only) model = plan_model(o);
  std::vector<Strategy> refused;  // by --offload params: full parameters on every rank
  for (Strategy s : strategies) {
    engine.strategy = s;
    if (engine.offload == Offload::params && keeps_full_params(s)) {
      if (!o.strategies.empty()) engine.validate();  // asked for by name: the refusal
      refused.push_back(s);
      continue;
    }
    PlanInput in;
    if (states_only) {
      in.engine = engine;
      in.world = o.ranks;
      in.unit_numels = {o.params};
    } else {
      in = plan_input(engine, o.ranks, build_model(model, {o.attention}), o.batch, o.seq, o.accum);
      in.token_buffers = true;  // as `shardlab train` runs it
      in.cluster = cluster;
      if (!o.math.empty()) in.math = parse_gemm_math(o.math);
    }
    // On a cluster "fits" compares with its GPU's memory unless --mem-limit names a capacity.
    in.capacity = o.capacity > 0 || !cluster || states_only ? o.capacity : cluster->memory_bytes;
    plans.push_back(plan_memory(in));
  }

  char line[320];
  if (states_only) {
    std::snprintf(line, sizeof line,
                  "model states only for Psi = %lld parameters on N = %d ranks, params %s, grads "
                  "%s, Adam (fp32 m, v%s): no activations, gathered units or buffers, so no peak "
                  "and no \"fits\" (give --model for the whole step)\n",
                  static_cast<long long>(o.params), o.ranks, dtype_name(engine.param_dtype),
                  dtype_name(engine.reduce_dtype),
                  engine.param_dtype == DType::f32 ? "" : ", fp32 master");
  } else {
    std::snprintf(line, sizeof line,
                  "model %s: %s; N = %d ranks, B = %d x T = %d per rank, K = %d, params %s, "
                  "grads %s, prefetch %d%s%s%s%s%s\n",
                  (o.hf_config.empty() ? o.model : o.hf_config).c_str(), model.describe().c_str(),
                  o.ranks, o.batch, o.seq > 0 ? o.seq : model.max_seq_len, o.accum,
                  dtype_name(engine.param_dtype), dtype_name(engine.reduce_dtype), engine.prefetch,
                  o.attention == AttentionKernel::flash ? ", flash attention" : "",
                  engine.act_ckpt ? ", activation ckpt" : "",
                  engine.keep_root ? ", root kept for the backward" : "",
                  engine.offload != Offload::none ? ", offload " : "",
                  engine.offload != Offload::none ? offload_name(engine.offload) : "");
  }
  out << line;
  if (!states_only)
    out << "one step of the engine on the meta device (rank 0 of " << o.ranks << ")"
        << (cluster ? ", timed on cluster " + cluster->name + " (" + cluster->gpu_name + ")"
                    : std::string(": memory only (--cluster adds time)"))
        << "\n";
  out << format_plan_table(plans, o.decimal);
  if (cluster && !states_only && !plans.empty()) {
    const Headroom& h = cluster->headroom;
    char pct[32];
    std::snprintf(pct, sizeof pct, "%.1f%%", 100.0 * h.fragmentation);
    out << "fits: peak + headroom <= " << format_bytes(plans.front().input.capacity)
        << (o.capacity > 0 ? " (--mem-limit)" : " (the GPU's memory)") << "; headroom: context "
        << format_bytes(h.context_bytes) << " + NCCL "
        << format_bytes(h.nccl_bytes_per_communicator) << " per communicator + fragmentation "
        << pct << " of the peak (--headroom; docs/simulate.md)\n";
  }
  if (!refused.empty()) {
    out << "not planned with --offload params (they keep full parameters on every rank, so there "
           "is no shard to copy up; train refuses them):";
    for (Strategy s : refused) out << " " << strategy_name(s);
    out << "\n";
  }
  if (states_only) {
    if (o.capacity > 0 || o.engine.host_mem_limit > 0)
      out << "--mem-limit / --host-mem-limit not compared: model states only are not a peak "
             "(give --model for the whole step)\n";
    return 0;
  }

  const double unit = o.decimal ? 1e9 : 1048576.0;
  out << "\ntransient at the peak (" << (o.decimal ? "GB" : "MiB") << ")\n";
  std::snprintf(line, sizeof line, "%-14s %10s %10s %10s %10s %10s\n", "strategy", "p_unshard",
                "g_unshard", "activation", "comm", "workspace");
  out << line;
  for (const MemoryPlan& p : plans) {
    const auto v = [&](MemCategory c) {
      return static_cast<double>(p.transient[static_cast<int>(c)]) / unit;
    };
    std::snprintf(line, sizeof line, "%-14s %10.3f %10.3f %10.3f %10.3f %10.3f\n",
                  strategy_name(p.input.engine.strategy), v(MemCategory::params_unsharded),
                  v(MemCategory::grads_unsharded), v(MemCategory::activations),
                  v(MemCategory::comm_buffers), v(MemCategory::workspace));
    out << line;
  }
  const bool limited = std::any_of(plans.begin(), plans.end(), [](const MemoryPlan& p) {
    return p.input.capacity > 0 || p.input.engine.host_mem_limit > 0;
  });
  if (limited) {
    for (const MemoryPlan& p : plans)
      if (p.fits()) return 0;
    return 2;
  }
  return 0;
}

}  // namespace shardlab
