// The memory planner: one step of the engine on the meta device (a model), or the strategy table's
// persistent bytes (a bare parameter count), and a fixed-width table for `shardlab plan`.
#include "core/fsdp/memory_plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "core/base/error.hpp"
#include "core/base/virtual_clock.hpp"
#include "core/comm/sim_comm.hpp"
#include "core/device/meta_device.hpp"
#include "core/fsdp/engine.hpp"
#include "core/fsdp/flat_param.hpp"
#include "core/fsdp/mesh.hpp"
#include "core/fsdp/wrap_policy.hpp"
#include "core/trace/recorder.hpp"

namespace shardlab {

int64_t PlanInput::psi() const {
  return std::accumulate(unit_numels.begin(), unit_numels.end(), int64_t{0});
}

PlanInput plan_input(const EngineConfig& engine, int world, const Model& model, int batch,
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

// The cluster of a memory-only plan: one rank per node (any group is whole nodes), figures that
// only have to be valid. Its times are never read.
std::shared_ptr<const ClusterSpec> memory_only_cluster(int world) {
  auto c = std::make_shared<ClusterSpec>();
  c->name = "memory-only";
  c->source = "shardlab plan without --cluster: times unused";
  c->nodes = world;
  c->ranks_per_node = 1;
  c->gpu_name = "any";
  for (double& f : c->peak_flops) f = 1e15;
  c->memory_bandwidth = 1e12;
  c->intra_node = c->inter_node = c->host_link = {1e11, 1e-6};
  return c;
}

// A tracker's bytes by category from the moment `listen` starts, and their peak: the step's own
// peak, apart from what the engine's construction took and gave back before it.
struct StepPeak {
  MemArray cur{}, at_peak{};
  int64_t total = 0, peak = 0;

  void listen(MemoryTracker& t) {
    cur = t.current_all();
    at_peak = cur;
    total = peak = t.total();
    t.set_listener([this](const MemoryTracker::Change& ch) {
      cur[static_cast<int>(ch.category)] = ch.category_total;
      total = ch.total;
      if (total > peak) {
        peak = total;
        at_peak = cur;
      }
    });
  }
};

// One training step of the engine on rank 0 of N on the meta device: persistent and transient
// bytes of both tiers from the trackers, and with a cluster the step's virtual time.
void simulate_step(MemoryPlan& plan) {
  const PlanInput& in = plan.input;
  const Model& model = *in.model;
  const int T = in.seq_len > 0 ? in.seq_len : model.max_seq_len();
  SL_CHECK(in.batch >= 1 && in.accum >= 1, "plan: batch ", in.batch, " and accum ", in.accum,
           " must be >= 1");
  SL_CHECK(T >= 1 && T <= model.max_seq_len(), "plan: sequence length ", T, " must be in [1, ",
           model.max_seq_len(), "] (the model's max_seq_len)");
  std::shared_ptr<const ClusterSpec> spec = in.cluster ? in.cluster : memory_only_cluster(in.world);
  const GemmMath math =
      in.math ? *in.math : (in.engine.param_dtype == DType::f32 ? GemmMath::fp32 : GemmMath::bf16);
  VirtualClock clock;
  ScopedVirtualClock on_this_thread(clock);
  MemoryTracker tracker(0);
  // Rank 0 of in.world, as launch_sim builds each simulated rank: ranks sharing a node's devices
  // compute at their share, and ranks in lockstep at the spec's lockstep efficiency.
  MetaDevice dev(tracker, *spec, clock, math, MetaTier::device, in.world);
  std::unique_ptr<Recorder> rec = Recorder::disabled(0);
  std::unique_ptr<Communicator> world = make_sim_communicator(spec, in.world, 0, clock);
  world->set_recorder(rec.get());
  // Capacities are the plan's to compare with, not the simulated engine's to enforce: an engine
  // stopped by OutOfMemory would leave no peak to report.
  EngineConfig ec = in.engine;
  ec.host_mem_limit = 0;
  Engine engine(dev, *world, rec.get(), model, ec);
  plan.persistent = engine.persistent_bytes();
  plan.host_persistent = engine.host_persistent_bytes();

  StepPeak step;
  step.listen(tracker);
  const int64_t rows = static_cast<int64_t>(in.batch) * in.accum;
  Buffer tokens, targets;
  std::vector<const int*> tok, tgt;
  const int64_t t0 = clock.now_ns, w0 = clock.waited_ns;
  if (in.token_buffers) {  // as the trainer's EngineStepper keeps them: on the device
    tokens = dev.alloc(rows * T * 4, MemCategory::activations);
    targets = dev.alloc(rows * T * 4, MemCategory::activations);
    dev.copy_from_host(tokens.data(), nullptr, rows * T * 4);
    dev.copy_from_host(targets.data(), nullptr, rows * T * 4);
  }
  for (int k = 0; k < in.accum; ++k) {
    // The meta device's kernels never read token ids; any address stands for them.
    const int64_t off = static_cast<int64_t>(k) * in.batch * T;
    tok.push_back(tokens.empty() ? reinterpret_cast<const int*>(&plan) : tokens.as<int>() + off);
    tgt.push_back(targets.empty() ? reinterpret_cast<const int*>(&plan) : targets.as<int>() + off);
  }
  engine.step(tok, tgt, in.batch, T);
  const int64_t t1 = clock.now_ns, w1 = clock.waited_ns;
  tracker.set_listener(nullptr);

  for (int i = 0; i < kNumMemCategories; ++i)
    plan.transient[i] = step.at_peak[i] - plan.persistent[i];
  if (const MemoryTracker* host = engine.host_tracker()) {
    const MemArray hp = host->at_peak();
    for (int i = 0; i < kNumMemCategories; ++i)
      plan.host_transient[i] = hp[i] - plan.host_persistent[i];
  }
  plan.tokens = rows * T * in.world;
  if (in.cluster) {
    plan.step_s = static_cast<double>(t1 - t0) * 1e-9;
    plan.exposed_comm_s = static_cast<double>(w1 - w0) * 1e-9;
  }
}

}  // namespace

std::string HeadroomBytes::describe() const {
  char pct[32];
  std::snprintf(pct, sizeof pct, "%.1f%%", 100.0 * fragmentation_fraction);
  return "context " + format_bytes(context) + " + NCCL " + format_bytes(nccl) + " (" +
         std::to_string(communicators) + (communicators == 1 ? " communicator" : " communicators") +
         ") + fragmentation " + pct + " " + format_bytes(fragmentation);
}

int communicators_used(Strategy strategy, int world, int hybrid_group) {
  const Mesh m = make_mesh(strategy, world, 0, hybrid_group);
  return (m.shard_size > 1 ? 1 : 0) + (m.replica_size > 1 ? 1 : 0);
}

HeadroomBytes gpu_headroom(const Headroom& h, const EngineConfig& engine, int world, int64_t peak) {
  HeadroomBytes b;
  b.context = h.context_bytes;
  b.communicators = communicators_used(engine.strategy, world, engine.hybrid_group);
  b.nccl = h.nccl_bytes_per_communicator * b.communicators;
  b.fragmentation_fraction = h.fragmentation;
  b.fragmentation = static_cast<int64_t>(std::ceil(h.fragmentation * static_cast<double>(peak)));
  return b;
}

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
  plan.group = shard_group_size(e.strategy, in.world, e.hybrid_group);
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
  if (in.model) {
    // The engine's own state and step (it refuses what it refuses: --offload params without a
    // shard group, a hybrid group that does not divide N, ...).
    const int64_t table = plan.persistent_total();
    simulate_step(plan);
    const int64_t kept =
        plan.persistent_total() +
        std::accumulate(plan.host_persistent.begin(), plan.host_persistent.end(), int64_t{0});
    SL_CHECK(kept == table, "plan: the engine keeps ", kept, " bytes between steps (both tiers), ",
             "the strategy table says ", table);
    if (in.cluster)
      plan.headroom = gpu_headroom(in.cluster->headroom, e, in.world, plan.peak_total());
    return plan;
  }
  // --offload, states only: the optimizer state (optim), and the parameter and gradient shards
  // (params) move to the host tier, as the engine puts them.
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
  return plan;
}

std::string format_plan_table(const std::vector<MemoryPlan>& plans, bool decimal) {
  const double unit = decimal ? 1e9 : 1048576.0;
  const char* uname = decimal ? "GB" : "MiB";
  std::string out;
  char line[512];
  // With --offload a host peak column (before "fits", which covers both tiers); with a cluster
  // the step time, tokens/s and exposed communication. States-only plans have neither a
  // transient part nor a peak: their rows say "model states only" instead.
  // On a cluster a headroom column too (before "fits", which counts it: HeadroomBytes).
  bool host = false, timed = false, states = false, gpu = false;
  for (const MemoryPlan& p : plans) {
    host = host || p.input.engine.offload != Offload::none;
    timed = timed || p.step_s >= 0;
    states = states || p.states_only();
    gpu = gpu || (p.input.cluster && !p.states_only());
  }
  const char* last = states ? "" : "fits";
  // The optional columns' heads and units, each " %10s" as their cells are " %10.3f".
  char host_head[32] = "", host_unit[32] = "", gpu_head[32] = "", gpu_unit[32] = "";
  if (host) std::snprintf(host_head, sizeof host_head, " %10s", "host peak");
  if (host) std::snprintf(host_unit, sizeof host_unit, " %10s", uname);
  if (gpu) std::snprintf(gpu_head, sizeof gpu_head, " %10s", "headroom");
  if (gpu) std::snprintf(gpu_unit, sizeof gpu_unit, " %10s", uname);
  // Each line ends where its text does (no trailing blanks).
  const auto end_line = [&out] {
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += "\n";
  };
  std::snprintf(line, sizeof line, "%-14s %4s %4s %10s %10s %10s %10s %10s %10s %10s%s%s  %-4s",
                "strategy", "N", "G", "params", "grads", "optim", "persist", "transient", "peak",
                "padding", gpu_head, host_head, last);
  out += line;
  if (timed) {
    std::snprintf(line, sizeof line, " %10s %10s %10s", "step", "tokens/s", "exposed");
    out += line;
  }
  end_line();
  std::snprintf(line, sizeof line, "%-14s %4s %4s %10s %10s %10s %10s %10s %10s %10s%s%s  %-4s", "",
                "", "", uname, uname, uname, uname, uname, uname, "bytes", gpu_unit, host_unit, "");
  out += line;
  if (timed) {
    std::snprintf(line, sizeof line, " %10s %10s %10s", "ms", "all ranks", "comm ms");
    out += line;
  }
  end_line();
  for (const MemoryPlan& p : plans) {
    const auto v = [&](int64_t b) { return static_cast<double>(b) / unit; };
    char host_col[32] = "", gpu_col[32] = "";
    if (host) std::snprintf(host_col, sizeof host_col, " %10.3f", v(p.host_peak_total()));
    if (gpu) std::snprintf(gpu_col, sizeof gpu_col, " %10.3f", v(p.headroom.total()));
    char transient[32], peak[32];
    if (p.states_only()) {
      std::snprintf(transient, sizeof transient, "%10s", "-");
      std::snprintf(peak, sizeof peak, "%10s", "-");
    } else {
      std::snprintf(transient, sizeof transient, "%10.3f",
                    v(p.peak_total() - p.persistent_total()));
      std::snprintf(peak, sizeof peak, "%10.3f", v(p.peak_total()));
    }
    const char* fits = p.states_only() ? "model states only"
                       : p.input.capacity <= 0 && p.input.engine.host_mem_limit <= 0
                           ? "-"
                           : (p.fits() ? "yes" : "NO");
    std::snprintf(
        line, sizeof line, "%-14s %4d %4d %10.3f %10.3f %10.3f %10.3f %s %s %10lld%s%s  %-4s",
        strategy_name(p.input.engine.strategy), p.input.world, p.group,
        v(p.persistent[static_cast<int>(MemCategory::params)]),
        v(p.persistent[static_cast<int>(MemCategory::grads)]),
        v(p.persistent[static_cast<int>(MemCategory::optimizer_state)]), v(p.persistent_total()),
        transient, peak, static_cast<long long>(p.padding_bytes), gpu_col, host_col, fits);
    out += line;
    if (timed && p.step_s >= 0) {
      std::snprintf(line, sizeof line, " %10.3f %10.0f %10.3f", p.step_s * 1e3, p.tokens_per_s(),
                    p.exposed_comm_s * 1e3);
      out += line;
    }
    end_line();
  }
  return out;
}

}  // namespace shardlab
