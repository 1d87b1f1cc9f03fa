// The strategy advisor: enumerate, simulate each configuration, keep what fits, rank by tokens/s.
#include "apps/shardlab/recommend.hpp"

#include "apps/shardlab/pytorch_settings.hpp"

#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <ostream>
#include <set>
#include <sstream>
#include <system_error>

#include "apps/shardlab/simulate_command.hpp"
#include "core/base/error.hpp"
#include "core/checkpoint/hf_config.hpp"
#include "core/device/cluster_spec.hpp"
#include "core/fsdp/wrap_policy.hpp"
#include "core/memory/tracker.hpp"
#include "core/model/config.hpp"
#include "core/trace/run_reader.hpp"
#include "core/trace/summary.hpp"
#include "core/train/trainer.hpp"

namespace shardlab {

namespace {

using Clock = std::chrono::steady_clock;

// Steps per simulated candidate: the first allocates the optimizer state, the second is a step
// in the steady state (its time is the prediction; a third gives the same time and peak).
constexpr int64_t kSimSteps = 2;

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string ms(double s) { return fmt("%.1f ms", s * 1e3); }

std::string describe(const RecommendCandidate& c) {
  std::string s = strategy_name(c.strategy);
  if (c.strategy == Strategy::hybrid_shard) s += " G=" + std::to_string(c.hybrid_group);
  return s;
}

std::string settings(const RecommendCandidate& c) {
  return describe(c) + ", prefetch " + std::to_string(c.prefetch) + ", act-ckpt " +
         (c.act_ckpt ? "on" : "off") + ", K " + std::to_string(c.accum) + ", " +
         dtype_name(c.param_dtype) + "/" + dtype_name(c.reduce_dtype) +
         (c.wrap == "block" ? "" : ", wrap " + c.wrap) +
         (c.offload == Offload::none ? "" : std::string(", offload ") + offload_name(c.offload));
}

std::string command_of(const RecommendOptions& o, const RecommendCandidate& c) {
  std::ostringstream s;
  s << "shardlab simulate --cluster " << o.cluster
    << (o.hf_config.empty() ? " --model " + o.model : " --hf-config " + o.hf_config) << " --ranks "
    << o.ranks << " --batch " << o.global_batch;
  const ClusterOverrides& ov = o.cluster_overrides;
  if (ov.nodes > 0) s << " --nodes " << ov.nodes;
  if (ov.gpus_per_node > 0) s << " --gpus-per-node " << ov.gpus_per_node;
  if (ov.inter_node_gbps > 0) s << " --inter-node-gbps " << ov.inter_node_gbps;
  if (!ov.fabric.empty()) s << " --fabric " << ov.fabric;
  if (!ov.headroom.empty()) s << " --headroom " << ov.headroom;
  if (o.seq > 0) s << " --seq " << o.seq;
  if (o.attention != AttentionKernel::naive)
    s << " --attention " << attention_kernel_name(o.attention);
  s << " --strategy " << strategy_name(c.strategy);
  if (c.strategy == Strategy::hybrid_shard) s << " --hybrid-group " << c.hybrid_group;
  s << " --prefetch " << c.prefetch << " --param-dtype " << dtype_name(c.param_dtype)
    << " --reduce-dtype " << dtype_name(c.reduce_dtype) << " --accum " << c.accum;
  if (c.wrap != "block") s << " --wrap " << c.wrap;
  if (c.offload != Offload::none) s << " --offload " << offload_name(c.offload);
  if (gathers_params_per_unit(c.strategy)) s << " --keep-root";
  if (c.act_ckpt) s << " --act-ckpt";
  return s.str();
}

// The simulation of one candidate: `train`'s settings as `shardlab simulate` takes them.
TrainConfig config_of(const RecommendOptions& o, const std::shared_ptr<const ClusterSpec>& spec,
                      const RecommendCandidate& c) {
  TrainConfig cfg;
  cfg.model = o.model;
  cfg.hf_config = o.hf_config;
  cfg.attention = o.attention;
  cfg.cluster = o.cluster;
  cfg.cluster_spec = spec;
  cfg.backend = "sim";  // as run_simulation sets them, so that validate() checks a simulation
  cfg.device = "meta";
  cfg.ranks = o.ranks;
  cfg.batch = o.global_batch;
  cfg.seq = o.seq > 0 ? o.seq : cfg.model_config().max_seq_len;
  cfg.steps = kSimSteps;
  cfg.warmup = 0;
  cfg.accum = c.accum;
  EngineConfig& e = cfg.engine;
  e.strategy = c.strategy;
  e.hybrid_group = c.strategy == Strategy::hybrid_shard ? c.hybrid_group : 0;
  e.prefetch = c.prefetch;
  e.act_ckpt = c.act_ckpt;
  e.wrap = c.wrap;
  e.offload = c.offload;
  // Not searched: keeping the root gathered into the backward holds no more memory and sends
  // fewer bytes, so the sharded strategies always take it, as PyTorch's FSDP does.
  e.keep_root = gathers_params_per_unit(c.strategy);
  e.param_dtype = c.param_dtype;
  e.reduce_dtype = c.reduce_dtype;
  cfg.gemm_math = default_gemm_math(e);
  return cfg;
}

// Output nobody reads: the simulations' own step lines.
struct NullBuffer : std::streambuf {
  int overflow(int c) override { return c; }
};

bool same_but_act_ckpt(const RecommendCandidate& a, const RecommendCandidate& b) {
  return a.strategy == b.strategy && a.hybrid_group == b.hybrid_group && a.prefetch == b.prefetch &&
         a.accum == b.accum && a.param_dtype == b.param_dtype && a.reduce_dtype == b.reduce_dtype &&
         a.wrap == b.wrap && a.offload == b.offload;
}

// The table of the fastest and, per row, why.
void print_best(const RecommendOptions& o, const RecommendResult& res, std::ostream& out) {
  const bool wraps = o.wraps.size() > 1 || o.wraps.front() != "block";
  const bool offloads = o.offloads.size() > 1 || o.offloads.front() != Offload::none;
  const std::string header =
      "  #  tokens/s  step ms   MFU  peak/rank   strategy          prefetch  act-ckpt  K  B  "
      "params/grads";
  out << "\nthe fastest " << res.best.size() << " that fit, by predicted tokens/s:\n";
  // The extra columns, each under its heading: wrap at the header's end + 2, offload 12 later.
  const size_t wrap_at = header.size() + 2, offload_at = header.size() + (wraps ? 14 : 2);
  const auto column = [](std::string& text, size_t at, const std::string& value) {
    text += std::string(text.size() < at ? at - text.size() : 1, ' ') + value;
  };
  std::string heading = header;
  if (wraps) column(heading, wrap_at, "wrap");
  if (offloads) column(heading, offload_at, "offload");
  out << heading << "\n";
  const int64_t per_rank = o.global_batch / o.ranks;
  for (size_t i = 0; i < res.best.size(); ++i) {
    const RecommendRow& r = res.best[i];
    char line[256];
    std::snprintf(
        line, sizeof line, "  %d %9.0f %8.1f %4.1f%% %10s   %-17s %8d  %-8s %2d %2lld  %s/%s\n",
        static_cast<int>(i + 1), r.tokens_per_s, r.step_s * 1e3, 100.0 * r.mfu,
        format_bytes(r.peak_bytes).c_str(), describe(r.c).c_str(), r.c.prefetch,
        r.c.act_ckpt ? "on" : "off", r.c.accum, static_cast<long long>(per_rank / r.c.accum),
        dtype_name(r.c.param_dtype), dtype_name(r.c.reduce_dtype));
    std::string text = line;
    if (wraps || offloads) text.pop_back();  // the newline
    if (wraps) column(text, wrap_at, r.c.wrap);
    if (offloads) column(text, offload_at, offload_name(r.c.offload));
    if (wraps || offloads) text += "\n";
    out << text;
  }
  out << "\nwhy:\n";
  for (size_t i = 0; i < res.best.size(); ++i) {
    const RecommendRow& r = res.best[i];
    out << "  #" << (i + 1) << " peak " << format_bytes(r.peak_bytes) << " + headroom "
        << format_bytes(r.headroom_bytes) << " of " << format_bytes(res.cap) << " ("
        << fmt("%.0f", 100.0 * static_cast<double>(r.peak_bytes + r.headroom_bytes) /
                           static_cast<double>(res.cap))
        << "%)";
    if (r.host_peak_bytes >= 0) out << ", host " << format_bytes(r.host_peak_bytes);
    out << "; step " << ms(r.step_s) << ": compute " << ms(r.compute_s) << ", exposed comm "
        << ms(r.exposed_comm_s) << " (collectives busy " << ms(r.comm_s) << ")\n"
        << "     " << r.command << "\n";
  }
}

}  // namespace

std::vector<RecommendCandidate> recommend_candidates(const RecommendOptions& o,
                                                     int ranks_per_node) {
  const int n = o.ranks;
  if (n < 1) SL_THROW(InvalidArgument, "--ranks ", n, ": must be >= 1");
  if (o.global_batch < 1)
    SL_THROW(InvalidArgument, "--global-batch ", o.global_batch,
             ": must be >= 1 (sequences per step, all ranks)");
  if (o.global_batch % n != 0)
    SL_THROW(InvalidArgument, "--global-batch ", o.global_batch, " is not divisible by --ranks ", n,
             ": every rank takes B x K whole sequences (global batch = N x B x K)");
  if (o.dtypes.empty()) SL_THROW(InvalidArgument, "--dtypes: name at least one of f32, bf16");
  if (o.wraps.empty()) SL_THROW(InvalidArgument, "--wraps: name at least one wrap policy");
  for (const std::string& w : o.wraps) {
    try {
      parse_wrap_policy(w);
    } catch (const InvalidArgument& e) {
      SL_THROW(InvalidArgument, "--wraps: ", e.what());
    }
  }
  const int64_t per_rank = o.global_batch / n;  // B x K

  // Strategies, with hybrid's group G: a divisor of the node's GPUs or a multiple of them, between
  // 2 and N / 2 (G = 1 is no_shard's placement, G = N full_shard's).
  std::vector<std::pair<Strategy, int>> strategies = {{Strategy::no_shard, 0},
                                                      {Strategy::shard_optim, 0},
                                                      {Strategy::shard_grad_op, 0},
                                                      {Strategy::full_shard, 0}};
  for (int g = 2; g < n; ++g) {
    if (n % g != 0) continue;
    if (g <= ranks_per_node ? ranks_per_node % g != 0 : g % ranks_per_node != 0) continue;
    strategies.push_back({Strategy::hybrid_shard, g});
  }
  std::vector<int> ks;
  for (int64_t k = 1; k <= per_rank; ++k)
    if (per_rank % k == 0) ks.push_back(static_cast<int>(k));

  if (o.offloads.empty())
    SL_THROW(InvalidArgument, "--offloads: name at least one of none, optim, params");
  std::vector<RecommendCandidate> out;
  // Without offload first, so that the search knows what fits without it (recommend() prunes).
  std::vector<Offload> offloads;
  for (Offload off : {Offload::none, Offload::optim, Offload::params})
    if (std::find(o.offloads.begin(), o.offloads.end(), off) != o.offloads.end())
      offloads.push_back(off);
  for (Offload off : offloads)
    for (const std::string& wrap : o.wraps)
      for (DType p : o.dtypes)
        for (DType r : o.dtypes)
          for (const auto& [s, g] : strategies) {
            // Strategies that keep full parameters gather none before forward: prefetch has nothing
            // to issue, so one depth stands for all.
            // Parameter offload copies a shard up before each gather: only where there are shards.
            if (off == Offload::params && keeps_full_params(s)) continue;
            const int max_prefetch = keeps_full_params(s) ? 0 : 2;
            for (int pf = 0; pf <= max_prefetch; ++pf)
              for (int k : ks)
                for (bool ac : {false, true}) {
                  RecommendCandidate c;
                  c.strategy = s;
                  c.hybrid_group = g;
                  c.prefetch = pf;
                  c.act_ckpt = ac;
                  c.accum = k;
                  c.param_dtype = p;
                  c.reduce_dtype = r;
                  c.wrap = wrap;
                  c.offload = off;
                  out.push_back(c);
                }
          }
  return out;
}

RecommendResult recommend(const RecommendOptions& o, std::ostream& out, std::ostream* progress) {
  const auto t0 = Clock::now();
  if (o.cluster.empty())
    SL_THROW(InvalidArgument,
             "--recommend needs --cluster (a preset such as h100-sxm, or a JSON cluster file)");
  if (o.cluster == "this-machine")
    SL_THROW(InvalidArgument,
             "--recommend --cluster this-machine: measure it first with `shardlab calibrate --out "
             "this-machine.json`, then pass --cluster this-machine.json");
  if (o.top < 1) SL_THROW(InvalidArgument, "--top ", o.top, ": must be >= 1");
  if (o.mem_cap < 0) SL_THROW(InvalidArgument, "--mem-limit ", o.mem_cap, ": must be >= 0");
  const auto spec =
      std::make_shared<const ClusterSpec>(load_cluster_spec(o.cluster, o.cluster_overrides));
  spec->check_ranks(o.ranks);
  const GPTConfig m =
      o.hf_config.empty() ? GPTConfig::preset(o.model) : read_hf_config(o.hf_config);
  const int seq = o.seq > 0 ? o.seq : m.max_seq_len;
  if (seq > m.max_seq_len)
    SL_THROW(InvalidArgument, "--seq ", seq, " exceeds the model's max_seq_len ", m.max_seq_len);
  const std::vector<RecommendCandidate> cands = recommend_candidates(o, spec->ranks_per_node);

  RecommendResult res;
  res.cap = o.mem_cap > 0 ? o.mem_cap : spec->memory_bytes;
  res.candidates = static_cast<int64_t>(cands.size());
  out << "recommend: " << (o.hf_config.empty() ? o.model : o.hf_config) << " ("
      << fmt("%.3g", static_cast<double>(m.num_params())) << " parameters) on " << o.ranks
      << " ranks of " << spec->name << " (" << spec->gpu_name << ", " << spec->ranks_per_node
      << " per node), global batch " << o.global_batch << " x " << seq << " tokens"
      << (o.attention == AttentionKernel::flash ? ", flash attention" : "") << ", cap "
      << format_bytes(res.cap) << " per rank"
      << (o.mem_cap > 0 ? " (--mem-limit)" : " (the GPU's memory)")
      << (o.host_cap > 0 ? ", host tier " + format_bytes(o.host_cap) + " per rank" : "") << "\n"
      << "fits: peak + headroom <= the cap; headroom: context "
      << format_bytes(spec->headroom.context_bytes) << " + NCCL "
      << format_bytes(spec->headroom.nccl_bytes_per_communicator)
      << " per communicator + fragmentation " << fmt("%.1f", 100.0 * spec->headroom.fragmentation)
      << "% of the peak (--headroom)\n"
      << "full_shard and hybrid_shard keep the root gathered into the backward (--keep-root), as "
         "PyTorch's FSDP does\n";

  NullBuffer null_buffer;
  std::ostream null(&null_buffer);
  std::vector<RecommendRow> fits;
  RecommendRow least_of_strategy[kNumStrategies];  // the smallest peak of each strategy
  std::string refused;  // the first configuration the engine refuses, and why
  // The act-ckpt-off twin of the next candidate fit: act-ckpt only adds each block's forward
  // again to the compute stream, whose work and collectives otherwise stay in the same order,
  // so its step is never shorter; only memory speaks for it, and memory was not the problem.
  bool twin_fits = false;
  // Likewise offload: it adds the copies between the tiers and moves the optimizer step to the
  // host, and takes nothing from the step, so it is never faster than the same configuration
  // without it; where that fits, the offloaded ones are not simulated.
  std::set<std::string> fits_on_device;
  const auto without_offload = [](RecommendCandidate c) {
    c.offload = Offload::none;
    return settings(c);
  };
  auto last_report = t0;
  bool reported = false;
  for (size_t i = 0; i < cands.size(); ++i) {
    const RecommendCandidate& c = cands[i];
    if (c.act_ckpt && !o.exhaustive && twin_fits && i > 0 && same_but_act_ckpt(cands[i - 1], c)) {
      ++res.skipped;
      continue;
    }
    if (c.offload != Offload::none && !o.exhaustive &&
        fits_on_device.count(without_offload(c)) > 0) {
      ++res.skipped;
      if (!c.act_ckpt) twin_fits = true;  // its act-ckpt twin is slower than what fits, too
      continue;
    }
    TrainConfig cfg = config_of(o, spec, c);
    bool fit = false, valid = true;
    try {
      cfg.validate();
    } catch (const InvalidArgument& e) {
      // A shape the engine refuses (a micro-batch past the kernels' 32-bit indices): not a
      // configuration of this job. The first reason is printed.
      ++res.refused;
      if (refused.empty()) refused = settings(c) + ": " + e.what();
      valid = false;
    }
    if (valid) {
      // Run without a cap: the peak of what does not fit is worth printing too.
      ++res.simulated;
      const SimulateResult r = run_simulation(cfg, null);
      RecommendRow row;
      row.c = c;
      row.step_s = r.step_s;
      row.tokens_per_s = r.tokens_per_s;
      row.mfu = r.mfu;
      row.peak_bytes = r.peak_bytes;
      row.headroom_bytes = r.headroom.total();
      row.host_peak_bytes = r.train.host_peak_bytes;
      row.command = command_of(o, c);
      RecommendRow& least = least_of_strategy[static_cast<int>(c.strategy)];
      // Leanest by what the GPU must hold: the peak and the headroom (more communicators, more).
      const auto needs = [](const RecommendRow& x) { return x.peak_bytes + x.headroom_bytes; };
      if (least.peak_bytes == 0 || needs(row) < needs(least)) least = row;
      if (res.leanest.peak_bytes == 0 || needs(row) < needs(res.leanest)) res.leanest = row;
      fit = row.peak_bytes + row.headroom_bytes <= res.cap &&
            (o.host_cap <= 0 || row.host_peak_bytes < 0 || row.host_peak_bytes <= o.host_cap);
      if (fit)
        fits.push_back(row);
      else
        ++res.dropped;
    }
    if (!c.act_ckpt) twin_fits = fit;
    if (fit && c.offload == Offload::none) fits_on_device.insert(settings(c));
    const auto now = Clock::now();
    if (progress && now - t0 > std::chrono::seconds(1) &&
        now - last_report > std::chrono::milliseconds(500)) {
      *progress << "\rrecommend: " << (i + 1) << " of " << cands.size() << " configurations ("
                << res.simulated << " simulated, " << fits.size() << " fit) ..." << std::flush;
      last_report = now;
      reported = true;
    }
  }
  if (reported) *progress << "\n";

  std::stable_sort(fits.begin(), fits.end(), [](const RecommendRow& a, const RecommendRow& b) {
    if (a.tokens_per_s != b.tokens_per_s) return a.tokens_per_s > b.tokens_per_s;
    return a.peak_bytes < b.peak_bytes;
  });
  // Per strategy, the fastest that fits: what each choice would cost.
  std::vector<RecommendRow> best_of_strategy;
  for (const RecommendRow& r : fits) {
    const bool seen =
        std::any_of(best_of_strategy.begin(), best_of_strategy.end(),
                    [&](const RecommendRow& b) { return b.c.strategy == r.c.strategy; });
    if (!seen) best_of_strategy.push_back(r);
  }
  res.fits = fits;
  if (static_cast<int>(fits.size()) > o.top) fits.resize(static_cast<size_t>(o.top));

  // The printed rows again with the trace on, for their exposed communication and compute time.
  for (RecommendRow& row : fits) {
    TrainConfig cfg = config_of(o, spec, row.c);
    std::error_code ec;
    const std::filesystem::path dir = std::filesystem::temp_directory_path(ec) /
                                      ("shardlab-recommend-" + std::to_string(::getpid()));
    cfg.run_dir = dir.string();
    cfg.overwrite_run_dir = true;
    const SimulateResult r = run_simulation(cfg, null);
    const RunSummary s = compute_summary(read_run(cfg.run_dir));
    row.exposed_comm_s = r.exposed_comm_s;
    row.comm_s = r.comm_s;
    if (!s.ranks.empty())
      row.compute_s = static_cast<double>(s.ranks[0].compute_ns) * 1e-9 / kSimSteps;
    std::filesystem::remove_all(dir, ec);
  }
  res.best = fits;
  res.seconds = std::chrono::duration<double>(Clock::now() - t0).count();

  out << "searched " << res.candidates << " configurations in " << fmt("%.1f", res.seconds)
      << " s: " << res.simulated << " simulated, " << res.dropped << " over the cap, "
      << res.skipped
      << " not simulated (act-ckpt or offload where the same without it fits: never faster)";
  if (res.refused > 0) out << ", " << res.refused << " refused by the engine";
  out << "\n";
  if (!refused.empty()) out << "  (refused, e.g. " << refused << ")\n";
  if (!res.best.empty()) print_best(o, res, out);
  out << "\nthe fastest that fits, per strategy:\n";
  for (Strategy s : {Strategy::no_shard, Strategy::shard_optim, Strategy::shard_grad_op,
                     Strategy::full_shard, Strategy::hybrid_shard}) {
    auto it = std::find_if(best_of_strategy.begin(), best_of_strategy.end(),
                           [&](const RecommendRow& b) { return b.c.strategy == s; });
    char line[200];
    const RecommendRow& least = least_of_strategy[static_cast<int>(s)];
    if (it == best_of_strategy.end() && least.peak_bytes == 0)
      std::snprintf(line, sizeof line, "  %-14s not searched\n", strategy_name(s));
    else if (it == best_of_strategy.end())
      std::snprintf(line, sizeof line, "  %-14s nothing fits %s: its leanest needs %s (%s)\n",
                    strategy_name(s), format_bytes(res.cap).c_str(),
                    format_bytes(least.peak_bytes + least.headroom_bytes).c_str(),
                    settings(least.c).c_str());
    else
      std::snprintf(line, sizeof line, "  %-14s %9.0f tokens/s, peak %s (%s)\n", strategy_name(s),
                    it->tokens_per_s, format_bytes(it->peak_bytes).c_str(),
                    settings(it->c).c_str());
    out << line;
  }
  if (!res.best.empty()) {
    out << "\n#1 ";
    out << pytorch_settings(res.best.front().c, o.ranks, o.global_batch, seq);
  }
  return res;
}

int recommend_command(const RecommendOptions& o, std::ostream& out, std::ostream* progress) {
  const RecommendResult r = recommend(o, out, progress);
  if (!r.best.empty()) return 0;
  if (r.simulated == 0) {
    out << "nothing could be simulated: the engine refused every configuration (above)\n";
    return 2;
  }
  const RecommendCandidate& c = r.leanest.c;
  out << "nothing fits " << format_bytes(r.cap) << " per rank: the leanest configuration ("
      << settings(c) << ") needs " << format_bytes(r.leanest.peak_bytes + r.leanest.headroom_bytes)
      << " (peak " << format_bytes(r.leanest.peak_bytes) << " + headroom "
      << format_bytes(r.leanest.headroom_bytes) << ")"
      << "; raise --mem-limit, add ranks, or shrink the batch or the model"
      << (o.offloads.size() == 1 && o.offloads.front() == Offload::none
              ? ", or search host-memory offload too (--offloads none,optim,params)"
              : "")
      << "\n";
  return 2;
}

}  // namespace shardlab
