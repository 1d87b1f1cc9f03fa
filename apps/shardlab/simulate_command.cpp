// run_simulation: the training loop on backend sim, then the predictions from its result and its
// run directory.
#include "apps/shardlab/simulate_command.hpp"

#include <cstdio>
#include <memory>
#include <ostream>

#include "core/base/error.hpp"
#include "core/device/cluster_spec.hpp"
#include "core/trace/run_reader.hpp"
#include "core/trace/summary.hpp"

namespace shardlab {

GemmMath default_gemm_math(const EngineConfig& e) {
  return e.param_dtype == DType::f32 ? GemmMath::fp32 : GemmMath::bf16;
}

namespace {

std::string ms(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f ms", s * 1e3);
  return b;
}

std::string num(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

}  // namespace

SimulateResult run_simulation(TrainConfig cfg, std::ostream& out) {
  cfg.backend = "sim";
  cfg.device = "meta";
  if (!cfg.cluster_spec) {
    if (cfg.cluster.empty())
      SL_THROW(InvalidArgument, "simulate needs --cluster (a preset or a JSON file)");
    cfg.cluster_spec = std::make_shared<const ClusterSpec>(load_cluster_spec(cfg.cluster));
  }
  const ClusterSpec& spec = *cfg.cluster_spec;
  cfg.validate();
  const GPTConfig m = cfg.model_config();

  SimulateResult r;
  r.train = run_training(cfg, out);
  const TrainResult& t = r.train;
  SL_CHECK(!t.step_seconds.empty(), "simulate: --steps must be >= 1");
  r.step_s = t.step_seconds.back();
  const double tokens = static_cast<double>(cfg.batch) * cfg.seq;  // per step, all ranks
  r.tokens_per_s = r.step_s > 0 ? tokens / r.step_s : 0;
  // PaLM's model FLOPs (GPTConfig::flops_per_token): 6 per multiplying parameter and token, plus
  // 12 L C T per token for attention's two products.
  r.model_flops = tokens * m.flops_per_token(cfg.seq);
  const double peak = spec.peak(cfg.gemm_math);
  r.mfu = r.step_s > 0 ? r.model_flops / (r.step_s * cfg.ranks * peak) : 0;
  r.peak_bytes = t.peak_bytes;
  r.peak_by_category = t.peak_each_category;
  r.gpu_memory = spec.memory_bytes;
  r.headroom = gpu_headroom(spec.headroom, cfg.engine, cfg.ranks, r.peak_bytes);
  const int64_t steps = static_cast<int64_t>(t.step_seconds.size());
  if (!t.run_dir.empty()) {
    const RunSummary s = compute_summary(read_run(t.run_dir));
    r.exposed_comm_s = static_cast<double>(s.exposed_comm_ns) * 1e-9 / steps;
    r.comm_s = static_cast<double>(s.comm_ns) * 1e-9 / steps;
  }

  out << "\npredicted for " << cfg.ranks << " ranks on " << spec.name << " (" << spec.nodes
      << " nodes x " << spec.ranks_per_node << " max; " << spec.gpu_name << ", GEMMs at the "
      << gemm_math_name(cfg.gemm_math) << " peak " << num("%.1f", peak * 1e-12)
      << " TFLOP/s), from simulated rank " << cfg.sim_rank << ":\n";
  out << "  step time      " << ms(r.step_s) << " (the last of " << steps << " steps)\n";
  out << "  tokens/s       " << num("%.0f", r.tokens_per_s) << " (all ranks; "
      << num("%.0f", r.tokens_per_s / cfg.ranks) << " per rank)\n";
  out << "  MFU            " << num("%.1f", 100.0 * r.mfu) << "% (model FLOPs "
      << num("%.3g", r.model_flops) << " per step: 6 x params"
      << (m.is_llama() && !m.tie_embeddings ? " but the token embedding (a lookup)" : "")
      << " + 12 L C T per token)\n";
  if (r.exposed_comm_s >= 0)
    out << "  exposed comm   " << ms(r.exposed_comm_s) << " per step ("
        << num("%.1f", r.step_s > 0 ? 100.0 * r.exposed_comm_s / r.step_s : 0.0)
        << "% of the step; collectives busy " << ms(r.comm_s) << ")\n";
  else
    out << "  exposed comm   (needs the run directory: --trace on)\n";
  // The two measures of core/comm/traffic.hpp, counted as the real backends count them.
  if (cfg.ranks > 1)
    out << "  comm per step  sent per rank " << format_bytes(t.comm_bytes_per_step) << ", buffer "
        << format_bytes(t.comm_buffer_per_step) << " (the engine's collectives)\n";
  out << "  peak memory    " << format_bytes(r.peak_bytes) << " per rank, of "
      << format_bytes(r.gpu_memory) << " with headroom " << format_bytes(r.headroom.total()) << ": "
      << (r.fits() ? "fits" : "does NOT fit") << "\n";
  out << "  headroom       " << r.headroom.describe() << " (--headroom; docs/simulate.md)\n";
  out << "  peak by category (each its own peak, per rank):\n";
  for (int c = 0; c < kNumMemCategories; ++c) {
    if (!mem_category_shown(static_cast<MemCategory>(c), r.peak_by_category[c])) continue;
    char line[96];
    std::snprintf(line, sizeof line, "    %-18s %s\n",
                  mem_category_name(static_cast<MemCategory>(c)),
                  format_bytes(r.peak_by_category[c]).c_str());
    out << line;
  }
  if (!t.run_dir.empty())
    out << "run directory: " << t.run_dir << " (virtual times)\n"
        << "  (tables: shardlab summary " << t.run_dir << "; timelines: shardlab-viewer "
        << t.run_dir << ")\n";
  return r;
}

}  // namespace shardlab
