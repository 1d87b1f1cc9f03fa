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
#include "core/train/corpus.hpp"
#include "core/train/data_loader.hpp"

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
      << " BLAS thread" << (cfg.threads == 1 ? "" : "s") << ", 1 rank (cpu)\n\n";
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

TrainResult run_training(const TrainConfig& cfg, std::ostream& out) {
  cfg.validate();
  const GPTConfig m = cfg.model_config();
  set_blas_threads(cfg.threads);

  auto corpus = std::make_shared<const TokenCorpus>(load_corpus(cfg.data, cfg.synthetic));
  if (corpus->vocab > m.vocab_size)
    SL_THROW(InvalidArgument, "data '", corpus->name, "' has token ids up to ", corpus->vocab - 1,
             " but the model's vocab_size is ", m.vocab_size, " (use --vocab-size ",
             corpus->vocab, " or --model gpt2)");
  print_run_header(out, cfg, m, *corpus);

  MemoryTracker tracker(0);
  std::unique_ptr<Device> dev = make_cpu_device(tracker);
  DataLoader loader(corpus, {cfg.batch, cfg.seq, 0, 1, cfg.seed});
  std::unique_ptr<ModelStepper> stepper = make_single_rank_stepper(*dev, m, cfg.optim, cfg.seed);

  TrainResult r;
  r.entropy_rate = corpus->entropy_rate;
  r.num_params = stepper->num_params();
  const int64_t every = cfg.print_interval();
  const int64_t tokens_per_step = cfg.batch * cfg.seq;
  Batch batch;
  print_step_header(out);

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto t_line = t0;
  double loss_sum = 0.0;
  int64_t since_line = 0;
  for (int64_t s = 0; s < cfg.steps; ++s) {
    batch = loader.next();
    const float lr = cfg.lr_at(s);
    const float loss = stepper->step(batch.inputs.data(), batch.targets.data(),
                                     static_cast<int>(batch.rows), static_cast<int>(batch.seq), lr);
    if (!std::isfinite(loss))
      SL_THROW(Error, "step ", s + 1, ": loss is ", loss, " (diverged: try a lower --lr than ",
               cfg.optim.lr, ")");
    r.losses.push_back(loss);
    loss_sum += loss;
    ++since_line;
    if ((s + 1) % every == 0 || s + 1 == cfg.steps) {
      const auto now = Clock::now();
      const double dt = std::chrono::duration<double>(now - t_line).count();
      print_step_line(out, {s + 1, loss_sum / since_line, lr,
                            dt > 0 ? since_line * tokens_per_step / dt : 0.0,
                            tracker.peak_total()});
      t_line = now;
      loss_sum = 0.0;
      since_line = 0;
    }
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.tokens = cfg.steps * tokens_per_step;
  r.tokens_per_s = r.seconds > 0 ? r.tokens / r.seconds : 0.0;
  r.peak_bytes = tracker.peak_total();
  const size_t tail = std::min<size_t>(10, r.losses.size());
  for (size_t i = r.losses.size() - tail; i < r.losses.size(); ++i) r.final_loss += r.losses[i];
  if (tail) r.final_loss /= static_cast<double>(tail);
  print_summary(out, r, tracker);
  return r;
}

}  // namespace shardlab
