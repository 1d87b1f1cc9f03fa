// What `shardlab train` prints and records besides the step lines.
#include "core/train/train_output.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "core/base/cpu_affinity.hpp"
#include "core/base/error.hpp"
#include "core/comm/launcher.hpp"
#include "core/fsdp/mesh.hpp"
#include "core/fsdp/strategy.hpp"
#include "core/fsdp/wrap_policy.hpp"
#include "core/memory/tracker.hpp"
#include "core/model/family.hpp"
#include "core/trace/run_dir.hpp"

namespace shardlab {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

void print_run_header(std::ostream& out, const TrainConfig& cfg, const GPTConfig& m,
                      const TokenCorpus& corpus) {
  const OptimizerConfig& o = cfg.engine.optim;
  out << "shardlab train: model " << cfg.model_name() << " " << m.describe()
      << (cfg.attention == AttentionKernel::flash ? ", flash attention" : "") << "\n"
      << "data: " << corpus.description << "\n";
  if (corpus.kind == CorpusKind::synthetic)
    out << "      (the entropy rate is the lowest loss any model can reach on this data)\n";
  out << "optimizer: " << optimizer_kind_name(o.kind) << ", lr " << o.lr;
  if (cfg.warmup > 0) out << " after " << cfg.warmup << " warmup steps";
  if (cfg.schedule == LrSchedule::cosine) out << ", cosine decay to " << o.lr * cfg.min_lr_ratio;
  if (o.kind == OptimizerKind::adamw)
    out << ", betas (" << o.beta1 << ", " << o.beta2 << ")";
  else
    out << ", momentum " << o.momentum;
  out << ", weight decay " << o.weight_decay << "\n"
      << "batch " << cfg.batch << " x " << cfg.seq << " = " << cfg.batch * cfg.seq
      << " tokens/step, " << cfg.steps << " steps, seed " << cfg.engine.seed << ", " << cfg.threads
      << " BLAS thread" << (cfg.threads == 1 ? "" : "s") << "\n";
}

void print_parallel_line(std::ostream& out, const TrainConfig& cfg, int world,
                         const char* backend) {
  const EngineConfig& e = cfg.engine;
  out << "parallel: " << strategy_name(e.strategy) << " on " << world << " rank"
      << (world == 1 ? "" : "s") << " (" << backend
      << (cfg.device == "cpu" ? "" : ", " + cfg.device);
  if (std::string(backend) == "local") {
    LaunchOptions lo;
    lo.ranks = world;
    lo.bind_to_cores = cfg.bind_to_cores;
    const std::vector<int> cpus = local_rank_cpus(lo);
    if (!cpus.empty()) out << ", ranks on CPUs " << cpu_list_text(cpus);
  }
  out << ")";
  if (e.strategy == Strategy::hybrid_shard)
    out << ", groups of " << shard_group_size(e.strategy, world, e.hybrid_group);
  out << ", prefetch " << e.prefetch << ", params " << dtype_name(e.param_dtype) << ", grads "
      << dtype_name(e.reduce_dtype);
  if (cfg.accum > 1)
    out << ", " << cfg.accum << " micro-batches (" << accum_mode_name(e.accum_mode) << ")";
  if (e.clip > 0) out << ", clip " << e.clip;
  if (e.act_ckpt) out << ", activation checkpointing";
  if (e.keep_root && gathers_params_per_unit(e.strategy)) out << ", root kept for the backward";
  if (cfg.mem_limit > 0) out << ", memory limit " << format_bytes(cfg.mem_limit) << "/rank";
  if (e.offload != Offload::none) {
    out << ", offload " << offload_name(e.offload);
    if (e.host_mem_limit > 0)
      out << ", host memory limit " << format_bytes(e.host_mem_limit) << "/rank";
  }
  out << "\n\n";
}

void print_run_summary(std::ostream& out, const TrainResult& r, const MemoryTracker& tracker) {
  out << "\n";
  if (r.losses.empty()) {
    out << "no steps run\n";
    return;
  }
  const size_t tail = std::min<size_t>(10, r.losses.size());
  out << "final loss " << fmt("%.4f", r.final_loss) << " (mean of the last " << tail << " steps)";
  if (!std::isnan(r.entropy_rate))
    out << "; entropy rate " << fmt("%.4f", r.entropy_rate) << ": "
        << fmt("%.1f", 100.0 * (r.final_loss / r.entropy_rate - 1.0)) << "% above the floor";
  out << "\n"
      << r.losses.size() << " steps, " << r.tokens << " tokens in " << fmt("%.1f", r.seconds)
      << " s: " << fmt("%.0f", r.tokens_per_s) << " tokens/s\n";
  // The two measures of core/comm/traffic.hpp, labelled as every report labels them.
  if (r.world > 1)
    out << "communication per step: sent per rank " << format_bytes(r.comm_bytes_per_step)
        << ", buffer " << format_bytes(r.comm_buffer_per_step)
        << " (rank 0, last step, the engine's collectives)\n";
  out << (r.host_peak_bytes >= 0 ? "device peak " : "peak memory ") << format_bytes(r.peak_bytes)
      << " (";
  MemArray at = tracker.at_peak();
  bool first = true;
  for (int c = 0; c < kNumMemCategories; ++c) {
    if (at[c] == 0) continue;
    out << (first ? "" : ", ") << mem_category_name(static_cast<MemCategory>(c)) << " "
        << format_bytes(at[c]);
    first = false;
  }
  out << ")\n";
  if (r.pool)  // three views of one GPU's memory: what callers asked for, the pool, the driver
    out << "GPU memory: tracker peak " << format_bytes(r.peak_bytes) << "; pool reserved peak "
        << format_bytes(r.pool->peak_reserved) << " (now " << format_bytes(r.pool->reserved)
        << "); driver " << format_bytes(r.pool->driver_total - r.pool->driver_free) << " used of "
        << format_bytes(r.pool->driver_total) << " (cudaMemGetInfo, every process and context)\n";
  if (r.host_peak_bytes >= 0) {  // the host tier (--offload), apart from device memory
    out << "host peak " << format_bytes(r.host_peak_bytes) << " (";
    first = true;
    for (int c = 0; c < kNumMemCategories; ++c) {
      if (r.host_peak_by_category[c] == 0) continue;
      out << (first ? "" : ", ") << mem_category_name(static_cast<MemCategory>(c)) << " "
          << format_bytes(r.host_peak_by_category[c]);
      first = false;
    }
    out << "); copied per step: host to device " << format_bytes(r.copy_h2d_per_step)
        << ", device to host " << format_bytes(r.copy_d2h_per_step) << "\n";
  }
  if (!r.last_checkpoint.empty())
    out << "checkpoint: " << r.last_checkpoint << " (saving took "
        << fmt("%.2f", r.checkpoint_seconds) << " s in all)\n";
  if (!r.run_dir.empty())
    out << "run directory: " << r.run_dir << "\n"
        << "  (tables: shardlab summary " << r.run_dir << "; timelines: shardlab-viewer "
        << r.run_dir << ")\n";
}

nlohmann::json train_config_json(const TrainConfig& cfg) {
  const EngineConfig& e = cfg.engine;
  return {{"steps", cfg.steps},
          {"batch", cfg.batch},
          {"seq", cfg.seq},
          {"accum", cfg.accum},
          {"accum_mode", accum_mode_name(e.accum_mode)},
          {"attention", attention_kernel_name(cfg.attention)},
          {"wrap", e.wrap},
          {"offload", offload_name(e.offload)},
          {"host_mem_limit", e.host_mem_limit},
          {"prefetch", e.prefetch},
          {"max_inflight_gathers", e.max_inflight_gathers},
          {"param_dtype", dtype_name(e.param_dtype)},
          {"reduce_dtype", dtype_name(e.reduce_dtype)},
          {"act_ckpt", e.act_ckpt},
          {"keep_root", e.keep_root},
          {"clip", e.clip},
          {"mem_limit", cfg.mem_limit},
          {"optimizer", optimizer_kind_name(e.optim.kind)},
          {"lr", e.optim.lr},
          {"warmup", cfg.warmup},
          {"schedule", lr_schedule_name(cfg.schedule)},
          {"min_lr_ratio", cfg.min_lr_ratio},
          {"weight_decay", e.optim.weight_decay},
          {"seed", e.seed},
          {"data", cfg.data},
          {"bind_to", cfg.bind_to_cores ? "core" : "none"}};
}

namespace {

nlohmann::json run_meta(const TrainConfig& cfg, const GPTConfig& m, int world,
                        const std::string& backend, const std::string& resumed_from) {
  nlohmann::json meta;
  const EngineConfig& e = cfg.engine;
  const Mesh mesh = make_mesh(e.strategy, world, 0, e.hybrid_group);
  meta["strategy"] = strategy_name(e.strategy);
  meta["world_size"] = world;
  meta["backend"] = backend;
  meta["mesh"] = {{"shard_group", mesh.shard_size}, {"replicas", mesh.replica_size}};
  meta["model"] = {{"preset", cfg.model_name()},   {"vocab_size", m.vocab_size},
                   {"max_seq_len", m.max_seq_len}, {"n_layer", m.n_layer},
                   {"n_head", m.n_head},           {"n_embd", m.n_embd},
                   {"num_params", m.num_params()}};
  meta["config"] = train_config_json(cfg);
  // The FSDP units by id, named by what they hold (the viewer's units strip labels its rows so),
  // with the model's stages each holds.
  const Model model = build_model(m, cfg.kernels());
  meta["model"]["stages"] = nlohmann::json::array();  // in forward order
  for (int s = 0; s < model.num_stages(); ++s)
    meta["model"]["stages"].push_back(model.stage(s).name());
  meta["units"] = nlohmann::json::array();
  for (const WrapUnit& u : make_wrap_plan(model, parse_wrap_policy(e.wrap)).units) {
    nlohmann::json stages = nlohmann::json::array();
    for (int s : u.stages) stages.push_back(model.stage(s).name());
    meta["units"].push_back({{"name", u.name}, {"numel", u.numel}, {"stages", stages}});
  }
  meta["device"] = cfg.device;
  if (backend == "local") {
    // The CPU each rank's thread ran on: null when the scheduler placed them.
    LaunchOptions lo;
    lo.ranks = world;
    lo.bind_to_cores = cfg.bind_to_cores;
    const std::vector<int> cpus = local_rank_cpus(lo);
    meta["rank_cpus"] = cpus.empty() ? nlohmann::json(nullptr) : nlohmann::json(cpus);
  }
  if (!resumed_from.empty()) meta["config"]["resumed_from"] = resumed_from;
  if (cfg.backend == "sim") {
    // One rank's predicted timeline: the directory holds one rank file, so world_size is 1, and
    // "simulated" says which rank of how many, on what cluster, and that times are virtual.
    meta["world_size"] = 1;
    const std::shared_ptr<const ClusterSpec> spec =
        cfg.cluster_spec ? cfg.cluster_spec
                         : std::make_shared<const ClusterSpec>(load_cluster_spec(cfg.cluster));
    meta["simulated"] = {{"ranks", world},
                         {"rank", cfg.sim_rank},
                         {"times", "virtual"},
                         {"cluster", spec->name},
                         {"gemm_math", gemm_math_name(cfg.gemm_math)},
                         {"spec", spec->json}};
  }
  return meta;
}

}  // namespace

// The run directory of a launched run, made by rank 0 and shared with the others: rank 0 creates
// it (and the name, when automatic), broadcasts the path, and every rank records into it.
std::string open_run_dir(const TrainConfig& cfg, const GPTConfig& m, RankContext& ctx,
                         const std::string& resumed_from) {
  constexpr int kPathBytes = 4096;
  std::vector<char> path(kPathBytes, 0);
  std::string error;
  // Rank 0 creates; a simulated rank is alone in its process, so it creates whatever its rank.
  const bool creator = ctx.rank == 0 || !ctx.device->holds_data();
  if (creator) {
    try {
      RunDirOptions o;
      if (cfg.run_dir != "auto") o.dir = cfg.run_dir;
      o.overwrite = cfg.overwrite_run_dir;
      const std::string p =
          RunDir::create(run_meta(cfg, m, ctx.world, ctx.comm->backend(), resumed_from), o).path();
      SL_CHECK(p.size() < kPathBytes, "run directory path too long: ", p);
      std::copy(p.begin(), p.end(), path.begin());
    } catch (const Error& e) {
      error = e.what();  // the others learn of it from the empty path, then rank 0 rethrows
    }
  }
  Buffer buf = ctx.device->alloc(kPathBytes, MemCategory::comm_buffers);
  ctx.device->copy_from_host(buf.data(), path.data(), kPathBytes);
  ctx.comm->broadcast(buf.data(), kPathBytes / 4, DType::f32, 0);  // bytes, no arithmetic
  if (!creator) ctx.device->copy_to_host(path.data(), buf.data(), kPathBytes);
  if (!error.empty()) throw InvalidArgument(error);  // the launcher keeps one "rank 0: "
  if (path[0] == 0) {
    // Rank 0 failed and is about to report why; wait here until its failure releases us, so the
    // error the user sees is rank 0's.
    ctx.comm->barrier();
    SL_THROW(Error, "rank 0 could not create the run directory");
  }
  return std::string(path.data());
}

}  // namespace shardlab
