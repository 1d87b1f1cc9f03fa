// `shardlab plan --recommend`: a strategy advisor (docs/choosing.md). For a model, a cluster, a
// rank count, a global batch and a memory cap, it simulates every configuration of strategy,
// hybrid group G, prefetch, activation checkpointing, micro-batches K, dtypes and the wrap
// policies and host tiers asked for (--wraps, block by default; --offloads, none by default) with
// run_simulation (the engine itself on one simulated rank), drops those whose peak does not fit
// the cap, and prints the fastest by predicted tokens/s, each with why and the `shardlab simulate`
// command that reproduces it. full_shard and hybrid_shard always keep the root gathered into the
// backward (--keep-root): it holds no more memory and sends fewer bytes.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "core/base/dtype.hpp"
#include "core/device/cluster_spec.hpp"
#include "core/fsdp/engine_config.hpp"
#include "core/model/stage.hpp"

namespace shardlab {

struct RecommendOptions {
  std::string model = "small";         // a GPTConfig preset
  std::string hf_config;               // or a Hugging Face config.json's shape
  std::string cluster;                 // a preset or a JSON cluster file (as `shardlab simulate`)
  ClusterOverrides cluster_overrides;  // --nodes, --gpus-per-node, --inter-node-gbps
  AttentionKernel attention = AttentionKernel::naive;  // the kernel every candidate runs
  int ranks = 0;                                       // N
  int64_t global_batch = 0;                            // sequences per step, all ranks: N x B x K
  int seq = 0;                                         // T (0: the model's max_seq_len)
  int64_t mem_cap = 0;  // bytes per rank (0: the cluster's GPU memory)
  int top = 5;          // configurations printed
  std::vector<DType> dtypes = {DType::f32, DType::bf16};  // for parameters and for gradients
  // Wrap policies searched (--wraps; wrap_policy.hpp's forms). Each multiplies the search.
  std::vector<std::string> wraps = {"block"};
  // Host-memory tiers searched (--offloads none,optim,params); params only for the strategies
  // that shard parameters. host_cap: the host tier's bytes per rank a configuration may use
  // (--host-mem-limit; 0: no limit).
  std::vector<Offload> offloads = {Offload::none};
  int64_t host_cap = 0;
  // Simulate act-ckpt and offload even where the same configuration without it fits (neither is
  // ever faster: docs/choosing.md); off by default.
  bool exhaustive = false;
};

// One configuration of the search.
struct RecommendCandidate {
  Strategy strategy = Strategy::full_shard;
  int hybrid_group = 0;  // hybrid_shard only
  int prefetch = 0;
  bool act_ckpt = false;
  int accum = 1;  // K
  DType param_dtype = DType::f32, reduce_dtype = DType::f32;
  std::string wrap = "block";
  Offload offload = Offload::none;
};

struct RecommendRow {
  RecommendCandidate c;
  double step_s = 0, tokens_per_s = 0, mfu = 0;
  int64_t peak_bytes = 0;
  int64_t headroom_bytes = 0;    // the GPU's beyond the peak (SimulateResult::headroom)
  int64_t host_peak_bytes = -1;  // the host tier's peak under offload (-1: none)
  double exposed_comm_s = -1, compute_s = -1, comm_s = -1;  // the printed rows only
  std::string command;                                      // `shardlab simulate ...`
};

struct RecommendResult {
  std::vector<RecommendRow> best;  // fitting, fastest first (at most `top`)
  std::vector<RecommendRow> fits;  // every one that fits, fastest first (no comm/compute split)
  int64_t candidates = 0;          // configurations in the search space
  int64_t simulated = 0;           // run through the simulator
  int64_t dropped = 0;             // simulated and over the cap
  RecommendRow leanest;  // the least peak + headroom simulated (what to say when none fits)
  int64_t skipped = 0;   // act-ckpt or offload where the same without it fits (not simulated)
  int64_t refused = 0;   // refused by TrainConfig::validate (not simulated)
  int64_t cap = 0;       // the cap applied, bytes per rank
  double seconds = 0;    // wall time of the search
};

// The configurations the search covers for `o` on a cluster with `ranks_per_node` GPUs a node,
// in the order they are simulated (each act-ckpt-off candidate directly before its act-ckpt-on
// twin). Throws InvalidArgument naming the option when the global batch does not split over N.
std::vector<RecommendCandidate> recommend_candidates(const RecommendOptions& o, int ranks_per_node);

// Runs the search and prints the report to `out`; progress goes to `progress` (may be null) when
// the search runs for more than a second. Throws InvalidArgument for bad options (naming them).
RecommendResult recommend(const RecommendOptions& o, std::ostream& out, std::ostream* progress);

// The command line's entry: prints to `out`, progress to `progress`; returns 0, or 2 when no
// configuration fits the cap (with a line saying what the leanest configuration needs).
int recommend_command(const RecommendOptions& o, std::ostream& out, std::ostream* progress);

}  // namespace shardlab
