// The trainer's configuration: option checks, the learning-rate schedule, the step line format.
// The loop itself is in train_loop.cpp.
#include "core/train/trainer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <ostream>
#include <thread>
#include <utility>
#include <vector>

#include "core/base/error.hpp"
#include "core/checkpoint/hf_config.hpp"
#include "core/comm/launcher.hpp"

namespace shardlab {

const char* lr_schedule_name(LrSchedule s) {
  return s == LrSchedule::cosine ? "cosine" : "constant";
}

LrSchedule parse_lr_schedule(const std::string& s) {
  if (s == "cosine") return LrSchedule::cosine;
  if (s == "constant") return LrSchedule::constant;
  SL_THROW(InvalidArgument, "unknown --schedule '", s, "' (known: cosine, constant)");
}

// ---- faults on demand ---------------------------------------------------------------------------

namespace {

// The fields of "a:b:c" as numbers; throws naming the option when one is not a number.
std::vector<double> fault_fields(const std::string& s, const char* option, size_t n,
                                 const char* form) {
  std::vector<double> out;
  size_t begin = 0;
  for (;;) {
    const size_t end = s.find(':', begin);
    const std::string f =
        s.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    char* stop = nullptr;
    const double v = std::strtod(f.c_str(), &stop);
    if (f.empty() || *stop != '\0' || !std::isfinite(v))
      SL_THROW(InvalidArgument, option, " '", s, "': expected ", form);
    out.push_back(v);
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  if (out.size() != n) SL_THROW(InvalidArgument, option, " '", s, "': expected ", form);
  return out;
}

int fault_rank(double v, const std::string& s, const char* option) {
  if (v < 0 || v > 1e6 || v != std::floor(v))
    SL_THROW(InvalidArgument, option, " '", s, "': the rank must be an integer >= 0");
  return static_cast<int>(v);
}

}  // namespace

SlowRank parse_slow_rank(const std::string& s) {
  const std::vector<double> f = fault_fields(s, "--slow-rank", 2, "RANK:FACTOR, e.g. 1:3");
  SlowRank r{fault_rank(f[0], s, "--slow-rank"), f[1]};
  if (!(r.factor >= 1.0 && r.factor <= 1000.0))
    SL_THROW(InvalidArgument, "--slow-rank '", s, "': the factor must be in [1, 1000]");
  return r;
}

HangRank parse_hang_rank(const std::string& s) {
  const std::vector<double> f = fault_fields(s, "--hang-rank", 3, "RANK:STEP:SECONDS, e.g. 1:3:60");
  HangRank h{fault_rank(f[0], s, "--hang-rank"), static_cast<int64_t>(f[1]), f[2]};
  if (f[1] < 1 || f[1] > 1e12 || f[1] != std::floor(f[1]))
    SL_THROW(InvalidArgument, "--hang-rank '", s, "': the step must be an integer >= 1");
  if (!(h.seconds > 0 && h.seconds <= 86400))
    SL_THROW(InvalidArgument, "--hang-rank '", s, "': the seconds must be in (0, 86400]");
  return h;
}

KillRank parse_kill_rank(const std::string& s) {
  const std::vector<double> f = fault_fields(s, "--kill-rank", 2, "RANK:STEP, e.g. 2:3");
  KillRank k{fault_rank(f[0], s, "--kill-rank"), static_cast<int64_t>(f[1])};
  if (f[1] < 1 || f[1] > 1e12 || f[1] != std::floor(f[1]))
    SL_THROW(InvalidArgument, "--kill-rank '", s, "': the step must be an integer >= 1");
  return k;
}

// ---- config -------------------------------------------------------------------------------------

EngineConfig train_engine_defaults() {
  EngineConfig e;
  e.optim = {OptimizerKind::adamw, 2e-3f};
  return e;
}

namespace {

// The model options that override the preset (0 = keep its value), as the command line names
// them: model_config() applies them, validate() and check_sizes() name them in messages.
struct ModelOverride {
  const char* option;
  int value;
  int GPTConfig::*field;
};
std::vector<ModelOverride> model_overrides(const TrainConfig& c) {
  return {{"--n-layer", c.n_layer, &GPTConfig::n_layer},
          {"--n-head", c.n_head, &GPTConfig::n_head},
          {"--n-embd", c.n_embd, &GPTConfig::n_embd},
          {"--vocab-size", c.vocab_size, &GPTConfig::vocab_size},
          {"--max-seq-len", c.max_seq_len, &GPTConfig::max_seq_len}};
}

}  // namespace

GPTConfig TrainConfig::model_config() const {
  GPTConfig m = hf_config.empty() ? GPTConfig::preset(model) : read_hf_config(hf_config);
  for (const ModelOverride& o : model_overrides(*this))
    if (o.value) m.*o.field = o.value;
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
  // Each OpenBLAS thread reserves its own large buffer: thousands of them exhausted memory and
  // OpenBLAS then retried its allocation forever (the run hung after a bad_alloc). Threads beyond
  // the hardware's only contend anyway.
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (threads > hw)
    SL_THROW(InvalidArgument, "--threads ", threads, ": more than the ", hw,
             " hardware threads of this machine");
  if (data == "synthetic") {
    // Named as the options, before make_synthetic_corpus checks the same with its own words.
    if (synthetic.vocab < 2 || synthetic.vocab > 65536)
      SL_THROW(InvalidArgument, "--synthetic-vocab ", synthetic.vocab,
               ": must be in [2, 65536] (tokens are 16-bit)");
    if (synthetic.successors < 1 || synthetic.successors > synthetic.vocab)
      SL_THROW(InvalidArgument, "--synthetic-successors ", synthetic.successors,
               ": must be in [1, --synthetic-vocab ", synthetic.vocab, "]");
    if (synthetic.tokens < 2)
      SL_THROW(InvalidArgument, "--corpus-tokens ", synthetic.tokens, ": must be >= 2");
  }
  if (!(min_lr_ratio >= 0.0f && min_lr_ratio <= 1.0f))
    SL_THROW(InvalidArgument, "--min-lr-ratio ", min_lr_ratio, ": must be in [0, 1]");
  for (const ModelOverride& o : model_overrides(*this))
    if (o.value < 0)
      SL_THROW(InvalidArgument, o.option, " ", o.value, ": must be >= 1 (or 0 for the preset's)");
  if (ranks < 1) SL_THROW(InvalidArgument, "--ranks ", ranks, ": must be >= 1");
  if (backend != "local" && backend != "mpi" && backend != "nccl" && backend != "sim")
    SL_THROW(InvalidArgument, "--backend '", backend,
             "': expected local or mpi (CPU), or nccl (GPUs, with --device cuda)");
  if (backend == "sim" || device == "meta") validate_simulation();
  if (device != "cpu" && device != "cuda" && backend != "sim")
    SL_THROW(InvalidArgument, "--device '", device, "': expected cpu or cuda");
  if (device == "cuda" && backend != "nccl")
    SL_THROW(InvalidArgument, "--device cuda needs --backend nccl (the ", backend,
             " backend moves host memory; with nccl each rank is one GPU)");
  if (backend == "nccl" && device != "cuda")
    SL_THROW(InvalidArgument, "--backend nccl needs --device cuda (NCCL moves GPU memory)");
  if (save_every < 0) SL_THROW(InvalidArgument, "--save-every ", save_every, ": must be >= 0");
  if (save_every > 0 && ckpt_dir.empty())
    SL_THROW(InvalidArgument, "--save-every ", save_every, " needs --ckpt-dir (where to save)");
  if (keep_last < 0) SL_THROW(InvalidArgument, "--keep-last ", keep_last, ": must be >= 0");
  divergence.validate();
  // One rank's process killed: only a job of several processes survives it to say so.
  if (kill_rank.rank >= 0 && backend != "mpi")
    SL_THROW(InvalidArgument,
             "--kill-rank ends a rank's process: it needs --backend mpi under "
             "mpirun (with --backend ",
             backend, " every rank is in this one)");
  if (resume == "latest" && ckpt_dir.empty())
    SL_THROW(InvalidArgument, "--resume latest needs --ckpt-dir (whose newest checkpoint to load)");
  if (!resume.empty() && !init_from.empty())
    SL_THROW(InvalidArgument,
             "--resume and --init-from both given: choose one (a checkpoint "
             "already holds the parameters)");
  if (accum < 1) SL_THROW(InvalidArgument, "--accum ", accum, ": must be >= 1");
  engine.validate();
  if (mem_limit < 0) SL_THROW(InvalidArgument, "--mem-limit ", mem_limit, ": must be >= 0");
  if (engine.hybrid_group > 0 && engine.strategy != Strategy::hybrid_shard)
    SL_THROW(InvalidArgument, hybrid_group_unused_message(engine.hybrid_group, engine.strategy));
  if (engine.keep_root && !gathers_params_per_unit(engine.strategy))
    SL_THROW(InvalidArgument, keep_root_unused_message(engine.strategy));
  // --ranks is the world size unless mpirun decides it (backend mpi, or nccl with one process per
  // GPU); then each rank checks the batch split against the MPI world.
  if (backend == "local" || backend == "sim" || (backend == "nccl" && !under_mpirun())) {
    check_split(ranks);
    const int g = engine.hybrid_group;
    if (engine.strategy == Strategy::hybrid_shard && g > 0 && ranks % g != 0)
      SL_THROW(InvalidArgument, "--hybrid-group ", g, " must divide --ranks ", ranks);
  }
  if (!(collective_timeout > 0 && collective_timeout <= 1e6))
    SL_THROW(InvalidArgument, "--collective-timeout ", collective_timeout,
             ": must be a number of seconds in (0, 1e6]");
  if (backend == "local") {
    if (slow_rank.rank >= ranks)
      SL_THROW(InvalidArgument, "--slow-rank: rank ", slow_rank.rank, " is not one of the ", ranks,
               " ranks");
    if (hang_rank.rank >= ranks)
      SL_THROW(InvalidArgument, "--hang-rank: rank ", hang_rank.rank, " is not one of the ", ranks,
               " ranks");
  }
  GPTConfig m = model_config();
  if (seq > m.max_seq_len)
    SL_THROW(InvalidArgument, "--seq ", seq, " exceeds the model's max_seq_len ", m.max_seq_len,
             " (lower --seq or raise --max-seq-len)");
  if (data == "synthetic" && synthetic.vocab > m.vocab_size)
    SL_THROW(InvalidArgument, "--synthetic-vocab ", synthetic.vocab,
             " exceeds the model's vocab_size ", m.vocab_size);
  check_sizes(m);
}

void TrainConfig::validate_simulation() const {
  if (backend != "sim" || device != "meta")
    SL_THROW(InvalidArgument, "a simulation runs --backend sim on --device meta (got backend '",
             backend, "', device '", device, "'): use shardlab simulate");
  if (!cluster_spec && cluster.empty())
    SL_THROW(InvalidArgument, "a simulation needs --cluster (a preset or a JSON file)");
  const std::shared_ptr<const ClusterSpec> spec =
      cluster_spec ? cluster_spec : std::make_shared<const ClusterSpec>(load_cluster_spec(cluster));
  spec->check_ranks(ranks);
  if (sim_rank < 0 || sim_rank >= ranks)
    SL_THROW(InvalidArgument, "simulated rank ", sim_rank, " outside [0, --ranks ", ranks, ")");
  if (sim_rank != 0 && !run_dir.empty())
    SL_THROW(InvalidArgument, "a simulated run directory records rank 0, not rank ", sim_rank);
  // Hybrid's shard groups must tile the nodes: a group of whole nodes, or a whole number of groups
  // per node. A group that straddles a node boundary (3 ranks on 8-GPU nodes) is a fraction of a
  // node, and its ranks would not all share one node's links.
  const int g = engine.hybrid_group;
  const int rpn = spec->ranks_per_node;
  if (engine.strategy == Strategy::hybrid_shard && g > 0 && ranks > g &&
      (g <= rpn ? rpn % g != 0 : g % rpn != 0))
    SL_THROW(InvalidArgument, "--hybrid-group ", g, " spans a fraction of a node of cluster '",
             spec->name, "' (ranks_per_node ", rpn, "): use a divisor of ", rpn,
             " or a multiple of it");
  if (!resume.empty() || !init_from.empty() || save_every > 0)
    SL_THROW(InvalidArgument,
             "a simulation holds no parameter values: --resume, --init-from and --save-every do "
             "not apply");
}

std::string keep_root_unused_message(Strategy s) {
  return detail::concat(
      "--keep-root applies only to strategies that free a unit's gathered "
      "parameters after forward (full_shard, hybrid_shard); ",
      strategy_name(s), " keeps whole parameters: drop it");
}

std::string hybrid_group_unused_message(int group, Strategy s) {
  return detail::concat("--hybrid-group ", group, " applies only to --strategy hybrid_shard (this ",
                        "run's strategy is ", strategy_name(s),
                        "): drop it, or add --strategy hybrid_shard");
}

// ---- sizes ----------------------------------------------------------------------------------
// A request larger than the machine ended in a bare std::bad_alloc (or, past int64, in signed
// overflow) somewhere inside the run. The buffers every run allocates in full are sized here
// first, in long double so no product of user values overflows, and compared with the host's
// memory: the message names the options that ask, and how much.

namespace {

std::string bytes_text(long double b) {
  return b < 9.0e18L ? format_bytes(static_cast<int64_t>(b))
                     : detail::concat(static_cast<double>(b), " bytes");
}

}  // namespace

void TrainConfig::check_sizes(const GPTConfig& m) const {
  if (device == "meta" && m.n_layer > kMaxSimulatedLayers)
    SL_THROW(InvalidArgument, "--n-layer ", m.n_layer, ": more than the ", kMaxSimulatedLayers,
             " blocks a simulation takes (each block's layout and schedule is kept on the host)");
  const long double host = static_cast<long double>(host_memory_bytes());
  const std::string more =
      host > 0 ? ", more than this machine's " + bytes_text(host) + " of memory" : "";
  const auto too_big = [&](long double bytes) { return host > 0 && bytes > host; };

  // The synthetic corpus: uint16 token ids, all in memory.
  if (data == "synthetic" && too_big(2.0L * synthetic.tokens))
    SL_THROW(InvalidArgument, "--corpus-tokens ", synthetic.tokens, " asks for ",
             bytes_text(2.0L * synthetic.tokens), " of uint16 token ids", more);

  // With the local backend (or nccl without mpirun) every rank lives in this process. Each
  // step's inputs and targets are int32, in the loader and again in the device's buffers (the
  // same host memory on a CPU device).
  const bool one_process = backend == "local" || (backend == "nccl" && !under_mpirun());
  const long double tokens = static_cast<long double>(batch) * seq;
  const long double token_bytes = tokens * (device == "cpu" ? 16 : 8);
  if (one_process && too_big(token_bytes))
    SL_THROW(InvalidArgument, "--batch ", batch, " x --seq ", seq, " asks for ",
             static_cast<double>(tokens), " tokens per step, ", bytes_text(token_bytes),
             " of token buffers", more);

  // Kernels index a micro-batch's B*T rows with int: more would wrap.
  const long double micro_tokens = tokens / (static_cast<long double>(ranks) * accum);
  if (micro_tokens > 2147483647.0L)
    SL_THROW(InvalidArgument, "--batch ", batch, " x --seq ", seq, " over --ranks ", ranks,
             " x --accum ", accum, " gives ", static_cast<double>(micro_tokens),
             " tokens per rank and micro-batch, more than the 2^31 - 1 the kernels index");

  if (!one_process || device != "cpu") return;  // the rest is per process, or in GPU memory
  // The model's persistent state over all ranks: one copy of the parameters, the gradients and
  // the optimizer's state however they are sharded (fp32 master copy when params are 16-bit).
  const long double params = static_cast<long double>(m.num_params());
  const EngineConfig& e = engine;
  const int optim_floats =
      e.optim.kind == OptimizerKind::adamw ? 2 : (e.optim.momentum > 0 ? 1 : 0);
  const long double per_param = static_cast<long double>(dtype_size(e.param_dtype)) +
                                dtype_size(e.reduce_dtype) + 4 * optim_floats +
                                (e.param_dtype == DType::f32 ? 0 : 4);
  std::string model_opts = "--model " + model;
  for (const ModelOverride& o : model_overrides(*this))
    if (o.value > 0 && o.field != &GPTConfig::n_head)  // heads change no size
      model_opts += detail::concat(" ", o.option, " ", o.value);
  if (too_big(params * per_param))
    SL_THROW(InvalidArgument, model_opts, ": the model (", m.describe(), ") asks for ",
             bytes_text(params * per_param), " of parameters, gradients and optimizer state", more,
             " (lower --n-layer, --n-embd or --vocab-size, or pick a smaller --model)");
  // The head's probabilities, (B/K, T, V) fp32 over the ranks' micro-batches.
  const long double probs = tokens / accum * m.vocab_size * 4;
  if (too_big(probs))
    SL_THROW(InvalidArgument, "--batch ", batch, " x --seq ", seq, " x vocab_size ", m.vocab_size,
             " (over --accum ", accum, ") asks for ", bytes_text(probs),
             " of output probabilities per micro-batch", more);
}

void TrainConfig::check_split(int world) const {
  const int64_t parts = static_cast<int64_t>(world) * accum;  // int * int: would wrap as int
  if (batch % parts != 0)
    SL_THROW(InvalidArgument, "--batch ", batch, " must split evenly over --ranks ", world,
             " x --accum ", accum, " (use a multiple of ", parts, ")");
  // The model indexes one rank's micro-batch (rows x T tokens) with 32-bit ints and the loader
  // sizes its buffers as rows * T: past INT32_MAX those products wrapped, and the run crashed.
  const int64_t rows = batch / parts;
  if (rows > std::numeric_limits<int32_t>::max() / seq)
    SL_THROW(InvalidArgument, "--batch ", batch, " x --seq ", seq, ": a micro-batch of ", rows,
             " rows x ", seq, " tokens per rank exceeds ", std::numeric_limits<int32_t>::max(),
             " tokens (raise --ranks or --accum, or lower --batch)");
}

float TrainConfig::lr_at(int64_t step) const {
  const float peak = engine.optim.lr;
  if (step < warmup) return peak * static_cast<float>(step + 1) / static_cast<float>(warmup);
  if (schedule == LrSchedule::constant) return peak;
  // Cosine from peak at the first step after warmup to peak * min_lr_ratio at the last step.
  const int64_t span = steps - warmup - 1;
  const double progress = span > 0 ? static_cast<double>(step - warmup) / span : 1.0;
  const double floor = peak * min_lr_ratio;
  return static_cast<float>(floor + 0.5 * (peak - floor) * (1.0 + std::cos(M_PI * progress)));
}

std::string TrainConfig::resume_path() const { return resume == "latest" ? ckpt_dir : resume; }

int64_t TrainConfig::print_interval() const {
  if (print_every > 0) return print_every;
  if (steps <= 100) return 1;
  // About 50 lines: the smallest of 1, 2, 5, 10, 20, 50, ... that is >= steps / 50. Compared
  // against ceil(steps / 50) rather than as m * decade * 50 >= steps: that product wrapped past
  // int64 for steps above ~4.6e18 and the loop never ended.
  const int64_t target = steps / 50 + (steps % 50 != 0);
  for (int64_t decade = 1;; decade *= 10)
    for (int64_t m : {1, 2, 5})
      if (m * decade >= target) return m * decade;
}

// ---- printing -----------------------------------------------------------------------------------

void print_step_header(std::ostream& out, bool host) {
  out << "  step |     loss |       lr |   tokens/s | peak MiB" << (host ? " | host MiB" : "")
      << "\n"
      << "-------+----------+----------+------------+---------" << (host ? "+---------" : "")
      << "\n";
}

void print_step_line(std::ostream& out, const StepLine& l) {
  char buf[160];
  int n = std::snprintf(buf, sizeof buf, "%6lld | %8.4f | %8.2e | %10.0f | %8.1f",
                        static_cast<long long>(l.step), l.loss, l.lr, l.tokens_per_s,
                        static_cast<double>(l.peak_bytes) / (1024.0 * 1024.0));
  if (l.host_peak_bytes >= 0 && n > 0 && n < static_cast<int>(sizeof buf))
    std::snprintf(buf + n, sizeof buf - static_cast<size_t>(n), " | %8.1f",
                  static_cast<double>(l.host_peak_bytes) / (1024.0 * 1024.0));
  out << buf << "\n";
  out.flush();
}

}  // namespace shardlab
