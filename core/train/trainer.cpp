// The single-rank training loop: config checks, the learning-rate schedule, step lines, summary.
#include "core/train/trainer.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <ostream>
#include <utility>

#include "core/base/error.hpp"
#include "core/memory/tracker.hpp"
#include "core/comm/launcher.hpp"
#include "core/trace/recorder.hpp"
#include "core/trace/run_dir.hpp"
#include "core/train/corpus.hpp"
#include "core/train/data_loader.hpp"
#include "core/train/engine_stepper.hpp"

namespace shardlab {

const char* lr_schedule_name(LrSchedule s) {
  return s == LrSchedule::cosine ? "cosine" : "constant";
}

LrSchedule parse_lr_schedule(const std::string& s) {
  if (s == "cosine") return LrSchedule::cosine;
  if (s == "constant") return LrSchedule::constant;
  SL_THROW(InvalidArgument, "unknown --schedule '", s, "' (known: cosine, constant)");
}

// ---- config -------------------------------------------------------------------------------------

GPTConfig TrainConfig::model_config() const {
  GPTConfig m = GPTConfig::preset(model);
  if (n_layer) m.n_layer = n_layer;
  if (n_head) m.n_head = n_head;
  if (n_embd) m.n_embd = n_embd;
  if (vocab_size) m.vocab_size = vocab_size;
  if (max_seq_len) m.max_seq_len = max_seq_len;
  m.validate();
  return m;
}

void TrainConfig::validate() const {
  if (steps < 0) SL_THROW(InvalidArgument, "--steps ", steps, ": the step count must be >= 0");
  if (batch <= 0) SL_THROW(InvalidArgument, "--batch ", batch, ": the batch must be >= 1");
  if (seq <= 0) SL_THROW(InvalidArgument, "--seq ", seq, ": the sequence length must be >= 1");
  if (warmup < 0) SL_THROW(InvalidArgument, "--warmup ", warmup, ": must be >= 0");
  if (print_every < 0) SL_THROW(InvalidArgument, "--print-every ", print_every, ": must be >= 0");
  if (threads < 1) SL_THROW(InvalidArgument, "--threads ", threads, ": must be >= 1");
  if (!(min_lr_ratio >= 0.0f && min_lr_ratio <= 1.0f))
    SL_THROW(InvalidArgument, "--min-lr-ratio ", min_lr_ratio, ": must be in [0, 1]");
  const std::pair<const char*, int> overrides[] = {{"--n-layer", n_layer},
                                                    {"--n-head", n_head},
                                                    {"--n-embd", n_embd},
                                                    {"--vocab-size", vocab_size},
                                                    {"--max-seq-len", max_seq_len}};
  for (const auto& [name, v] : overrides)
    if (v < 0) SL_THROW(InvalidArgument, name, " ", v, ": must be >= 1 (or 0 for the preset's)");
  optim.validate();
  if (ranks < 1) SL_THROW(InvalidArgument, "--ranks ", ranks, ": must be >= 1");
  if (backend != "local" && backend != "mpi")
    SL_THROW(InvalidArgument, "--backend '", backend, "': expected local or mpi");
  if (accum < 1) SL_THROW(InvalidArgument, "--accum ", accum, ": must be >= 1");
  if (prefetch < 0) SL_THROW(InvalidArgument, "--prefetch ", prefetch, ": must be >= 0");
  if (max_inflight_gathers < 0)
    SL_THROW(InvalidArgument, "--max-inflight-gathers ", max_inflight_gathers,
             ": must be >= 0 (0 = no cap)");
  if (!(clip >= 0.0f)) SL_THROW(InvalidArgument, "--clip ", clip, ": must be >= 0 (0 = off)");
  if (mem_limit < 0) SL_THROW(InvalidArgument, "--mem-limit ", mem_limit, ": must be >= 0");
  if (hybrid_group < 0) SL_THROW(InvalidArgument, "--hybrid-group ", hybrid_group, ": must be >= 1");
  if (backend == "local") {
    if (batch % (ranks * static_cast<int64_t>(accum)) != 0)
      SL_THROW(InvalidArgument, "--batch ", batch, " must split evenly over --ranks ", ranks,
               " x --accum ", accum, " (use a multiple of ", ranks * accum, ")");
    if (strategy == Strategy::hybrid_shard && hybrid_group > 0 && ranks % hybrid_group != 0)
      SL_THROW(InvalidArgument, "--hybrid-group ", hybrid_group, " must divide --ranks ", ranks);
  }
  GPTConfig m = model_config();
  if (seq > m.max_seq_len)
    SL_THROW(InvalidArgument, "--seq ", seq, " exceeds the model's max_seq_len ", m.max_seq_len,
             " (lower --seq or raise --max-seq-len)");
  if (data == "synthetic" && synthetic.vocab > m.vocab_size)
    SL_THROW(InvalidArgument, "--synthetic-vocab ", synthetic.vocab,
             " exceeds the model's vocab_size ", m.vocab_size);
}

float TrainConfig::lr_at(int64_t step) const {
  const float peak = optim.lr;
  if (step < warmup) return peak * static_cast<float>(step + 1) / static_cast<float>(warmup);
  if (schedule == LrSchedule::constant) return peak;
  // Cosine from peak at the first step after warmup to peak * min_lr_ratio at the last step.
  const int64_t span = steps - warmup - 1;
  const double progress = span > 0 ? static_cast<double>(step - warmup) / span : 1.0;
  const double floor = peak * min_lr_ratio;
  return static_cast<float>(floor + 0.5 * (peak - floor) * (1.0 + std::cos(M_PI * progress)));
}

int64_t TrainConfig::print_interval() const {
  if (print_every > 0) return print_every;
  if (steps <= 100) return 1;
  // About 50 lines: the smallest of 1, 2, 5, 10, 20, 50, ... that is >= steps / 50.
  for (int64_t decade = 1;; decade *= 10)
    for (int64_t m : {1, 2, 5})
      if (m * decade * 50 >= steps) return m * decade;
}

// ---- printing -----------------------------------------------------------------------------------

void print_step_header(std::ostream& out) {
  out << "  step |     loss |       lr |   tokens/s | peak MiB\n"
      << "-------+----------+----------+------------+---------\n";
}

void print_step_line(std::ostream& out, const StepLine& l) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%6lld | %8.4f | %8.2e | %10.0f | %8.1f\n",
                static_cast<long long>(l.step), l.loss, l.lr, l.tokens_per_s,
                static_cast<double>(l.peak_bytes) / (1024.0 * 1024.0));
  out << buf;
  out.flush();
}

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

void print_run_header(std::ostream& out, const TrainConfig& cfg, const GPTConfig& m,
                      const TokenCorpus& corpus) {
  out << "shardlab train: model " << cfg.model << " " << m.describe() << "\n"
      << "data: " << corpus.description << "\n";
  if (corpus.kind == CorpusKind::synthetic)
    out << "      (the entropy rate is the lowest loss any model can reach on this data)\n";
  out << "optimizer: " << optimizer_kind_name(cfg.optim.kind) << ", lr " << cfg.optim.lr;
  if (cfg.warmup > 0) out << " after " << cfg.warmup << " warmup steps";
  if (cfg.schedule == LrSchedule::cosine)
    out << ", cosine decay to " << cfg.optim.lr * cfg.min_lr_ratio;
  if (cfg.optim.kind == OptimizerKind::adamw)
    out << ", betas (" << cfg.optim.beta1 << ", " << cfg.optim.beta2 << ")";
  else
    out << ", momentum " << cfg.optim.momentum;
  out << ", weight decay " << cfg.optim.weight_decay << "\n"
      << "batch " << cfg.batch << " x " << cfg.seq << " = " << cfg.batch * cfg.seq
      << " tokens/step, " << cfg.steps << " steps, seed " << cfg.seed << ", " << cfg.threads
      << " BLAS thread" << (cfg.threads == 1 ? "" : "s") << "\n";
}

void print_summary(std::ostream& out, const TrainResult& r, const MemoryTracker& tracker) {
  out << "\n";
  if (r.losses.empty()) {
    out << "no steps run\n";
    return;
  }
  const size_t tail = std::min<size_t>(10, r.losses.size());
  out << "final loss " << fmt("%.4f", r.final_loss) << " (mean of the last " << tail
      << " steps)";
  if (!std::isnan(r.entropy_rate))
    out << "; entropy rate " << fmt("%.4f", r.entropy_rate) << ": "
        << fmt("%.1f", 100.0 * (r.final_loss / r.entropy_rate - 1.0)) << "% above the floor";
  out << "\n"
      << r.losses.size() << " steps, " << r.tokens << " tokens in " << fmt("%.1f", r.seconds)
      << " s: " << fmt("%.0f", r.tokens_per_s) << " tokens/s\n";
  out << "peak memory " << format_bytes(r.peak_bytes) << " (";
  MemArray at = tracker.at_peak();
  bool first = true;
  for (int c = 0; c < kNumMemCategories; ++c) {
    if (at[c] == 0) continue;
    out << (first ? "" : ", ") << mem_category_name(static_cast<MemCategory>(c)) << " "
        << format_bytes(at[c]);
    first = false;
  }
  out << ")\n";
}

}  // namespace

// ---- the loop -----------------------------------------------------------------------------------

namespace {

nlohmann::json run_meta(const TrainConfig& cfg, const GPTConfig& m, int world,
                        const std::string& backend) {
  nlohmann::json meta;
  meta["strategy"] = strategy_name(cfg.strategy);
  meta["world_size"] = world;
  meta["backend"] = backend;
  meta["mesh"] = {{"shard_group", shard_group_size(cfg.strategy, world,
                                                   cfg.hybrid_group > 0 ? cfg.hybrid_group : world)},
                  {"replicas", cfg.strategy == Strategy::no_shard
                                   ? world
                                   : world / shard_group_size(cfg.strategy, world,
                                                              cfg.hybrid_group > 0
                                                                  ? cfg.hybrid_group
                                                                  : world)}};
  meta["model"] = {{"preset", cfg.model},         {"vocab_size", m.vocab_size},
                   {"max_seq_len", m.max_seq_len}, {"n_layer", m.n_layer},
                   {"n_head", m.n_head},           {"n_embd", m.n_embd},
                   {"num_params", m.num_params()}};
  meta["config"] = {{"steps", cfg.steps},
                    {"batch", cfg.batch},
                    {"seq", cfg.seq},
                    {"accum", cfg.accum},
                    {"accum_mode", accum_mode_name(cfg.accum_mode)},
                    {"prefetch", cfg.prefetch},
                    {"max_inflight_gathers", cfg.max_inflight_gathers},
                    {"param_dtype", dtype_name(cfg.param_dtype)},
                    {"reduce_dtype", dtype_name(cfg.reduce_dtype)},
                    {"act_ckpt", cfg.act_ckpt},
                    {"clip", cfg.clip},
                    {"mem_limit", cfg.mem_limit},
                    {"optimizer", optimizer_kind_name(cfg.optim.kind)},
                    {"lr", cfg.optim.lr},
                    {"seed", cfg.seed},
                    {"data", cfg.data}};
  return meta;
}

// The run directory of a launched run, made by rank 0 and shared with the others: rank 0 creates
// it (and the name, when automatic), broadcasts the path, and every rank records into it.
std::string open_run_dir(const TrainConfig& cfg, const GPTConfig& m, RankContext& ctx) {
  constexpr int kPathBytes = 4096;
  std::vector<char> path(kPathBytes, 0);
  std::string error;
  if (ctx.rank == 0) {
    try {
      RunDirOptions o;
      if (cfg.run_dir != "auto") o.dir = cfg.run_dir;
      o.overwrite = cfg.overwrite_run_dir;
      const std::string p =
          RunDir::create(run_meta(cfg, m, ctx.world, ctx.comm->backend()), o).path();
      SL_CHECK(p.size() < kPathBytes, "run directory path too long: ", p);
      std::copy(p.begin(), p.end(), path.begin());
    } catch (const Error& e) {
      error = e.what();  // the others learn of it from the empty path, then rank 0 rethrows
    }
  }
  Buffer buf = ctx.device->alloc(kPathBytes, MemCategory::comm_buffers);
  ctx.device->copy_from_host(buf.data(), path.data(), kPathBytes);
  ctx.comm->broadcast(buf.data(), kPathBytes / 4, DType::f32, 0);  // bytes, no arithmetic
  ctx.device->copy_to_host(path.data(), buf.data(), kPathBytes);
  if (!error.empty()) throw InvalidArgument(error);  // the launcher keeps one "rank 0: "
  if (path[0] == 0) {
    // Rank 0 failed and is about to report why; wait here until its failure releases us, so the
    // error the user sees is rank 0's.
    ctx.comm->barrier();
    SL_THROW(Error, "rank 0 could not create the run directory");
  }
  return std::string(path.data());
}

void print_parallel_line(std::ostream& out, const TrainConfig& cfg, int world,
                         const char* backend) {
  out << "parallel: " << strategy_name(cfg.strategy) << " on " << world << " rank"
      << (world == 1 ? "" : "s") << " (" << backend << ")";
  if (cfg.strategy == Strategy::hybrid_shard)
    out << ", groups of " << (cfg.hybrid_group > 0 ? cfg.hybrid_group : world);
  out << ", prefetch " << cfg.prefetch << ", params " << dtype_name(cfg.param_dtype)
      << ", grads " << dtype_name(cfg.reduce_dtype);
  if (cfg.accum > 1) out << ", " << cfg.accum << " micro-batches (" << accum_mode_name(cfg.accum_mode) << ")";
  if (cfg.clip > 0) out << ", clip " << cfg.clip;
  if (cfg.act_ckpt) out << ", activation checkpointing";
  if (cfg.mem_limit > 0) out << ", memory limit " << format_bytes(cfg.mem_limit) << "/rank";
  out << "\n\n";
}

}  // namespace

TrainResult run_training(const TrainConfig& cfg, std::ostream& out) {
  cfg.validate();
  const GPTConfig m = cfg.model_config();
  set_blas_threads(cfg.threads);  // the local launcher sets 1 per rank when there are several

  auto corpus = std::make_shared<const TokenCorpus>(load_corpus(cfg.data, cfg.synthetic));
  if (corpus->vocab > m.vocab_size)
    SL_THROW(InvalidArgument, "data '", corpus->name, "' has token ids up to ", corpus->vocab - 1,
             " but the model's vocab_size is ", m.vocab_size, " (use --vocab-size ",
             corpus->vocab, " or --model gpt2)");

  LaunchOptions lo;
  lo.backend = cfg.backend;
  lo.ranks = cfg.ranks;
  lo.mem_limit = cfg.mem_limit;
  const EngineConfig ec = engine_config(cfg);
  TrainResult r;
  r.entropy_rate = corpus->entropy_rate;

  launch(lo, [&](RankContext& ctx) {
    SL_CHECK(cfg.batch % (static_cast<int64_t>(ctx.world) * cfg.accum) == 0, "--batch ",
             cfg.batch, " must split evenly over ", ctx.world, " ranks x --accum ", cfg.accum);
    // Tracing: this rank's recorder appends to the run directory; it sees every allocation from
    // here on (the engine's included) and every collective.
    std::unique_ptr<Recorder> rec;
    std::string run_path;
    if (!cfg.run_dir.empty()) {
      run_path = open_run_dir(cfg, m, ctx);
      rec = RunDir::open(run_path).make_recorder(ctx.rank);
      rec->attach(*ctx.tracker);
      ctx.comm->set_recorder(rec.get());
      ctx.recorder = rec.get();
    }
    const bool printer = ctx.rank == 0;
    if (printer) {
      print_run_header(out, cfg, m, *corpus);
      print_parallel_line(out, cfg, ctx.world, ctx.comm->backend());
    }

    DataLoader loader(corpus, {cfg.batch, cfg.seq, ctx.rank, ctx.world, cfg.seed});
    EngineStepper stepper(ctx, m, ec, cfg.accum);
    const int64_t every = cfg.print_interval();
    const int64_t tokens_per_step = cfg.batch * cfg.seq;
    std::vector<float> losses;
    Batch batch;
    if (printer) print_step_header(out);

    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    auto t_line = t0;
    double loss_sum = 0.0;
    int64_t since_line = 0;
    for (int64_t s = 0; s < cfg.steps; ++s) {
      batch = loader.next();
      const float lr = cfg.lr_at(s);
      const auto t_step = Clock::now();
      const float loss = stepper.step(batch.inputs.data(), batch.targets.data(),
                                      static_cast<int>(batch.rows), static_cast<int>(batch.seq), lr);
      const double step_s = std::chrono::duration<double>(Clock::now() - t_step).count();
      if (!std::isfinite(loss))
        SL_THROW(Error, "step ", s + 1, ": loss is ", loss, " (diverged: try a lower --lr than ",
                 cfg.optim.lr, ")");
      if (ctx.recorder) {
        ctx.recorder->step(static_cast<int>(s + 1), loss, batch.rows * batch.seq, step_s);
        ctx.recorder->flush();
      }
      losses.push_back(loss);
      loss_sum += loss;
      ++since_line;
      if (printer && ((s + 1) % every == 0 || s + 1 == cfg.steps)) {
        const auto now = Clock::now();
        const double dt = std::chrono::duration<double>(now - t_line).count();
        print_step_line(out, {s + 1, loss_sum / since_line, lr,
                              dt > 0 ? since_line * tokens_per_step / dt : 0.0,
                              ctx.tracker->peak_total()});
        t_line = now;
      }
      if ((s + 1) % every == 0 || s + 1 == cfg.steps) {
        loss_sum = 0.0;
        since_line = 0;
      }
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();

    if (rec) {
      rec->flush();
      ctx.comm->barrier();  // every rank's events are on disk before rank 0 reads them
      if (printer) RunDir::open(run_path).finish();
    }
    if (printer) {
      r.losses = losses;
      r.num_params = stepper.num_params();
      r.world = ctx.world;
      r.seconds = seconds;
      r.tokens = cfg.steps * tokens_per_step;
      r.tokens_per_s = r.seconds > 0 ? r.tokens / r.seconds : 0.0;
      r.peak_bytes = ctx.tracker->peak_total();
      r.peak_by_category = ctx.tracker->at_peak();
      r.comm_bytes_per_step = stepper.last().comm_total();
      r.run_dir = run_path;
      const size_t tail = std::min<size_t>(10, r.losses.size());
      for (size_t i = r.losses.size() - tail; i < r.losses.size(); ++i) r.final_loss += r.losses[i];
      if (tail) r.final_loss /= static_cast<double>(tail);
      print_summary(out, r, *ctx.tracker);
      if (!run_path.empty()) out << "run directory: " << run_path << "\n";
    }
    if (rec) {
      ctx.comm->set_recorder(nullptr);
      rec->detach();
    }
  });
  return r;
}

}  // namespace shardlab
