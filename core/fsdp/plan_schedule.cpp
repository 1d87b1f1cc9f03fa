// The planner's transient part: one training step of the engine replayed with byte counts only.
// Each function below mirrors the engine function of the same name (engine.cpp, unshard.cpp,
// grad_reduce.cpp, optim_step.cpp) and the scratch the model's layers take inside their calls
// (core/model/block.cpp, head.cpp, core/kernels/attention.cpp). When one of those changes what it
// allocates, this file changes with it; the planner test compares against measured peaks.
#include <deque>
#include <string>

#include "core/base/error.hpp"
#include "core/fsdp/flat_param.hpp"
#include "core/fsdp/memory_plan.hpp"
#include "core/fsdp/mesh.hpp"
#include "core/fsdp/prefetch.hpp"
#include "core/fsdp/wrap_policy.hpp"
#include "core/model/layers.hpp"
#include "core/model/params.hpp"

namespace shardlab {

namespace {

constexpr MemCategory kPu = MemCategory::params_unsharded, kGu = MemCategory::grads_unsharded,
                      kAct = MemCategory::activations, kWs = MemCategory::workspace,
                      kCb = MemCategory::comm_buffers;

// The local backend's reduction staging (core/comm/reduce.cpp, reduce_staging_bytes).
int64_t local_staging_bytes(int64_t len, DType t) {
  const int64_t block = std::min<int64_t>(len, 8192);
  return block * 4 + (t == DType::f32 ? 0 : block * 2);
}

struct SimUnit {
  int64_t P = 0, S = 0;
  bool inflight = false, unsharded = false, dflat = false, fresh = true;
};

struct SimPending {
  int unit = 0;
  int64_t staging = 0, recv_tmp = 0, dflat = 0, comm = 0;
  bool add = false;  // added to an earlier micro-batch's shard
};

class StepSim {
 public:
  explicit StepSim(MemoryPlan& plan) : plan_(plan), in_(plan.input), cfg_(*in_.model) {
    cur_ = plan.persistent;
    for (int64_t b : cur_) total_ += b;
    peak_ = total_;
    at_peak_ = cur_;
    where_ = "start";
    G_ = plan.group;
    N_ = in_.world;
    replica_ = make_mesh(in_.engine.strategy, N_, 0, G_).replica_size;
    spec_ = &strategy_spec(in_.engine.strategy);
    accum_ = grad_accum(in_.engine.strategy, in_.engine.reduce_dtype, in_.engine.accum_mode);
    wrap_ = make_wrap_plan(cfg_, parse_wrap_policy(in_.engine.wrap));
    fwd_ = forward_schedule(wrap_, cfg_.n_layer);
    bwd_ = backward_schedule(wrap_, cfg_.n_layer, in_.engine.act_ckpt);
    for (int64_t n : in_.unit_numels) {
      SimUnit u;
      u.P = round_up(n, G_);
      u.S = G_ > 1 ? u.P / G_ : u.P;
      units_.push_back(u);
    }
  }

  void run() {
    host_cur_ = plan_.host_persistent;
    for (int64_t b : host_cur_) host_total_ += b;
    host_peak_ = host_total_;
    host_at_peak_ = host_cur_;
    if (in_.token_buffers) {
      const int T = in_.seq_len > 0 ? in_.seq_len : cfg_.max_seq_len;
      alloc(kAct, 2 * static_cast<int64_t>(in_.batch) * in_.accum * T * 4);
    }
    for (int k = 0; k < in_.accum; ++k) forward_backward(k == in_.accum - 1);
    if (in_.engine.clip > 0) clip();
    optimizer_step();
    MemArray tr{};
    for (int i = 0; i < kNumMemCategories; ++i) tr[i] = at_peak_[i] - plan_.persistent[i];
    plan_.transient = tr;
    for (int i = 0; i < kNumMemCategories; ++i)
      plan_.host_transient[i] = host_at_peak_[i] - plan_.host_persistent[i];
    plan_.peak_where = where_;
  }

 private:
  // ---- bookkeeping
  void alloc(MemCategory c, int64_t b, const char* what = nullptr) {
    cur_[static_cast<int>(c)] += b;
    total_ += b;
    if (total_ > peak_) {
      peak_ = total_;
      at_peak_ = cur_;
      where_ = what ? std::string(what) : phase_;
    }
  }
  void release(MemCategory c, int64_t b) {
    cur_[static_cast<int>(c)] -= b;
    total_ -= b;
  }
  // The host tier (--offload): its own totals and peak.
  void host_alloc(MemCategory c, int64_t b) {
    host_cur_[static_cast<int>(c)] += b;
    host_total_ += b;
    if (host_total_ > host_peak_) {
      host_peak_ = host_total_;
      host_at_peak_ = host_cur_;
    }
  }
  void host_release(MemCategory c, int64_t b) {
    host_cur_[static_cast<int>(c)] -= b;
    host_total_ -= b;
  }
  bool params_off() const { return in_.engine.offload == Offload::params; }
  bool optim_off() const { return in_.engine.offload == Offload::optim; }
  // Scratch where the gradient shards are: the host tier under --offload params.
  void state_alloc(MemCategory c, int64_t b) { params_off() ? host_alloc(c, b) : alloc(c, b); }
  void state_release(MemCategory c, int64_t b) {
    params_off() ? host_release(c, b) : release(c, b);
  }
  int64_t p() const { return dtype_size(in_.engine.param_dtype); }
  int64_t r() const { return dtype_size(in_.engine.reduce_dtype); }
  bool mixed() const { return in_.engine.param_dtype != DType::f32; }
  bool full_grads() const { return spec_->grads == Placement::full; }
  bool gathers() const { return spec_->reshard_after_forward && G_ > 1; }
  int64_t staging(int64_t len) const {
    return in_.local_staging ? local_staging_bytes(len, in_.engine.reduce_dtype) : 0;
  }

  // ---- unshard.cpp
  void issue_gather(SimUnit& u) {
    alloc(kPu, u.P * p());
    u.inflight = true;
    ++inflight_;
  }
  void unshard_at(const std::vector<int>& order, int i) {
    SimUnit& u = units_[order[i]];
    if (u.unsharded) return;
    if (gathers()) {
      if (!u.inflight) issue_gather(u);
      auto busy = [&](int id) { return units_[id].unsharded || units_[id].inflight; };
      for (int id : prefetch_units(order, i, in_.engine.prefetch, in_.engine.max_inflight_gathers,
                                   inflight_, busy))
        issue_gather(units_[id]);
      u.inflight = false;
      --inflight_;
    }
    if (mixed()) alloc(kWs, u.P * 4);
    u.unsharded = true;
  }
  void reshard(SimUnit& u) {
    if (!u.unsharded) return;
    if (mixed()) release(kWs, u.P * 4);
    if (gathers()) release(kPu, u.P * p());
    u.unsharded = false;
  }

  // ---- grad_reduce.cpp
  void grad_target(SimUnit& u) {
    if (accum_ == GradAccum::direct || u.dflat) return;
    alloc(kGu, u.P * 4);
    u.dflat = true;
  }
  void after_unit_backward(int id, bool last) {
    SimUnit& u = units_[id];
    if (accum_ == GradAccum::fold) {
      if (!u.fresh) {
        alloc(kWs, u.P * 4);
        release(kWs, u.P * 4);
      }
      release(kGu, u.P * 4);
      u.dflat = false;
      u.fresh = false;
    }
    if (!reduces_after(accum_, last)) return;
    issue_reduce(id);
    drain(1);
  }
  void issue_reduce(int id) {
    SimUnit& u = units_[id];
    SimPending q;
    q.unit = id;
    if (!full_grads()) {
      if (in_.engine.reduce_dtype != DType::f32) {
        q.staging = u.P * r();
        alloc(kCb, q.staging);
        release(kGu, u.P * 4);
      } else {
        q.dflat = u.P * 4;
      }
      u.dflat = false;
      q.add = !u.fresh;
      if (!u.fresh || params_off()) {
        q.recv_tmp = u.S * r();
        alloc(kCb, q.recv_tmp);
      }
      u.fresh = false;
    }
    switch (spec_->grad_collective) {
      case GradCollective::all_reduce:
        if (replica_ > 1) q.comm = staging(u.P / replica_ + 1);  // all-reduce chunk
        break;
      case GradCollective::reduce_scatter:
      case GradCollective::reduce_scatter_all_reduce:
        if (G_ > 1) q.comm = staging(u.S);
        break;
    }
    if (q.comm) alloc(kCb, q.comm);
    pending_.push_back(q);
  }
  void complete(const SimPending& q) {
    const SimUnit& u = units_[q.unit];
    if (q.comm) release(kCb, q.comm);
    if (spec_->grad_collective == GradCollective::reduce_scatter_all_reduce && replica_ > 1) {
      const int64_t s = staging(u.S / replica_ + 1);
      alloc(kCb, s);
      release(kCb, s);
    }
    if (params_off()) {
      if (q.add) {  // down into host scratch, then added (widened to fp32 for 16-bit dtypes)
        host_alloc(kWs, u.S * r());
        if (in_.engine.reduce_dtype != DType::f32) {
          host_alloc(kWs, 2 * u.S * 4);
          host_release(kWs, 2 * u.S * 4);
        }
        host_release(kWs, u.S * r());
      }
    } else if (q.recv_tmp && in_.engine.reduce_dtype != DType::f32) {
      alloc(kWs, 2 * u.S * 4);
      release(kWs, 2 * u.S * 4);
    }
    if (q.staging) release(kCb, q.staging);
    if (q.recv_tmp) release(kCb, q.recv_tmp);
    if (q.dflat) release(kGu, q.dflat);
  }
  void drain(size_t keep) {
    while (pending_.size() > keep) {
      complete(pending_.front());
      pending_.pop_front();
    }
  }

  // ---- engine.cpp, with the model's layers' scratch (block.cpp, head.cpp, attention.cpp)
  void forward_backward(bool last) {
    const int L = cfg_.n_layer, B = in_.batch;
    const int T = in_.seq_len > 0 ? in_.seq_len : cfg_.max_seq_len;
    const int64_t btc = static_cast<int64_t>(B) * T * cfg_.n_embd;
    const int64_t bt = static_cast<int64_t>(B) * T;
    const int64_t block_acts = BlockActivations::bytes_for(cfg_, B, T);
    const int64_t head_acts = HeadActivations::bytes_for(cfg_, B, T);
    const int64_t att = static_cast<int64_t>(cfg_.n_head) * T * T * 4;

    phase_ = "forward";
    alloc(kAct, (L + 1) * btc * 4);
    for (const UnitUse& use : fwd_.uses) {
      phase_ = "forward " + use_name(use);
      for (int id : use.units) unshard_at(fwd_.order, fwd_.pos[id]);
      if (use.kind == UseKind::block || use.kind == UseKind::attn) alloc(kAct, block_acts);
      if (use.kind == UseKind::head) alloc(kAct, head_acts);
      if ((use.kind == UseKind::block || use.kind == UseKind::mlp) && in_.engine.act_ckpt)
        release(kAct, block_acts);
      for (int id : use.release) reshard(units_[id]);
    }

    phase_ = "backward head";
    alloc(kWs, btc * 4);  // dres
    for (const UnitUse& use : bwd_.uses) {
      phase_ = "backward " + use_name(use);
      for (int id : use.units) unshard_at(bwd_.order, bwd_.pos[id]);
      switch (use.kind) {
        case UseKind::head:
          grad_target(units_[use.units.front()]);
          // head_backward: dlogits (B*T, V) and dlnf (B*T, C)
          alloc(kWs, bt * cfg_.vocab_size * 4);
          alloc(kWs, btc * 4);
          release(kWs, btc * 4);
          release(kWs, bt * cfg_.vocab_size * 4);
          release(kAct, head_acts);
          break;
        case UseKind::recompute:
          alloc(kAct, block_acts);
          alloc(kWs, btc * 4);
          release(kWs, btc * 4);
          break;
        case UseKind::block:
        case UseKind::mlp:
        case UseKind::attn:
          if (use.kind != UseKind::attn) {
            grad_target(units_[wrap_.mlp[use.layer].unit]);
            // block_mlp_backward: wide (B*T, 4C), narrow (B*T, C)
            alloc(kWs, 4 * btc * 4);
            alloc(kWs, btc * 4);
            release(kWs, btc * 4);
            release(kWs, 4 * btc * 4);
          }
          if (use.kind != UseKind::mlp) {
            grad_target(units_[wrap_.attn[use.layer].unit]);
            // block_attn_backward: wide, narrow, attention's (NH, T, T)
            alloc(kWs, 4 * btc * 4);
            alloc(kWs, btc * 4);
            alloc(kWs, att);
            release(kWs, att);
            release(kWs, btc * 4);
            release(kWs, 4 * btc * 4);
            release(kAct, block_acts);
          }
          break;
        case UseKind::embed: grad_target(units_[use.units.front()]); break;
      }
      for (int id : use.release) {
        reshard(units_[id]);
        after_unit_backward(id, last);
      }
    }
    release(kWs, btc * 4);
    release(kAct, (L + 1) * btc * 4);
    drain(0);
  }

  // ---- optim_step.cpp
  void clip() {
    phase_ = "clip";
    drain(0);
    for (const SimUnit& u : units_)
      if (in_.engine.reduce_dtype != DType::f32) {
        state_alloc(kWs, u.S * 4);
        state_release(kWs, u.S * 4);
      }
  }
  void optimizer_step() {
    phase_ = "optimizer";
    drain(0);
    for (SimUnit& u : units_) {
      const bool wide = in_.engine.reduce_dtype != DType::f32;
      if (wide) state_alloc(kWs, u.S * 4);  // the fp32 gradient
      if (optim_off()) {
        // Host staging: the fp32 gradient shard, then the parameters (fp32 when they are the
        // master, else param_dtype to go up after the host's cast).
        host_alloc(kWs, u.S * 4);
        if (wide) release(kWs, u.S * 4);
        const int64_t params = u.S * (mixed() ? p() : 4);
        host_alloc(kWs, params);
        host_release(kWs, params);
        host_release(kWs, u.S * 4);
      } else if (wide) {
        state_release(kWs, u.S * 4);
      }
      u.fresh = true;
    }
  }

  MemoryPlan& plan_;
  const PlanInput& in_;
  const GPTConfig& cfg_;
  int G_ = 1, N_ = 1, replica_ = 1;
  const StrategySpec* spec_ = nullptr;
  GradAccum accum_ = GradAccum::direct;
  WrapPlan wrap_;  // the engine's units and schedule (wrap_policy.hpp)
  PassSchedule fwd_, bwd_;
  std::vector<SimUnit> units_;
  std::deque<SimPending> pending_;
  int inflight_ = 0;
  MemArray cur_{}, at_peak_{};
  int64_t total_ = 0, peak_ = 0;
  MemArray host_cur_{}, host_at_peak_{};
  int64_t host_total_ = 0, host_peak_ = 0;
  std::string phase_, where_;
};

}  // namespace

void plan_step_transient(MemoryPlan& plan) {
  SL_CHECK(plan.input.model.has_value(), "plan: the step schedule needs a model");
  SL_CHECK(plan.input.batch >= 1 && plan.input.accum >= 1, "plan: batch ", plan.input.batch,
           " and accum ", plan.input.accum, " must be >= 1");
  StepSim sim(plan);
  sim.run();
}

}  // namespace shardlab
