// Unshard and reshard: the all-gather of a unit's parameter shards into its full flat buffer
// (params_unsharded), the fp32 compute copy under mixed precision, and freeing both again after
// the unit's forward and after its backward. The gathers issued ahead are in prefetch.cpp.
#include "core/base/error.hpp"
#include "core/fsdp/engine_impl.hpp"
#include "core/kernels/elementwise.hpp"

namespace shardlab {

void Engine::Impl::issue_gather(FsdpUnit& u) {
  const int64_t P = u.layout.padded_numel();
  const int64_t S = u.own.size;
  u.gathered = dev.alloc(P * psz(), MemCategory::params_unsharded);
  if (rec) rec->unit(u.id, UnitState::gathering);
  // In place, as PyTorch's FSDP gathers (all_gather_into_tensor with the input a view of the
  // output): the rank copies its own shard to its slot [r*S, (r+1)*S) of the padded flat buffer
  // (up from the host under --offload params, with no staging buffer), and the collective then
  // fills only the other ranks' slots, (N-1)/N of the buffer. The rank's own copy is done here,
  // before the rendezvous, instead of inside the collective while every rank waits for it.
  void* own = static_cast<char*>(u.gathered.data()) + shard_comm->rank() * S * psz();
  if (all_state_on_host())
    copy_h2d(own, u.params.data(), S * psz(), u.id, ReadBy::collective);
  else
    dev.copy(own, u.params.data(), S * psz());
  u.gather_work = shard_comm->all_gather(own, u.gathered.data(), S, cfg.param_dtype,
                                         /*async=*/true, {u.id, "params"});
  u.gather_inflight = true;
  ++inflight_gathers;
}

void Engine::Impl::unshard_at(const std::vector<int>& order, int i) {
  FsdpUnit& u = units[order[i]];
  if (u.unsharded) return;
  if (gathers()) {
    if (!u.gather_inflight) issue_gather(u);
    prefetch(order, i);
    u.gather_work.wait();
    u.gather_inflight = false;
    --inflight_gathers;
  }
  if (mixed()) {
    // CPU kernels compute in fp32: widen the gathered (or full) param_dtype buffer once per use.
    const int64_t P = u.layout.padded_numel();
    u.compute = dev.alloc(P * 4, MemCategory::workspace);
    cast_to_f32(dev, u.compute.f32(), gathers() ? u.gathered.data() : u.params.data(),
                cfg.param_dtype, P);
  }
  u.unsharded = true;
  if (rec && (gathers() || mixed())) rec->unit(u.id, UnitState::unsharded);
}

void Engine::Impl::reshard(FsdpUnit& u) {
  if (!u.unsharded) return;
  u.compute.reset();
  u.gathered.reset();
  u.unsharded = false;
  if (rec && (gathers() || mixed())) rec->unit(u.id, UnitState::resharded);
}

const float* Engine::Impl::compute_params(const FsdpUnit& u) const {
  SL_CHECK(u.unsharded, "engine: unit ", u.id, " used while sharded");
  if (mixed()) return u.compute.f32();
  if (gathers()) return u.gathered.f32();
  return u.params.f32();
}

}  // namespace shardlab
