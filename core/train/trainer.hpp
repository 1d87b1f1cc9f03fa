// The trainer: every option of `shardlab train` in one TrainConfig, and run_training(), which
// loads the data, builds the model and runs the loop, printing one fixed-width line per step.
//
//   run_training:  config -> corpus -> loader -> one EngineStepper per rank -> for each step:
//                  batch, lr, step()
// The engine's own settings are TrainConfig::engine, the EngineConfig the engine and the memory
// planner take as they are.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/comm/flight_recorder.hpp"
#include "core/device/cluster_spec.hpp"
#include "core/device/device.hpp"
#include "core/fsdp/engine_config.hpp"
#include "core/memory/tracker.hpp"
#include "core/model/config.hpp"
#include "core/model/stage.hpp"
#include "core/train/divergence.hpp"
#include "core/train/markov.hpp"

namespace shardlab {

// Faults on demand (--slow-rank R:F, --hang-rank R:STEP:S), to see the straggler monitor and the
// collective watchdog at work. rank -1: none.
struct SlowRank {
  int rank = -1;
  double factor = 1.0;  // its forward and backward take this many times as long
};
struct HangRank {
  int rank = -1;
  int64_t step = 1;      // before this step (1-based) ...
  double seconds = 0.0;  // ... it sleeps this long, outside any collective
};
// Under mpirun: rank R's process kills itself (SIGKILL) before step STEP, as a crashed or
// OOM-killed rank would end, to see what the others leave behind (--kill-rank R:STEP).
struct KillRank {
  int rank = -1;
  int64_t step = 1;
};
SlowRank parse_slow_rank(const std::string& s);  // "R:F"
HangRank parse_hang_rank(const std::string& s);  // "R:STEP:SECONDS"
KillRank parse_kill_rank(const std::string& s);  // "R:STEP"

enum class LrSchedule : uint8_t { constant, cosine };
const char* lr_schedule_name(LrSchedule s);
LrSchedule parse_lr_schedule(const std::string& s);  // "constant" | "cosine"

// The engine settings `shardlab train` starts from: EngineConfig's own, with a peak lr of 2e-3.
EngineConfig train_engine_defaults();

struct TrainConfig {
  // ---- model: a preset, then overrides (0 = keep the preset's value)
  std::string model = "small";
  // A Hugging Face config.json (or a directory holding one) whose shape replaces the preset's:
  // GPT-2 or Llama family (core/checkpoint/hf_config.hpp); the overrides below still apply.
  std::string hf_config;
  int n_layer = 0;
  int n_head = 0;
  int n_embd = 0;
  int vocab_size = 0;
  int max_seq_len = 0;
  // The attention kernel (core/model/stage.hpp): naive keeps each block's (B, NH, T, T)
  // probabilities for backward, flash one logsumexp per query row.
  AttentionKernel attention = AttentionKernel::naive;

  // ---- data: "synthetic", a text file, or an llm.c .bin shard
  std::string data = "synthetic";
  SyntheticSpec synthetic;

  // ---- loop. The defaults take `small` on the synthetic corpus to within 10% of its entropy
  // rate in about 100 s on one core (6% above it after 300 steps; see docs/data.md).
  int64_t steps = 300;
  int64_t batch = 16;       // B, global, in sequences
  int64_t seq = 64;         // T
  int64_t print_every = 0;  // 0 = automatic: every step up to 100 steps, then about 50 lines
  int threads = 1;          // BLAS threads

  // ---- the engine (docs/fsdp.md): strategy, hybrid group, prefetch, in-flight cap, dtypes,
  // act_ckpt, accum_mode, clip, the optimizer (kind, peak lr, betas, eps, wd, momentum) and the
  // seed, which also orders the batches. With one rank every strategy is the same computation as
  // the single-rank GPT.
  EngineConfig engine = train_engine_defaults();

  // ---- learning rate schedule
  int64_t warmup = 30;  // linear warmup steps from lr/warmup to lr
  LrSchedule schedule = LrSchedule::cosine;
  float min_lr_ratio = 0.1f;  // cosine decays to lr * min_lr_ratio at the last step

  // ---- parallelism: where the ranks run
  int ranks = 1;                  // local ranks (threads); under mpirun the MPI world decides
  std::string backend = "local";  // local | mpi | nccl | sim
  std::string device = "cpu";     // cpu | cuda (one GPU per rank; needs backend nccl) | meta (sim)
  // local, 2 or more ranks that fit on this process's CPUs: each rank's thread on a core of its
  // own (core/base/cpu_affinity.hpp); false: the scheduler places every thread.
  bool bind_to_cores = true;

  // ---- simulation (backend sim, device meta; docs/simulate.md): one rank of --ranks on a cluster
  std::string cluster;  // a preset name or a JSON file (load_cluster_spec)
  std::shared_ptr<const ClusterSpec> cluster_spec;  // when set, used instead of loading `cluster`
  int sim_rank = 0;                                 // the rank that runs (0 when writing a run dir)
  GemmMath gemm_math = GemmMath::fp32;              // the peak GEMMs are charged at
  int accum = 1;          // K micro-batches per step; batch / (ranks K) rows each
  int64_t mem_limit = 0;  // per-rank tracker capacity in bytes, 0 = unlimited
  // Run directory for the trace (meta.json, rank<R>.jsonl, summary.json, trace.json; the viewer
  // opens it). Empty: none. "auto": runs/<strategy>-n<N>-<time>.
  std::string run_dir;
  bool overwrite_run_dir = false;

  // ---- checkpoints (core/checkpoint, docs/checkpoints.md)
  int64_t save_every = 0;  // save after every K steps and after the last one (0 = never)
  std::string ckpt_dir;    // where checkpoints go: <ckpt_dir>/step-<k>/ and <ckpt_dir>/latest
  int keep_last = 0;       // after each save keep only this many newest checkpoints (0 = all)
  // Continue a run: a checkpoint directory (step-<k>/ or a root with `latest`), or "latest" for
  // the newest in ckpt_dir. Any strategy and world size; the model and data settings must match.
  std::string resume;
  // Start from the parameters of a safetensors file (an export, or GPT-2 weights of this shape).
  std::string init_from;

  // ---- reliability (docs/reliability.md): the collective watchdog and faults on demand
  double collective_timeout = kDefaultCollectiveTimeoutS;  // seconds one collective may wait
  SlowRank slow_rank;
  HangRank hang_rank;
  KillRank kill_rank;  // backend mpi only
  // A loss that stays far above the best it reached (core/train/divergence.hpp).
  DivergenceOptions divergence;

  // The model this config describes: preset plus overrides, validated (throws InvalidArgument
  // naming the field).
  GPTConfig model_config() const;
  // What the logs call the model: the preset's name, or the config.json path.
  const std::string& model_name() const { return hf_config.empty() ? model : hf_config; }
  KernelChoice kernels() const { return {attention}; }
  // Checks every field; throws InvalidArgument with a message naming the option and its value.
  void validate() const;
  // Checks that --batch splits evenly over `world` ranks x --accum micro-batches, and that one
  // micro-batch (rows x --seq tokens) fits the kernels' 32-bit indices. validate() calls it with
  // --ranks; under mpirun each rank calls it with the MPI world. Throws InvalidArgument.
  void check_split(int world) const;
  // Part of validate() for backend sim: the cluster loads, --ranks fits it, a hybrid group tiles
  // its nodes, and nothing asks for parameter values. Throws InvalidArgument naming the field.
  void validate_simulation() const;
  // Part of validate(): the buffers every run allocates in full (corpus, token buffers, model
  // state, output probabilities) against this machine's memory, computed without overflow;
  // throws InvalidArgument naming the options and the bytes they ask for.
  void check_sizes(const GPTConfig& m) const;
  // Learning rate at step s (0-based): linear warmup, then constant or cosine decay.
  float lr_at(int64_t step) const;
  // The print interval print_every resolves to for `steps` steps.
  int64_t print_interval() const;
  // The checkpoint path --resume names (ckpt_dir for "latest"); empty when not resuming.
  std::string resume_path() const;
};

// "--hybrid-group G applies only to --strategy hybrid_shard ...": validate() and the command line
// (which also refuses an explicit --hybrid-group 0) say it the same way.
std::string hybrid_group_unused_message(int group, Strategy s);
// The message for --keep-root on a strategy that never frees its gathered parameters.
std::string keep_root_unused_message(Strategy s);

// One printed line of the loop.
struct StepLine {
  int64_t step = 0;   // 1-based
  double loss = 0.0;  // mean over the steps since the previous line
  float lr = 0.0f;
  double tokens_per_s = 0.0;     // over the steps since the previous line
  int64_t peak_bytes = 0;        // tracker peak so far
  int64_t host_peak_bytes = -1;  // the host tier's peak so far (--offload), -1: no host tier
};
// The header and the line, fixed width: "  step |     loss |       lr |  tokens/s | peak MiB",
// with " | host MiB" after it when host is set (--offload).
void print_step_header(std::ostream& out, bool host = false);
void print_step_line(std::ostream& out, const StepLine& line);

struct TrainResult {
  std::vector<float> losses;         // every step this run took (after start_step when resumed)
  std::vector<double> step_seconds;  // each step's time (virtual on a simulated rank)
  int64_t start_step = 0;            // steps done before this run: the resumed checkpoint's step
  double final_loss = 0.0;           // mean of the last min(10, steps) steps
  double entropy_rate = 0.0;         // nats/token, NaN when the data has no known floor
  double seconds = 0.0;              // the loop's wall time
  double tokens_per_s = 0.0;         // over the whole loop
  int64_t tokens = 0;                // trained on
  int64_t peak_bytes = 0;            // tracker peak (rank 0)
  // Rank 0's allocator and driver at the end of the run (a GPU's pool; nullopt on the CPU).
  std::optional<PoolReport> pool;
  int64_t num_params = 0;
  int world = 1;                  // ranks that trained
  MemArray peak_by_category{};    // rank 0: each category at the moment of the peak
  MemArray peak_each_category{};  // rank 0: each category's own peak
  // Rank 0, the engine's collectives in the last step (core/comm/traffic.hpp): sent per rank
  // (ring traffic) and buffer (the collectives' full sizes, nccl-tests' convention).
  int64_t comm_bytes_per_step = 0;
  int64_t comm_buffer_per_step = 0;
  // The host tier (--offload; rank 0): its peak (-1 without a host tier), the categories at that
  // moment, and the bytes copied between the tiers in the last step, by direction.
  int64_t host_peak_bytes = -1;
  MemArray host_peak_by_category{};
  int64_t copy_h2d_per_step = 0, copy_d2h_per_step = 0;
  std::string run_dir;            // where the trace went (empty when none)
  std::string last_checkpoint;    // the newest checkpoint this run saved (empty when none)
  double checkpoint_seconds = 0;  // time spent saving (not in seconds or tokens_per_s)
};

// Trains as cfg says: launches the ranks (backend, device), runs the FSDP engine on each, prints
// the header, step lines and a summary to out (rank 0), writes the run directory and checkpoints.
TrainResult run_training(const TrainConfig& cfg, std::ostream& out);

}  // namespace shardlab
