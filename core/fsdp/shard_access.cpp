// A unit's parameters, gradients and shards read and written from outside the step: full
// parameters and gradients for tests, this rank's shard (get_shard / set_shard) for checkpoints.
// States are named by the engine and its optimizer (UnitShard); the checkpoint layer's names are
// the trainer's business (core/train/train_checkpoint.cpp).
#include "core/base/error.hpp"
#include "core/fsdp/engine_impl.hpp"
#include "core/kernels/elementwise.hpp"

namespace shardlab {

std::vector<float> Engine::Impl::gather_owned(FsdpUnit& u, const Buffer& mine) {
  const int64_t P = u.layout.padded_numel(), n = u.own.size;
  Buffer full = dev.alloc(P * 4, MemCategory::workspace);
  if (shard_comm)
    shard_comm->all_gather(mine.data(), full.data(), n, DType::f32);
  else
    dev.copy(full.data(), mine.data(), n * 4);
  std::vector<float> host(u.layout.numel());
  dev.copy_to_host(host.data(), full.data(), u.layout.numel() * 4);
  return host;
}

std::vector<float> Engine::gather_unit_params(int unit) {
  Impl& m = *impl_;
  layout(unit);  // range check
  FsdpUnit& u = m.units[unit];
  const int64_t n = u.own.size;
  Buffer mine = m.dev.alloc(n * 4, MemCategory::workspace);
  // The fp32 values: the master copy when mixed, else the parameters; either may be on the host.
  const Buffer& src = m.mixed() ? u.master : u.params;
  const void* from = m.mixed() ? u.master.data() : m.owned_params(u);
  if (src.device() != &m.dev)
    m.dev.copy_from_host(mine.data(), from, n * 4);
  else
    m.dev.copy(mine.data(), from, n * 4);
  return m.gather_owned(u, mine);
}

std::vector<float> Engine::gather_unit_grads(int unit) {
  Impl& m = *impl_;
  layout(unit);
  m.drain(0);
  FsdpUnit& u = m.units[unit];
  const int64_t n = u.own.size;
  Buffer mine = m.dev.alloc(n * 4, MemCategory::workspace);
  if (m.all_state_on_host()) {  // the gradient shard is on the host: widen it there, then up
    Buffer h = m.host_dev->alloc(n * 4, MemCategory::workspace);
    cast_to_f32(*m.host_dev, h.f32(), m.owned_grads(u), m.cfg.reduce_dtype, n);
    m.dev.copy_from_host(mine.data(), h.data(), n * 4);
  } else {
    cast_to_f32(m.dev, mine.f32(), m.owned_grads(u), m.cfg.reduce_dtype, n);
  }
  return m.gather_owned(u, mine);
}

UnitShard Engine::get_shard(int unit) const {
  Impl& m = *impl_;
  layout(unit);  // range check
  FsdpUnit& u = m.units[unit];
  const int64_t n = u.own.size;
  UnitShard s;
  s.range = u.own;
  std::vector<float>& p = s.states[UnitShard::kParams];
  p.resize(n);
  // The master copy and the optimizer state live where the optimizer runs (optim_dev).
  Device& od = m.optim_dev();
  if (m.mixed())
    od.copy_to_host(p.data(), u.master.data(), n * 4);
  else
    m.state_dev().copy_to_host(p.data(), m.owned_params(u), n * 4);
  for (const OptimizerState& st : u.opt->state()) {
    std::vector<float>& v = s.states[st.name];
    v.resize(n);
    od.copy_to_host(v.data(), st.data, n * 4);
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
    SL_CHECK(static_cast<int64_t>(it->second.size()) == n, "engine: unit ", unit, " state '", name,
             "' has ", it->second.size(), " elements, expected ", n);
    return it->second;
  };
  Device& od = m.optim_dev();
  for (const OptimizerState& st : u.opt->state())
    od.copy_from_host(st.data, get(st.name).data(), n * 4);
  const std::vector<float>& p = get(UnitShard::kParams);
  if (m.mixed() && m.all_state_on_host()) {  // master and parameters both on the host tier
    od.copy_from_host(u.master.data(), p.data(), n * 4);
    cast_from_f32(od, m.owned_params(u), m.cfg.param_dtype, u.master.f32(), n);
  } else if (m.mixed() && m.host_dev) {  // master on the host tier; the device casts its copy
    od.copy_from_host(u.master.data(), p.data(), n * 4);
    Buffer tmp = m.dev.alloc(n * 4, MemCategory::workspace);
    m.dev.copy_from_host(tmp.data(), p.data(), n * 4);
    cast_from_f32(m.dev, m.owned_params(u), m.cfg.param_dtype, tmp.f32(), n);
  } else if (m.mixed()) {
    m.dev.copy_from_host(u.master.data(), p.data(), n * 4);
    cast_from_f32(m.dev, m.owned_params(u), m.cfg.param_dtype, u.master.f32(), n);
  } else {
    m.state_dev().copy_from_host(m.owned_params(u), p.data(), n * 4);
  }
  // The strategies that update a range of full parameters bring the others' ranges, as after a
  // step.
  if (m.spec->gather_after_step && m.shard_comm)
    m.shard_comm->all_gather(m.owned_params(u), u.params.data(), n, m.cfg.param_dtype);
}

}  // namespace shardlab
