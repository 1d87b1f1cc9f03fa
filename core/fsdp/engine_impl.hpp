// The engine's internal state, shared by its source files (engine.cpp: construction and the
// walk over the stages; act_ckpt.cpp: activation checkpointing; unshard.cpp: gather and reshard;
// prefetch.cpp: the all-gathers issued ahead; grad_reduce.cpp: gradient collectives;
// clip_grad_norm.cpp: global-norm clipping; optim_step.cpp: divergence checks and the optimizer;
// shard_access.cpp: a unit's parameters, gradients and shards for tests and checkpoints).
// Not part of the public API.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "core/fsdp/engine.hpp"
#include "core/fsdp/mesh.hpp"
#include "core/fsdp/wrap_policy.hpp"
#include "core/model/model.hpp"
#include "core/trace/recorder.hpp"

namespace shardlab {

// A compute-lane span that also plays a straggler: under EngineConfig::compute_slowdown = F > 1
// it stretches the compute it measures to F times its length by sleeping at its end (inside the
// span, so the trace shows a slow rank).
class StragglerSpan {
 public:
  StragglerSpan(Recorder* rec, const char* op, int unit, double slowdown)
      : span_(rec, op, unit), slowdown_(slowdown), t0_(std::chrono::steady_clock::now()) {}
  ~StragglerSpan() {
    if (slowdown_ <= 1.0) return;
    const auto took = std::chrono::steady_clock::now() - t0_;
    std::this_thread::sleep_for(
        std::chrono::duration_cast<std::chrono::nanoseconds>(took * (slowdown_ - 1.0)));
  }
  StragglerSpan(const StragglerSpan&) = delete;
  StragglerSpan& operator=(const StragglerSpan&) = delete;

 private:
  ScopedSpan span_;
  double slowdown_;
  std::chrono::steady_clock::time_point t0_;
};

// One unit's buffers on this rank. P = padded numel, S = P / G, own = this rank's range of the
// padded flat buffer ([0, P) for no_shard).
struct FsdpUnit {
  int id = 0;
  FlatLayout layout;
  ShardRange own;
  Buffer params;  // params: P (full-params strategies) or S elements of param_dtype
  Buffer grads;   // grads: P (no_shard, shard_optim) or S elements of reduce_dtype
  Buffer master;  // optimizer_state: own.size fp32, only when param_dtype is not f32
  std::unique_ptr<Optimizer> opt;  // over own.size elements; its state is optimizer_state

  Buffer gathered;  // params_unsharded: P elements of param_dtype while gathered
  Buffer compute;   // workspace: P fp32, the compute copy when param_dtype is not f32
  Buffer dflat;     // grads_unsharded: P fp32, the unit's gradient before it is reduced
  bool dflat_unwritten = false;  // dflat came this micro-batch: backward writes, not adds
  Work gather_work;
  bool gather_inflight = false;
  bool unsharded = false;
  bool grads_fresh = true;  // the persistent gradient holds nothing from this step yet
};

// A gradient collective in flight and the buffers it reads and writes.
struct PendingReduce {
  int unit = 0;
  Work work;
  Buffer staging;        // comm_buffers: the unit's gradient cast to reduce_dtype (P elements)
  Buffer recv_tmp;       // comm_buffers: the reduced shard when it must be added to an earlier one
  Buffer dflat;          // the fp32 unit gradient, kept alive until the collective has read it
  void* recv = nullptr;  // where the reduced shard landed
  bool add = false;      // added to the kept gradient (an earlier micro-batch's) rather than set
  // hybrid_shard: `work` is the cross-group all-reduce of the shard, issued once the group's
  // reduce-scatter completed (its staging and dflat are freed by then).
  bool across_groups = false;
};

struct Engine::Impl {
  Impl(Device& dev, Communicator& world, Recorder* rec, const Model& model,
       const EngineConfig& cfg);

  Device& dev;
  Communicator& world;
  Recorder* rec;
  Model model;
  EngineConfig cfg;
  Mesh mesh;                 // shard and replica groups of this rank
  const StrategySpec* spec;  // the strategy's decisions (strategy.cpp)
  GradAccum accum;           // how backward's gradient reaches the kept one
  // The host tier (--offload): its own tracker (capacity cfg.host_mem_limit, mem events with
  // "tier":"host") and a CPU device over it. Null without offload. Declared before `units`, whose
  // buffers they outlive.
  std::unique_ptr<MemoryTracker> host_tracker;
  std::unique_ptr<Device> host_dev;
  int64_t copied_h2d = 0, copied_d2h = 0;      // bytes copied between the tiers, since construction
  std::unique_ptr<Communicator> shard_comm;    // the G ranks sharing a unit (null when G == 1)
  std::unique_ptr<Communicator> replica_comm;  // ranks holding the same shard (null when alone)
  WrapPlan wrap;                               // which stages each unit holds (wrap_policy.hpp)
  std::vector<FsdpUnit> units;
  std::deque<PendingReduce> pending;        // reduce-scatters or all-reduces in flight, in order
  std::deque<PendingReduce> pending_cross;  // hybrid_shard's cross-group all-reduces in flight
  PassSchedule fwd, bwd;  // the stages each compute step runs, the units it uses, when they go
  int inflight_gathers = 0;
  int steps = 0;
  float grad_coef = 1.0f;           // clipping factor applied in optimizer_step
  bool grads_known_finite = false;  // clip_grad_norm found a finite global norm this step

  // Dtype sizes and the strategy's shape.
  int64_t psz() const { return dtype_size(cfg.param_dtype); }
  int64_t rsz() const { return dtype_size(cfg.reduce_dtype); }
  bool mixed() const { return cfg.param_dtype != DType::f32; }
  bool full_params() const { return spec->params == Placement::full; }
  bool full_grads() const { return spec->grads == Placement::full; }
  // Parameters gathered per unit: only when a unit is split over more than one rank.
  bool gathers() const { return spec->reshard_after_forward && mesh.shard_size > 1; }

  // ---- construction (engine.cpp)
  void init_units();

  // ---- the schedule (engine.cpp): the stages' forward, then their backward in reverse
  float forward_backward(const int* tokens, const int* targets, int B, int T, int micro, int K);
  void run_forward(Pass& pass);
  void run_backward(Pass& pass, bool last_micro);
  // What stage s computes with: its range of its unit's gathered parameters and, in backward,
  // of the unit's gradient target (written or added to, as the unit's GradWrite says); the same
  // for the parameters it is tied to.
  StageArgs stage_args(int s, bool backward);

  // ---- activation checkpointing (act_ckpt.cpp)
  // Drops what the stages of a finished use saved: its layer's (or its root stage's).
  void release_saved(Pass& pass, const StageUse& use);
  // Before a layer's backward: its forward again from its input, which the pass keeps, to refill
  // what release_saved dropped after its forward.
  void recompute(Pass& pass, const StageUse& use);

  // ---- unshard / reshard (unshard.cpp)
  // Makes units[order[i]] usable for compute, first issuing the all-gathers of the next units in
  // `order` (prefetch), then waiting for its own.
  void unshard_at(const std::vector<int>& order, int i);
  void issue_gather(FsdpUnit& u);
  void reshard(FsdpUnit& u);
  const float* compute_params(const FsdpUnit& u) const;

  // ---- prefetch (prefetch.cpp)
  void prefetch(const std::vector<int>& order, int i);  // the gathers ahead of order[i]

  // ---- gradients (grad_reduce.cpp)
  float* grad_target(FsdpUnit& u);  // where backward accumulates the unit's fp32 gradient
  // Zeroes the elements of a flat gradient that no parameter covers (gaps, padding).
  void zero_uncovered(const FlatLayout& layout, float* flat);
  void after_unit_backward(FsdpUnit& u, bool last_micro);
  void fold_grad(FsdpUnit& u);  // GradAccum::fold: dflat cast and added into the full gradient
  void issue_reduce(FsdpUnit& u);
  // Waits for p's collective; hybrid_shard's reduce-scatter then hands its shard to the
  // cross-group all-reduce (issued async: false, p still in flight), else p is done (true).
  bool advance(PendingReduce& p);
  void finish_reduce(PendingReduce& p);  // the reduced shard into the kept gradient
  // Completes pending reductions until `keep` remain in each stage; drain(0) before anything
  // reads the gradients (clipping, the optimizer, a checkpoint).
  void drain(size_t keep);

  // ---- clipping (clip_grad_norm.cpp)
  float clip_grad_norm(float max_norm);

  // ---- optimizer (optim_step.cpp)
  // Divergence checks, before a unit is updated and before anything is saved: each throws Error
  // naming the step (steps + 1), the unit and this rank. A rank that finds nothing goes on and
  // fails in its next collective once the finding rank has aborted the world, so no rank reaches
  // a checkpoint save. optimizer_step checks each unit's reduced gradient (unless clipping found
  // a finite global norm, which proves it) and its updated parameters (fp32 master when mixed).
  void check_loss_finite(float loss) const;
  void optimizer_step();
  void* owned_params(FsdpUnit& u);  // param_dtype elements of the owned range
  void* owned_grads(FsdpUnit& u);   // reduce_dtype elements of the owned range
  // Where the optimizer state lives and the step runs: the host tier under any --offload.
  Device& optim_dev() { return host_dev ? *host_dev : dev; }
  // --offload params: the parameter and gradient shards live on the host tier too, beside the
  // optimizer state (state_dev: where the parameter and gradient shards are).
  bool all_state_on_host() const { return cfg.offload == Offload::params; }
  Device& state_dev() { return all_state_on_host() ? *host_dev : dev; }
  // Copies between the tiers, counted by direction and traced as copy-lane spans ("h2d", "d2h").
  // On a GPU they run on its copy stream (Device::copy_*_host_tier): a copy down returns with the
  // bytes on the host; a copy up returns at once (its span is the issue) and `read_by`'s stream
  // waits for it.
  void copy_d2h(void* host_dst, const void* src, int64_t bytes, int unit);
  void copy_h2d(void* dst, const void* host_src, int64_t bytes, int unit,
                ReadBy read_by = ReadBy::compute);

  // ---- shard access (shard_access.cpp)
  // This rank's owned range of a unit as fp32 (`mine`, own.size elements) all-gathered over the
  // shard group into the unpadded unit, on the host.
  std::vector<float> gather_owned(FsdpUnit& u, const Buffer& mine);

  Communicator::Traffic traffic_intra() const;
  Communicator::Traffic traffic_inter() const;
};

}  // namespace shardlab
