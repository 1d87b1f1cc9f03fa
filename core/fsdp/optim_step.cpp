// The optimizer step, after the gradients are reduced (and clipped, clip_grad_norm.cpp): the
// divergence checks (loss, reduced gradient, updated parameters), AdamW or SGD on the rank's owned
// range (fp32 master and moments), and the all-gather of updated parameters for the strategies
// that keep full parameters but shard the update.
#include <cmath>
#include <string>

#include "core/base/error.hpp"
#include "core/fsdp/engine_impl.hpp"
#include "core/kernels/elementwise.hpp"

namespace shardlab {

namespace {
// "unit 2 (block 1)": which parameters a unit holds, for messages; the root as the model says.
std::string unit_what(const Model& m, const WrapPlan& w, int id) {
  const std::string& n = w.units[static_cast<size_t>(id)].name;
  return "unit " + std::to_string(id) + " (" + (n == "root" ? m.root_label() : n) + ")";
}
}  // namespace

void* Engine::Impl::owned_params(FsdpUnit& u) {
  char* p = static_cast<char*>(u.params.data());
  return full_params() ? p + u.own.offset * psz() : p;
}

void* Engine::Impl::owned_grads(FsdpUnit& u) {
  char* g = static_cast<char*>(u.grads.data());
  return full_grads() ? g + u.own.offset * rsz() : g;
}

// ---- divergence checks -------------------------------------------------------------------------
// NaN or Inf anywhere ends the run at the step it appears: a NaN parameter makes every later loss
// NaN (or, through a clamp, a plausible finite number) and would be saved as a checkpoint.

void Engine::Impl::check_loss_finite(float loss) const {
  if (!std::isfinite(loss))
    SL_THROW(Error, "step ", steps + 1, ": loss is ",
             std::isnan(loss) ? "NaN" : (loss > 0 ? "+Inf" : "-Inf"),
             " on this rank's batch: the run diverged (lower --lr, now ", cfg.optim.lr,
             ", or set --clip)");
}

void Engine::Impl::optimizer_step() {
  drain(0);
  // The host writes host-tier shards below: copies up still queued from them must be done first
  // (a GPU's copy stream; nothing on the CPU device).
  if (host_dev) host_dev->synchronize();
  {
    ScopedSpan span(rec, "optimizer");
    // Under --offload optim the step runs on the host tier (od = host_dev) over host copies: the
    // gradient shard comes down as fp32, the parameters as fp32 (the master copy, already on the
    // host, when mixed), and the updated parameters go back in param_dtype. The arithmetic is the
    // same functions on the same values, so the result is bit-identical to no offload.
    // Under --offload params the shards are on the host already: the same step, no copies.
    Device& od = optim_dev();
    const bool off = cfg.offload == Offload::optim;
    for (FsdpUnit& u : units) {
      const int64_t n = u.own.size;
      Buffer gtmp, g_host, p_host;
      float* g32 = static_cast<float*>(owned_grads(u));
      if (cfg.reduce_dtype != DType::f32) {
        Device& gd = state_dev();
        gtmp = gd.alloc(n * 4, MemCategory::workspace);
        cast_to_f32(gd, gtmp.f32(), owned_grads(u), cfg.reduce_dtype, n);
        g32 = gtmp.f32();
      }
      if (off) {  // host staging: the unit's fp32 gradient shard
        g_host = od.alloc(n * 4, MemCategory::workspace);
        copy_d2h(g_host.data(), g32, n * 4, u.id);
        gtmp.reset();
        g32 = g_host.f32();
      }
      float* p32 = mixed() ? u.master.f32() : static_cast<float*>(owned_params(u));
      if (off && !mixed()) {  // host staging: the fp32 parameters, updated there
        p_host = od.alloc(n * 4, MemCategory::workspace);
        copy_d2h(p_host.data(), p32, n * 4, u.id);
        p32 = p_host.f32();
      }
      // Checks, clipping's scale and the update, in one pass where the optimizer's device can
      // (AdamW on the CPU). Finite gradients can still overflow a parameter (a large enough
      // learning rate), hence the second check.
      const Optimizer::Checked c = u.opt->step_checked(p32, g32, n, grad_coef, !grads_known_finite);
      if (c.grads_nonfinite)
        SL_THROW(Error, "step ", steps + 1, ": the reduced gradient of ",
                 unit_what(model, wrap, u.id), " holds NaN or Inf on rank ", world.rank(),
                 ": the run diverged (lower --lr, now ", cfg.optim.lr, ", or set --clip)");
      if (c.params_nonfinite)
        SL_THROW(Error, "step ", steps + 1, ": the optimizer update left NaN or Inf in the ",
                 "parameters of ", unit_what(model, wrap, u.id), " on rank ", world.rank(),
                 ": the run diverged (lower --lr, now ", cfg.optim.lr, ", or set --clip)");
      if (!off) {
        if (mixed()) cast_from_f32(state_dev(), owned_params(u), cfg.param_dtype, p32, n);
      } else if (!mixed()) {
        copy_h2d(owned_params(u), p32, n * 4, u.id);
      } else {  // cast on the host, then the param_dtype values up
        p_host = od.alloc(n * psz(), MemCategory::workspace);
        cast_from_f32(od, p_host.data(), cfg.param_dtype, p32, n);
        copy_h2d(owned_params(u), p_host.data(), n * psz(), u.id);
      }
    }
  }
  // shard_optim and shard_grad_op keep full parameters but each rank updated only its range.
  if (spec->gather_after_step && shard_comm) {
    std::vector<Work> works;
    for (FsdpUnit& u : units)
      works.push_back(shard_comm->all_gather(owned_params(u), u.params.data(), u.own.size,
                                             cfg.param_dtype, true, {u.id, "params"}));
    for (Work& w : works) w.wait();
  }
  // Only `direct` accumulation needs a zeroed gradient: backward adds into it. Under the others
  // the step's first write to a fresh gradient overwrites it whole (fold: the cast of the fp32
  // gradient; reduce_each, no_sync: the reduce-scatter's output, or its copy down to the host).
  const bool backward_adds = accum == GradAccum::direct;
  for (FsdpUnit& u : units) {
    if (backward_adds) state_dev().fill_zero(u.grads.data(), u.grads.bytes());
    u.grads_fresh = true;
  }
  grad_coef = 1.0f;
  grads_known_finite = false;
  ++steps;
}

}  // namespace shardlab
