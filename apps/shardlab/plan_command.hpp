// `shardlab plan`: the simulator as a planner. Per strategy, one training step of the engine on the
// meta device (docs/simulate.md): persistent bytes per rank by category, the transient at the
// step's peak, whether the whole peak fits a capacity, and with --cluster the predicted step time,
// tokens/s and exposed communication. --params alone plans model states only (the ZeRO paper's
// figure): no activations or gathered units, so it never says "fits".
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "core/device/cluster_spec.hpp"
#include "core/fsdp/engine_config.hpp"
#include "core/fsdp/strategy.hpp"
#include "core/model/config.hpp"
#include "core/model/stage.hpp"

namespace shardlab {

struct PlanCommandOptions {
  std::string model = "small";  // a GPTConfig preset
  std::string hf_config;        // or a Hugging Face config.json's shape (--hf-config)
  // Shape overrides of the preset, as `train` names them (0 = keep the preset's).
  int n_layer = 0, n_head = 0, n_embd = 0, vocab_size = 0, max_seq_len = 0;
  AttentionKernel attention = AttentionKernel::naive;  // --attention: what backward keeps
  int64_t params = 0;  // Psi for a states-only plan (no model); excludes every shape option
  // The shape options the command line was given (for the refusal of --params beside them).
  std::vector<std::string> shape_flags_given;
  int ranks = 4;
  // The engine's settings, as `shardlab train` takes them; each listed strategy replaces
  // engine.strategy in turn. engine.hybrid_group 0: a group of 2 when N is even, else N.
  EngineConfig engine;
  std::vector<Strategy> strategies;  // empty: all five
  int batch = 4;                     // B per rank per micro-batch
  int seq = 0;                       // T (0: the model's max_seq_len)
  int accum = 1;
  int64_t capacity = 0;  // bytes per rank, 0 = none
  bool decimal = false;  // GB (1e9 bytes, the ZeRO paper's unit) instead of MiB
  std::string cluster;   // a preset or JSON file: also time the step ("" = memory only)
  ClusterOverrides cluster_overrides;  // --nodes, --gpus-per-node, --inter-node-gbps
  std::string math;  // fp32 | tf32 | bf16 ("" = bf16 with 16-bit parameters, else fp32)
};

// The model of `o`: the preset with its overrides; throws InvalidArgument naming the flag.
GPTConfig plan_model(const PlanCommandOptions& o);

// Prints the plan to `out`; returns 0, or 2 when a model plan has a capacity and no listed
// strategy fits it. A states-only plan (--params) never returns 2.
int plan_command(const PlanCommandOptions& opts, std::ostream& out);

}  // namespace shardlab
