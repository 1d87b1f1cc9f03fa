// Activation checkpointing (EngineConfig::act_ckpt), one layer of the model at a time: after the
// layer's forward, what its stages saved is dropped (its input stays in what the pass keeps
// between stages); before its backward, its stages' forward runs again from that input. One extra
// forward per layer buys all layers' saved activations but one (docs/memory.md).
#include "core/fsdp/engine_impl.hpp"

namespace shardlab {

void Engine::Impl::release_saved(Pass& pass, const StageUse& use) {
  const std::vector<int>& stages =
      use.layer >= 0 ? model.layers()[static_cast<size_t>(use.layer)].stages : use.stages;
  for (int s : stages) model.stage(s).release(pass);
}

void Engine::Impl::recompute(Pass& pass, const StageUse& use) {
  StragglerSpan span(rec, "recompute", use.units.front(), cfg.compute_slowdown);
  for (int s : use.stages) model.stage(s).recompute(pass, stage_args(s, false));
}

}  // namespace shardlab
