// The memory planner: per-rank bytes by tracker category for a strategy, before running anything.
//
// With a model (always a shape: its units, batch and sequence), the plan is the simulator's: the
// real Engine runs one training step on a MetaDevice (every allocation tracked, no memory held)
// with a SimCommunicator standing for rank 0 of N (docs/simulate.md). Persistent state is what the
// engine keeps between steps; transient state what the step adds at its peak; the host tier's
// likewise under --offload. So the planned peak is the tracker's, by construction, and nothing
// mirrors the engine's schedule by hand. Without a cluster the device model's times are unused;
// with one (PlanInput::cluster) the same step also gives the predicted step time.
//
// Without a model (a bare parameter count, the ZeRO paper's Psi) the plan covers the "model
// states" only: persistent bytes from the strategy table of docs/memory.md, generalised to mixed
// precision: per parameter, params cost size(param_dtype), grads size(reduce_dtype), and the
// optimizer 8 bytes (Adam m, v) plus a 4-byte fp32 master copy when param_dtype is not f32.
// fp32: 4 + 4 + 8 = 16 bytes; bf16/f16: 2 + 2 + 12 = 16 bytes (ZeRO's mixed-precision case).
// Buffers are padded per unit to a multiple of the shard group size, so "Psi" in the formulas is
// the padded parameter count; `padding_bytes` is what that padding costs on top of the formula
// with the real Psi.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/base/dtype.hpp"
#include "core/device/cluster_spec.hpp"
#include "core/fsdp/engine_config.hpp"
#include "core/fsdp/strategy.hpp"
#include "core/memory/tracker.hpp"
#include "core/model/model.hpp"
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
  // "model states" of the ZeRO paper's figure): states_only().
  std::optional<Model> model;  // any model (a GPTConfig converts to GPT-2's)
  int batch = 1;               // B: sequences per micro-batch per rank
  int seq_len = 0;             // T (0: the model's max_seq_len)
  int accum = 1;               // K micro-batches per step
  // The trainer keeps the rank's token ids and targets on the device (activations, B K T int32
  // each); tests that drive the engine directly from host arrays do not.
  bool token_buffers = false;
  // With a cluster the simulated step is timed on it (N must fit it: ClusterSpec::check_ranks);
  // GEMMs at `math` (default: bf16 with 16-bit parameters, else fp32). Without one, memory only.
  std::shared_ptr<const ClusterSpec> cluster;
  std::optional<GemmMath> math;

  int64_t psi() const;
};

// The plan input of a run: `engine` on `world` ranks training `model` with K = accum micro-batches
// of B x T (T = 0: the model's max_seq_len) per rank and step. Every caller that plans a run it
// is about to make (the bench, the capacity search, `shardlab plan`, the tests) starts here, so
// the plan sees every setting the engine sees.
PlanInput plan_input(const EngineConfig& engine, int world, const Model& model, int batch,
                     int seq_len, int accum = 1);

// What one rank needs beyond its tracked peak on a GPU whose spec has headroom `h`
// (ClusterSpec::headroom): the context, NCCL's buffers for each communicator the strategy
// communicates over, and the allocator's fragmentation as a fraction of the peak.
struct HeadroomBytes {
  int64_t context = 0, nccl = 0, fragmentation = 0;
  int communicators = 0;
  double fragmentation_fraction = 0;
  int64_t total() const { return context + nccl + fragmentation; }
  // "context 1.15 GiB + NCCL 1.00 GiB (1 communicator) + fragmentation 1.7% 1.02 GiB"
  std::string describe() const;
};
// The communicators a rank of `strategy` on `world` ranks uses (a process group each, as PyTorch
// creates them): its shard group if it has more than one rank, and its replica group likewise.
// no_shard and the ZeRO stages and full_shard: 1 (0 on one rank); hybrid_shard with 1 < G < N: 2.
int communicators_used(Strategy strategy, int world, int hybrid_group);
HeadroomBytes gpu_headroom(const Headroom& h, const EngineConfig& engine, int world, int64_t peak);

struct MemoryPlan {
  PlanInput input;
  int group = 1;              // shard group size used for padding and shards
  MemArray persistent{};      // by category
  MemArray transient{};       // by category, on top of persistent, at the planned peak
  int64_t padding_bytes = 0;  // part of `persistent` that is padding
  int64_t padded_psi = 0;     // sum over units of the padded unit size

  // The host tier (--offload; all 0 without): what lives there between steps, and on top of it at
  // the host's own peak (the optimizer step's staging of the largest unit).
  MemArray host_persistent{};
  MemArray host_transient{};

  // With PlanInput::cluster: the simulated step's time, the part of it the compute stream stood
  // waiting for collectives (exposed communication), and the tokens it trains on all N ranks
  // (N B K T). -1 without a cluster.
  double step_s = -1;
  double exposed_comm_s = -1;
  int64_t tokens = 0;
  double tokens_per_s() const { return step_s > 0 ? static_cast<double>(tokens) / step_s : 0; }
  // With PlanInput::cluster: what the GPU holds beyond the tracked peak (all 0 without).
  HeadroomBytes headroom;

  // A plan of a bare parameter count: persistent model states, no activations or gathered units,
  // so no peak to compare with a device (callers never say "fits" of it).
  bool states_only() const { return !input.model.has_value(); }

  int64_t persistent_total() const;
  int64_t peak_total() const;  // persistent + transient
  MemArray peak_by_category() const;
  int64_t host_peak_total() const;  // host_persistent + host_transient
  // Device peak plus headroom within input.capacity, and host peak within
  // input.engine.host_mem_limit.
  bool fits() const {
    return (input.capacity <= 0 || peak_total() + headroom.total() <= input.capacity) &&
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

// The plan of `in`: with a model, one step of the engine on the meta device (see above); throws
// what the engine throws for settings it refuses (InvalidArgument), and InvalidArgument for a
// cluster N does not fit.
MemoryPlan plan_memory(const PlanInput& in);

// Fixed-width table of plans, one row per plan: persistent by category, transient, peak, fits
// (states-only plans: persistent only, labelled "model states only", no transient, peak or fits).
// With timed plans three more columns: step time, tokens/s and exposed communication.
// `decimal` prints GB (1e9, as the ZeRO paper does) instead of MiB.
std::string format_plan_table(const std::vector<MemoryPlan>& plans, bool decimal = false);

}  // namespace shardlab
