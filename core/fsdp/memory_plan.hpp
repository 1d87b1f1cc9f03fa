// The memory planner: per-rank bytes by tracker category for a strategy, before running anything.
//
// Persistent state (what a rank keeps between steps) follows the strategy table of docs/memory.md,
// generalised to mixed precision: per parameter, params cost size(param_dtype), grads
// size(reduce_dtype), and the optimizer 8 bytes (Adam m, v) plus a 4-byte fp32 master copy when
// param_dtype is not f32. fp32: 4 + 4 + 8 = 16 bytes; bf16/f16: 2 + 2 + 12 = 16 bytes (ZeRO's
// mixed-precision case).
// Buffers are padded per unit to a multiple of the shard group size, so "Psi" in the formulas is
// the padded parameter count; `padding_bytes` is what that padding costs on top of the formula
// with the real Psi.
//
// Transient state (gathered units, unsharded gradients, activations, scratch, staging) comes from
// replaying the engine's schedule for one step with byte counts only (plan_schedule.cpp): every
// allocation and free the engine makes, in the same order, so the planned peak is the step's peak.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/base/dtype.hpp"
#include "core/fsdp/engine_config.hpp"
#include "core/fsdp/strategy.hpp"
#include "core/memory/tracker.hpp"
#include "core/model/config.hpp"
#include "core/optim/optimizer.hpp"

namespace shardlab {

// What the planner needs of a run: the engine's settings as the engine takes them, and beside
// them only what the engine is not told (the world size, the model's units, the batch shape).
struct PlanInput {
  EngineConfig engine;  // strategy, G, dtypes, prefetch, act_ckpt, clip, optimizer, ...
  int world = 1;        // N
  // Unpadded parameter count of each unit (unit 0 first, as engine.wrap makes them). One entry is
  // fine for a model given only by Psi. Filled from `model` and engine.wrap when a model is set.
  std::vector<int64_t> unit_numels;
  int64_t capacity = 0;  // per-rank device capacity in bytes, 0 = unlimited

  // The run, for the transient part. Without a model the plan covers persistent state only (the
  // "model states" of the ZeRO paper's figure).
  std::optional<GPTConfig> model;
  int batch = 1;    // B: sequences per micro-batch per rank
  int seq_len = 0;  // T (0: model.max_seq_len)
  int accum = 1;    // K micro-batches per step
  // The local backend's collectives take a small f32 staging buffer (comm_buffers) while they
  // reduce; other backends stage inside the library, invisible to the tracker.
  bool local_staging = true;
  // The trainer keeps the rank's token ids and targets on the device (activations, B K T int32
  // each); tests that drive the engine directly from host arrays do not.
  bool token_buffers = false;

  int64_t psi() const;
};

// The plan input of a run: `engine` on `world` ranks training `model` with K = accum micro-batches
// of B x T (T = 0: the model's max_seq_len) per rank and step. Every caller that plans a run it
// is about to make (the bench, the capacity search, `shardlab plan`, the tests) starts here, so
// the plan sees every setting the engine sees.
PlanInput plan_input(const EngineConfig& engine, int world, const GPTConfig& model, int batch,
                     int seq_len, int accum = 1);

struct MemoryPlan {
  PlanInput input;
  int group = 1;              // shard group size used for padding and shards
  MemArray persistent{};      // by category
  MemArray transient{};       // by category, on top of persistent, at the planned peak
  std::string peak_where;     // the moment of the peak, e.g. "backward unit 0 (head)"
  int64_t padding_bytes = 0;  // part of `persistent` that is padding
  int64_t padded_psi = 0;     // sum over units of the padded unit size

  // The host tier (--offload; all 0 without): what lives there between steps, and on top of it at
  // the host's own peak (the optimizer step's staging of the largest unit).
  MemArray host_persistent{};
  MemArray host_transient{};

  int64_t persistent_total() const;
  int64_t peak_total() const;  // persistent + transient
  MemArray peak_by_category() const;
  int64_t host_peak_total() const;  // host_persistent + host_transient
  // Device peak within input.capacity and host peak within input.engine.host_mem_limit.
  bool fits() const {
    return (input.capacity <= 0 || peak_total() <= input.capacity) &&
           (input.engine.host_mem_limit <= 0 || host_peak_total() <= input.engine.host_mem_limit);
  }
};

// Bytes per parameter of persistent state, split as the tracker categorises it.
struct StateBytes {
  int64_t params, grads, optimizer;  // optimizer = 8 (m, v) + 4 (fp32 master) when mixed
};
// optim_bytes: what the optimizer keeps per parameter (optimizer_bytes_per_param).
StateBytes state_bytes(DType param_dtype, DType reduce_dtype, int64_t optim_bytes = 8);
// 8 for AdamW (m, v), 4 for SGD with momentum, 0 for plain SGD.
int64_t optimizer_bytes_per_param(const OptimizerConfig& o);

// The table's closed form for persistent bytes per rank, with a real-valued Psi:
// no_shard 16Psi, shard_optim (p+g)Psi + o Psi/N, shard_grad_op p Psi + (g+o) Psi/N,
// full_shard 16Psi/N, hybrid_shard 16Psi/G (16 = p + g + o).
double formula_persistent_bytes(Strategy s, double psi, int world, int hybrid_group,
                                DType param_dtype = DType::f32, DType reduce_dtype = DType::f32);

MemoryPlan plan_memory(const PlanInput& in);

// The engine's schedule replayed with byte counts (plan_schedule.cpp): fills plan.transient and
// plan.peak_where for plan.input.model; called by plan_memory.
void plan_step_transient(MemoryPlan& plan);

// Fixed-width table of plans, one row per plan: persistent by category, transient, peak, fits.
// `decimal` prints GB (1e9, as the ZeRO paper does) instead of MiB.
std::string format_plan_table(const std::vector<MemoryPlan>& plans, bool decimal = false);

}  // namespace shardlab
