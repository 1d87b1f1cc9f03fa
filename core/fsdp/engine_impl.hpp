// The engine's internal state, shared by its source files (engine.cpp: construction and the
// step's schedule; unshard.cpp: gather, prefetch and reshard; grad_reduce.cpp: gradient
// collectives; optim_step.cpp: clipping, AdamW and shard access). Not part of the public API.
#pragma once

#include <deque>
#include <memory>
#include <vector>

#include "core/fsdp/engine.hpp"
#include "core/model/layers.hpp"
#include "core/trace/recorder.hpp"

namespace shardlab {

// One unit's buffers on this rank. P = padded numel, S = P / G, own = this rank's range of the
// padded flat buffer ([0, P) for no_shard).
struct FsdpUnit {
  int id = 0;
  FlatLayout layout;
  ShardRange own;
  Buffer params;      // params: P (full-params strategies) or S elements of param_dtype
  Buffer grads;       // grads: P (no_shard, shard_optim) or S elements of reduce_dtype
  Buffer master;      // optimizer_state: own.size fp32, only when param_dtype is not f32
  std::unique_ptr<Optimizer> opt;  // over own.size elements; its state is optimizer_state

  Buffer gathered;    // params_unsharded: P elements of param_dtype while gathered
  Buffer compute;     // workspace: P fp32, the compute copy when param_dtype is not f32
  Buffer dflat;       // grads_unsharded: P fp32, the unit's gradient before it is reduced
  Work gather_work;
  bool gather_inflight = false;
  bool unsharded = false;
  bool grads_fresh = true;  // the persistent gradient holds nothing from this step yet
};

// A gradient collective in flight and the buffers it reads and writes.
struct PendingReduce {
  int unit = 0;
  Work work;
  Buffer staging;   // comm_buffers: the unit's gradient cast to reduce_dtype (P elements)
  Buffer recv_tmp;  // comm_buffers: the reduced shard when it must be added to an earlier one
  Buffer dflat;     // the fp32 unit gradient, kept alive until the collective has read it
  void* recv = nullptr;  // where the reduced shard landed
};

struct Engine::Impl {
  Impl(Device& dev, Communicator& world, Recorder* rec, const GPTConfig& model,
       const EngineConfig& cfg);

  Device& dev;
  Communicator& world;
  Recorder* rec;
  GPTConfig model;
  EngineConfig cfg;
  int N = 1;           // world size: the data-parallel degree
  int G = 1;           // shard group size
  int shard_rank = 0;  // index in the shard group
  std::unique_ptr<Communicator> shard_comm;    // the G ranks sharing a unit (null when G == 1)
  std::unique_ptr<Communicator> replica_comm;  // ranks holding the same shard (null when alone)
  std::vector<FsdpUnit> units;
  std::deque<PendingReduce> pending;
  std::vector<int> fwd_order, bwd_order;  // units in compute order
  int inflight_gathers = 0;
  int steps = 0;
  float grad_coef = 1.0f;  // clipping factor applied in optimizer_step
  bool grads_known_finite = false;  // clip_grad_norm found a finite global norm this step

  // Dtype sizes and the strategy's shape.
  int64_t psz() const { return dtype_size(cfg.param_dtype); }
  int64_t rsz() const { return dtype_size(cfg.reduce_dtype); }
  bool mixed() const { return cfg.param_dtype != DType::f32; }
  bool full_params() const { return keeps_full_params(cfg.strategy); }
  bool full_grads() const { return keeps_full_grads(cfg.strategy); }
  bool gathers() const { return gathers_params_per_unit(cfg.strategy) && G > 1; }
  // Full-gradient strategies with fp32 gradients let backward write straight into them.
  bool grads_direct() const { return full_grads() && cfg.reduce_dtype == DType::f32; }

  // ---- construction (engine.cpp)
  void init_units();

  // ---- the schedule (engine.cpp)
  float forward_backward(const int* tokens, const int* targets, int B, int T, int micro, int K);

  // ---- unshard / reshard (unshard.cpp)
  // Makes units[order[i]] usable for compute, first issuing the all-gathers of the next units in
  // `order` (prefetch), then waiting for its own.
  void unshard_at(const std::vector<int>& order, int i);
  void issue_gather(FsdpUnit& u);
  void reshard(FsdpUnit& u);
  const float* compute_params(const FsdpUnit& u) const;

  // ---- gradients (grad_reduce.cpp)
  float* grad_target(FsdpUnit& u);  // where backward accumulates the unit's fp32 gradient
  void after_unit_backward(FsdpUnit& u, bool last_micro);
  void issue_reduce(FsdpUnit& u);
  void complete(PendingReduce& p);
  void drain(size_t keep);  // completes pending reductions until `keep` remain

  // ---- optimizer (optim_step.cpp)
  float clip_grad_norm(float max_norm);
  // Divergence checks, before a unit is updated and before anything is saved: each throws Error
  // naming the step (steps + 1), the unit and this rank. A rank that finds nothing goes on and
  // fails in its next collective once the finding rank has aborted the world, so no rank reaches
  // a checkpoint save. optimizer_step checks each unit's reduced gradient (unless clipping found
  // a finite global norm, which proves it) and its updated parameters (fp32 master when mixed).
  void check_loss_finite(float loss) const;
  void optimizer_step();
  void* owned_params(FsdpUnit& u);  // param_dtype elements of the owned range
  void* owned_grads(FsdpUnit& u);   // reduce_dtype elements of the owned range

  Communicator::Traffic traffic_intra() const;
  Communicator::Traffic traffic_inter() const;
};

}  // namespace shardlab
