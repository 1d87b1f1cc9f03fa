// run_training(): checks that need no rank (config, data, the checkpoint to resume), then one
// function per rank: run directory, engine, resume or initialisation, the step loop with its
// printed lines and checkpoints, the summary.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "core/base/error.hpp"
#include "core/base/virtual_clock.hpp"
#include "core/checkpoint/hf_safetensors.hpp"
#include "core/checkpoint/load.hpp"
#include "core/comm/launcher.hpp"
#include "core/model/family.hpp"
#include "core/trace/recorder.hpp"
#include "core/trace/run_dir.hpp"
#include "core/trace/summary.hpp"
#include "core/train/corpus.hpp"
#include "core/train/data_loader.hpp"
#include "core/train/divergence.hpp"
#include "core/train/engine_stepper.hpp"
#include "core/train/train_checkpoint.hpp"
#include "core/train/train_output.hpp"
#include "core/train/trainer.hpp"

namespace shardlab {

namespace {

// The loop's clock in seconds: wall time, or on a simulated rank its virtual clock, so that step
// times, tokens/s and the step events are the predicted ones (docs/simulate.md).
double now_s() {
  if (const VirtualClock* v = thread_virtual_clock()) return static_cast<double>(v->now_ns) * 1e-9;
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double seconds_since(double t) { return now_s() - t; }

// A simulated rank (backend sim): the only rank in this process, so it does rank 0's work.
bool simulated(const RankContext& ctx) { return !ctx.device->holds_data(); }

// What every rank shares, settled before the ranks start.
struct RunPlan {
  const TrainConfig& cfg;
  GPTConfig model;
  std::shared_ptr<const TokenCorpus> corpus;
  std::string resume_dir;  // the resolved checkpoint directory; empty when not resuming
};

// Tracing for one rank: a recorder appending to the shared run directory, attached to the rank's
// tracker and communicator so it sees every allocation and collective from here on.
class RankTrace {
 public:
  RankTrace(const RunPlan& p, RankContext& ctx) : ctx_(ctx) {
    if (p.cfg.run_dir.empty()) return;
    path_ = open_run_dir(p.cfg, p.model, ctx, p.resume_dir);
    rec_ = RunDir::open(path_).make_recorder(ctx.rank);
    rec_->attach(*ctx.tracker);
    ctx.comm->set_recorder(rec_.get());
    ctx.recorder = rec_.get();
  }
  ~RankTrace() { detach(); }
  RankTrace(const RankTrace&) = delete;
  RankTrace& operator=(const RankTrace&) = delete;

  const std::string& path() const { return path_; }
  // Every rank's events on disk, then rank 0 writes summary.json and trace.json. Collective.
  // Nothing is recorded after this: the engine's teardown would land after the summary.
  void finish() {
    if (!rec_) return;
    rec_->flush();
    detach();
    ctx_.comm->barrier();
    if (ctx_.rank == 0 || simulated(ctx_)) RunDir::open(path_).finish();
  }

 private:
  void detach() {
    if (!rec_ || !attached_) return;
    ctx_.comm->set_recorder(nullptr);
    rec_->detach();
    attached_ = false;
  }

  RankContext& ctx_;
  std::string path_;
  std::unique_ptr<Recorder> rec_;
  bool attached_ = true;
};

// Loads the checkpoint (or the safetensors file) into the engine and the loader; returns the
// steps already done.
int64_t restore(const RunPlan& p, RankContext& ctx, EngineStepper& stepper, DataLoader& loader,
                std::ostream& out) {
  const TrainConfig& cfg = p.cfg;
  const bool printer = ctx.rank == 0;
  if (!p.resume_dir.empty()) {
    ScopedSpan span(ctx.recorder, "checkpoint_load");
    const CheckpointMeta meta = load_train_checkpoint(stepper.engine(), p.resume_dir);
    loader.set_position(loader_position_from(
        meta.loader, cfg, static_cast<int64_t>(p.corpus->tokens.size()), p.resume_dir));
    ctx.comm->barrier();  // every rank loaded its part (a corrupted range fails the one reading it)
    if (printer) {
      out << "resumed from " << p.resume_dir << " at step " << meta.step << " (saved by "
          << meta.world_size << " rank" << (meta.world_size == 1 ? "" : "s") << ", "
          << meta.strategy << ")\n";
      if (meta.extra.contains("train")) {
        const std::string d =
            config_difference(meta.extra.at("train"), train_config_json(cfg), "config");
        if (!d.empty())
          out << "note: this run's settings differ from the checkpoint's: " << d << "\n";
      }
      out << "\n";
    }
    return meta.step;
  }
  if (!cfg.init_from.empty()) {
    ScopedSpan span(ctx.recorder, "init_from");
    init_engine_from_safetensors(stepper.engine(), cfg.init_from);
    if (printer) out << "parameters from " << cfg.init_from << " (optimizer state zero)\n\n";
  }
  return 0;
}

// The figures of a finished run the loop did not count itself: rates, peaks, traffic, the final
// loss (the mean of the last 10).
void measure_result(RankContext& ctx, EngineStepper& stepper, TrainResult& r) {
  r.num_params = stepper.num_params();
  r.world = ctx.world;
  r.tokens_per_s = r.seconds > 0 ? static_cast<double>(r.tokens) / r.seconds : 0.0;
  r.peak_bytes = ctx.tracker->peak_total();
  r.peak_by_category = ctx.tracker->at_peak();
  r.peak_each_category = ctx.tracker->peak_all();
  r.pool = ctx.device->pool_report();
  r.comm_bytes_per_step = stepper.last().comm_total();
  r.comm_buffer_per_step = stepper.last().comm_buffer;
  if (const MemoryTracker* host = stepper.engine().host_tracker()) {
    r.host_peak_bytes = host->peak_total();
    r.host_peak_by_category = host->at_peak();
    r.copy_h2d_per_step = stepper.last().copy_h2d;
    r.copy_d2h_per_step = stepper.last().copy_d2h;
  }
  const size_t tail = std::min<size_t>(10, r.losses.size());
  for (size_t i = r.losses.size() - tail; i < r.losses.size(); ++i) r.final_loss += r.losses[i];
  if (tail) r.final_loss /= static_cast<double>(tail);
}

void train_rank(const RunPlan& p, RankContext& ctx, std::ostream& out, TrainResult& r) {
  const TrainConfig& cfg = p.cfg;
  cfg.check_split(ctx.world);  // under mpirun, validate() could not know the world
  SL_CHECK(cfg.slow_rank.rank < ctx.world && cfg.hang_rank.rank < ctx.world,
           "--slow-rank / --hang-rank name rank ", std::max(cfg.slow_rank.rank, cfg.hang_rank.rank),
           " but the world has ", ctx.world, " ranks");
  RankTrace trace(p, ctx);
  if (!trace.path().empty()) ctx.flight()->set_dump_path(trace.path() + "/flight.json");
  const bool printer = ctx.rank == 0 || simulated(ctx);
  if (printer) {
    print_run_header(out, cfg, p.model, *p.corpus);
    print_parallel_line(out, cfg, ctx.world, ctx.comm->backend());
  }

  DataLoader loader(p.corpus, {cfg.batch, cfg.seq, ctx.rank, ctx.world, cfg.engine.seed});
  EngineConfig engine = cfg.engine;
  if (ctx.rank == cfg.slow_rank.rank) engine.compute_slowdown = cfg.slow_rank.factor;
  EngineStepper stepper(ctx, build_model(p.model, cfg.kernels()), engine, cfg.accum);
  const int64_t start = restore(p, ctx, stepper, loader, out);
  const int64_t every = cfg.print_interval();
  const int64_t tokens_per_step = cfg.batch * cfg.seq;
  const nlohmann::json extra = {{"train", train_config_json(cfg)}};
  std::vector<float> losses;
  std::vector<double> step_seconds;
  std::string last_ckpt;
  double ckpt_seconds = 0.0;
  if (printer) print_step_header(out, cfg.engine.offload != Offload::none);

  // The loss is the world mean, the same on every rank: every rank reaches the same verdict. A
  // simulated rank's loss is no value at all: nothing to watch.
  DivergenceWatch watch(ctx.device->holds_data() ? cfg.divergence
                                                 : DivergenceOptions{DivergenceMode::off});
  const double t0 = now_s();
  double t_line = t0;
  double loss_sum = 0.0;
  int64_t since_line = 0;
  for (int64_t s = start; s < cfg.steps; ++s) {
    const Batch batch = loader.next();
    const float lr = cfg.lr_at(s);
    ctx.flight()->set_step(s + 1);
    if (ctx.rank == cfg.hang_rank.rank && s + 1 == cfg.hang_rank.step)
      std::this_thread::sleep_for(std::chrono::duration<double>(cfg.hang_rank.seconds));
    if (ctx.rank == cfg.kill_rank.rank && s + 1 == cfg.kill_rank.step) {
      ctx.recorder->flush();
      std::raise(SIGKILL);  // as a crash or the OOM killer would end it: no unwinding, no message
    }
    const double t_step = now_s();
    const float loss = stepper.step(batch.inputs.data(), batch.targets.data(),
                                    static_cast<int>(batch.rows), static_cast<int>(batch.seq), lr);
    const double step_s = seconds_since(t_step);
    if (!std::isfinite(loss))
      SL_THROW(Error, "step ", s + 1, ": loss is ", loss, " (diverged: try a lower --lr than ",
               cfg.engine.optim.lr, ")");
    ctx.recorder->step(static_cast<int>(s + 1), loss, batch.rows * batch.seq, step_s);
    const DivergenceWatch::Verdict verdict = watch.observe(s + 1, loss);
    if (verdict != DivergenceWatch::Verdict::ok) {
      const std::string what = watch.describe(loss);
      ctx.recorder->mark("divergence watch: " + what);
      if (verdict == DivergenceWatch::Verdict::diverged &&
          cfg.divergence.mode == DivergenceMode::stop) {
        ctx.recorder->flush();
        SL_THROW(Error, "step ", s + 1, ": ", what, ": the run diverged (lower --lr, now ",
                 cfg.engine.optim.lr, ", or set --clip); stopped before saving",
                 last_ckpt.empty() ? std::string() : ", the last checkpoint is " + last_ckpt,
                 " (--on-divergence warn keeps going; docs/reliability.md)");
      }
      if (printer && (watch.streak() == 1 || verdict == DivergenceWatch::Verdict::diverged))
        out << "warning: step " << s + 1 << ": " << what
            << (verdict == DivergenceWatch::Verdict::diverged ? ": the run diverged" : "") << "\n";
    }
    ctx.recorder->flush();
    losses.push_back(loss);
    step_seconds.push_back(step_s);
    loss_sum += loss;
    ++since_line;
    const bool line_due = (s + 1) % every == 0 || s + 1 == cfg.steps;
    if (printer && line_due) {
      const double dt = seconds_since(t_line);
      const MemoryTracker* host = stepper.engine().host_tracker();
      print_step_line(
          out, {s + 1, loss_sum / since_line, lr, dt > 0 ? since_line * tokens_per_step / dt : 0.0,
                ctx.tracker->peak_total(), host ? host->peak_total() : -1});
      t_line = now_s();
    }
    if (line_due) {
      loss_sum = 0.0;
      since_line = 0;
    }
    const bool save_due =
        cfg.save_every > 0 && ((s + 1) % cfg.save_every == 0 || s + 1 == cfg.steps);
    // A suspect step is not saved (unless the user asked to keep going): `latest` never moves to
    // a state whose loss is far above the best the run reached.
    const bool suspect =
        verdict != DivergenceWatch::Verdict::ok && cfg.divergence.mode == DivergenceMode::stop;
    if (save_due && suspect && printer)
      out << "not saved: step " << s + 1 << " (its loss is suspect; the last checkpoint is "
          << (last_ckpt.empty() ? std::string("none") : last_ckpt) << ")\n";
    if (save_due && !suspect) {
      const double t_save = now_s();
      // A compute-lane span: the save's barriers wait on file I/O, not on communication.
      ScopedSpan span(ctx.recorder, "checkpoint_save");
      last_ckpt = save_train_checkpoint(stepper.engine(), *ctx.comm, cfg.ckpt_dir, s + 1,
                                        loader_state_json(loader, cfg), extra, cfg.keep_last);
      ctx.recorder->mark("checkpoint " + last_ckpt);
      const double dt = seconds_since(t_save);
      ckpt_seconds += dt;
      t_line += now_s() - t_save;  // saving is not training: keep it out of tokens/s
      if (printer) out << "saved " << last_ckpt << " (" << fmt("%.2f", dt) << " s)\n";
    }
  }
  const double seconds = seconds_since(t0) - ckpt_seconds;
  trace.finish();

  if (!printer) return;
  r.losses = losses;
  r.step_seconds = step_seconds;
  r.start_step = start;
  r.seconds = seconds;
  r.tokens = (cfg.steps - start) * tokens_per_step;
  r.run_dir = trace.path();
  r.last_checkpoint = last_ckpt;
  r.checkpoint_seconds = ckpt_seconds;
  measure_result(ctx, stepper, r);
  if (simulated(ctx)) return;  // shardlab simulate prints its predictions itself
  print_run_summary(out, r, *ctx.tracker);
  if (!r.run_dir.empty()) {
    out << "\n";
    print_stragglers(compute_summary(read_run(r.run_dir)).stragglers, out);
  }
}

}  // namespace

TrainResult run_training(const TrainConfig& cfg, std::ostream& out) {
  cfg.validate();
  RunPlan p{cfg, cfg.model_config(), nullptr, ""};
  set_blas_threads(cfg.threads);  // the local launcher sets 1 per rank when there are several

  p.corpus = std::make_shared<const TokenCorpus>(load_corpus(cfg.data, cfg.synthetic));
  if (p.corpus->vocab > p.model.vocab_size)
    SL_THROW(InvalidArgument, "data '", p.corpus->name, "' has token ids up to ",
             p.corpus->vocab - 1, " but the model's vocab_size is ", p.model.vocab_size,
             " (use --vocab-size ", p.corpus->vocab, " or --model gpt2)");
  // Problems with the files to start from are reported here, once, before any rank starts.
  if (!cfg.resume.empty()) {
    std::string note;
    p.resume_dir =
        check_resume(cfg.resume_path(), cfg, static_cast<int64_t>(p.corpus->tokens.size()), &note);
    if (!note.empty()) out << "note: " << note << "\n";
  }
  // A .safetensors file or a save_pretrained directory: every file's header checked here.
  if (!cfg.init_from.empty()) HfTensors check(cfg.init_from);

  LaunchOptions lo;
  lo.backend = cfg.backend;
  lo.ranks = cfg.ranks;
  lo.device = cfg.device;
  lo.mem_limit = cfg.mem_limit;
  lo.collective_timeout_s = cfg.collective_timeout;
  lo.bind_to_cores = cfg.bind_to_cores;
  if (cfg.backend == "sim") {
    lo.cluster = cfg.cluster_spec
                     ? cfg.cluster_spec
                     : std::make_shared<const ClusterSpec>(load_cluster_spec(cfg.cluster));
    lo.sim_rank = cfg.sim_rank;
    lo.gemm_math = cfg.gemm_math;
  }
  // A rank stuck outside collectives (a hang, not a slow step) must not keep the job alive once
  // the watchdog or another rank's failure has stopped the others.
  lo.exit_after_failure_s = 5.0;
  TrainResult r;
  r.entropy_rate = p.corpus->entropy_rate;
  launch(lo, [&](RankContext& ctx) { train_rank(p, ctx, out, r); });
  return r;
}

}  // namespace shardlab
