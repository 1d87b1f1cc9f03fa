// Prefetch: which units' all-gathers run ahead of the one computing, and the engine issuing them.
#include "core/fsdp/prefetch.hpp"

#include "core/fsdp/engine_impl.hpp"

namespace shardlab {

std::vector<int> prefetch_units(const std::vector<int>& order, int i, int depth, int max_inflight,
                                int inflight, const std::function<bool(int unit)>& busy) {
  std::vector<int> out;
  for (int j = i + 1; j <= i + depth && j < static_cast<int>(order.size()); ++j) {
    if (busy(order[j])) continue;
    if (max_inflight > 0 && inflight >= max_inflight) break;
    out.push_back(order[j]);
    ++inflight;
  }
  return out;
}

void Engine::Impl::prefetch(const std::vector<int>& order, int i) {
  // The gathers queue behind order[i]'s own on the shard communicator and run while it computes.
  auto busy = [&](int id) { return units[id].unsharded || units[id].gather_inflight; };
  for (int id :
       prefetch_units(order, i, cfg.prefetch, cfg.max_inflight_gathers, inflight_gathers, busy))
    issue_gather(units[id]);
}

}  // namespace shardlab
