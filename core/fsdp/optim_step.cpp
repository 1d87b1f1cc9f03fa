// After the gradients are reduced: global-norm clipping across shards, the divergence checks
// (loss, reduced gradient, updated parameters), AdamW on the rank's owned range (fp32 master and
// moments), the all-gather of updated parameters for the strategies that keep full parameters but
// shard the update, and the shard access checkpoints use.
#include <cmath>
#include <cstring>
#include <string>

#include "core/base/error.hpp"
#include "core/fsdp/engine_impl.hpp"
#include "core/kernels/elementwise.hpp"
#include "core/model/params.hpp"

namespace shardlab {

namespace {
// "unit 2 (block 1)": which parameters a unit id holds, for messages.
std::string unit_what(int id) {
  if (id == kRootUnit) return "unit 0 (embeddings and ln_f)";
  return "unit " + std::to_string(id) + " (block " + std::to_string(id - 1) + ")";
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

float Engine::Impl::clip_grad_norm(float max_norm) {
  ScopedSpan span(rec, "clip");
  drain(0);
  // Each rank squares its owned range; a shard group's ranks together hold every element once.
  // Replica groups (no_shard's N ranks, hybrid's N/G groups) hold identical reduced values, so
  // the sum runs over the shard group only: never counting a replica twice.
  double local = 0;
  for (FsdpUnit& u : units) {
    const int64_t n = u.own.size;
    if (cfg.reduce_dtype == DType::f32) {
      local += sum_squares(dev, static_cast<const float*>(owned_grads(u)), n);
    } else {
      Buffer tmp = dev.alloc(n * 4, MemCategory::workspace);
      cast_to_f32(dev, tmp.f32(), owned_grads(u), cfg.reduce_dtype, n);
      local += sum_squares(dev, tmp.f32(), n);
    }
  }
  double total = local;
  if (G > 1) {
    // Gather every rank's partial sum (bytes only, no arithmetic in the collective) and add the
    // group's in rank order, so every rank computes the same bits. On the world communicator:
    // not part of the step's gradient and parameter traffic.
    const int n = world.size();
    Buffer mine = dev.alloc(8, MemCategory::comm_buffers);
    Buffer all = dev.alloc(8 * n, MemCategory::comm_buffers);
    dev.copy_from_host(mine.data(), &local, 8);
    world.all_gather(mine.data(), all.data(), 2, DType::f32);
    std::vector<double> partial(n);
    dev.copy_to_host(partial.data(), all.data(), 8 * n);
    const int first = cfg.strategy == Strategy::hybrid_shard ? world.rank() / G * G : 0;
    total = 0;
    for (int r = first; r < first + G; ++r) total += partial[r];
  }
  // The sum of squares is finite exactly when every element is (elementwise.hpp, all_finite).
  grads_known_finite = std::isfinite(total);
  const float norm = static_cast<float>(std::sqrt(total));
  grad_coef = (max_norm > 0 && norm > max_norm) ? max_norm / (norm + 1e-6f) : 1.0f;
  return norm;
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
  {
    ScopedSpan span(rec, "optimizer");
    for (FsdpUnit& u : units) {
      const int64_t n = u.own.size;
      Buffer gtmp;
      float* g32 = static_cast<float*>(owned_grads(u));
      if (cfg.reduce_dtype != DType::f32) {
        gtmp = dev.alloc(n * 4, MemCategory::workspace);
        cast_to_f32(dev, gtmp.f32(), owned_grads(u), cfg.reduce_dtype, n);
        g32 = gtmp.f32();
      }
      if (!grads_known_finite && !all_finite(dev, g32, DType::f32, n))
        SL_THROW(Error, "step ", steps + 1, ": the reduced gradient of ", unit_what(u.id),
                 " holds NaN or Inf on rank ", world.rank(),
                 ": the run diverged (lower --lr, now ", cfg.optim.lr, ", or set --clip)");
      if (grad_coef != 1.0f) scale_array(dev, g32, grad_coef, n);
      float* p32 = mixed() ? u.master.f32() : static_cast<float*>(owned_params(u));
      u.opt->step(p32, g32, n);
      // Finite gradients can still overflow a parameter (a large enough learning rate).
      if (!all_finite(dev, p32, DType::f32, n))
        SL_THROW(Error, "step ", steps + 1, ": the optimizer update left NaN or Inf in the ",
                 "parameters of ", unit_what(u.id), " on rank ", world.rank(),
                 ": the run diverged (lower --lr, now ", cfg.optim.lr, ", or set --clip)");
      if (mixed()) cast_from_f32(dev, owned_params(u), cfg.param_dtype, p32, n);
    }
  }
  // shard_optim and shard_grad_op keep full parameters but each rank updated only its range.
  if (full_params() && shard_comm) {
    std::vector<Work> works;
    for (FsdpUnit& u : units)
      works.push_back(shard_comm->all_gather(owned_params(u), u.params.data(), u.own.size,
                                             cfg.param_dtype, true, {u.id, "params"}));
    for (Work& w : works) w.wait();
  }
  for (FsdpUnit& u : units) {
    dev.fill_zero(u.grads.data(), u.grads.bytes());
    u.grads_fresh = true;
  }
  grad_coef = 1.0f;
  grads_known_finite = false;
  ++steps;
}

// ---- parameters and shards, for tests and checkpoints ----------------------------------------

std::vector<float> Engine::gather_unit_params(int unit) {
  Impl& m = *impl_;
  layout(unit);  // range check
  FsdpUnit& u = m.units[unit];
  const int64_t P = u.layout.padded_numel(), n = u.own.size;
  Buffer full = m.dev.alloc(P * 4, MemCategory::workspace);
  Buffer mine = m.dev.alloc(n * 4, MemCategory::workspace);
  if (m.mixed())
    m.dev.copy(mine.data(), u.master.data(), n * 4);
  else
    m.dev.copy(mine.data(), m.owned_params(u), n * 4);
  if (m.shard_comm)
    m.shard_comm->all_gather(mine.data(), full.data(), n, DType::f32);
  else
    m.dev.copy(full.data(), mine.data(), n * 4);
  std::vector<float> host(u.layout.numel());
  m.dev.copy_to_host(host.data(), full.data(), u.layout.numel() * 4);
  return host;
}

std::vector<float> Engine::gather_unit_grads(int unit) {
  Impl& m = *impl_;
  layout(unit);
  m.drain(0);
  FsdpUnit& u = m.units[unit];
  const int64_t P = u.layout.padded_numel(), n = u.own.size;
  Buffer full = m.dev.alloc(P * 4, MemCategory::workspace);
  Buffer mine = m.dev.alloc(n * 4, MemCategory::workspace);
  cast_to_f32(m.dev, mine.f32(), m.owned_grads(u), m.cfg.reduce_dtype, n);
  if (m.shard_comm)
    m.shard_comm->all_gather(mine.data(), full.data(), n, DType::f32);
  else
    m.dev.copy(full.data(), mine.data(), n * 4);
  std::vector<float> host(u.layout.numel());
  m.dev.copy_to_host(host.data(), full.data(), u.layout.numel() * 4);
  return host;
}

namespace {
// The checkpoint layer's name for an optimizer state (core/checkpoint/ckpt_shard.hpp).
std::string ckpt_state_name(const std::string& optim_name) {
  if (optim_name == "m") return "exp_avg";
  if (optim_name == "v") return "exp_avg_sq";
  if (optim_name == "momentum") return "momentum_buffer";
  return optim_name;
}
}  // namespace

UnitShard Engine::get_shard(int unit) const {
  Impl& m = *impl_;
  layout(unit);  // range check
  FsdpUnit& u = m.units[unit];
  const int64_t n = u.own.size;
  UnitShard s;
  s.range = u.own;
  std::vector<float>& p = s.states["params"];
  p.resize(n);
  m.dev.copy_to_host(p.data(), m.mixed() ? u.master.data() : m.owned_params(u), n * 4);
  for (const OptimizerState& st : u.opt->state()) {
    std::vector<float>& v = s.states[ckpt_state_name(st.name)];
    v.resize(n);
    m.dev.copy_to_host(v.data(), st.data, n * 4);
  }
  return s;
}

void Engine::set_shard(int unit, const UnitShard& s) {
  Impl& m = *impl_;
  layout(unit);
  FsdpUnit& u = m.units[unit];
  const int64_t n = u.own.size;
  SL_CHECK(s.range.offset == u.own.offset && s.range.size == n, "engine: unit ", unit, " shard [",
           s.range.offset, ", ", s.range.end(), ") does not match this rank's range [",
           u.own.offset, ", ", u.own.end(), ")");
  auto get = [&](const std::string& name) -> const std::vector<float>& {
    auto it = s.states.find(name);
    SL_CHECK(it != s.states.end(), "engine: unit ", unit, " shard has no state '", name, "'");
    SL_CHECK(static_cast<int64_t>(it->second.size()) == n, "engine: unit ", unit, " state '",
             name, "' has ", it->second.size(), " elements, expected ", n);
    return it->second;
  };
  for (const OptimizerState& st : u.opt->state())
    m.dev.copy_from_host(st.data, get(ckpt_state_name(st.name)).data(), n * 4);
  const std::vector<float>& p = get("params");
  if (m.mixed()) {
    m.dev.copy_from_host(u.master.data(), p.data(), n * 4);
    cast_from_f32(m.dev, m.owned_params(u), m.cfg.param_dtype, u.master.f32(), n);
  } else {
    m.dev.copy_from_host(m.owned_params(u), p.data(), n * 4);
  }
  if (m.full_params() && m.shard_comm)
    m.shard_comm->all_gather(m.owned_params(u), u.params.data(), n, m.cfg.param_dtype);
}

}  // namespace shardlab
