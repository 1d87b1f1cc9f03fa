// Prefetch: while unit order[i] computes, the all-gathers of the next units in compute order are
// already issued, so their parameters arrive before they are needed. How far in advance is
// EngineConfig::prefetch (the depth) and EngineConfig::max_inflight_gathers (the memory bound:
// each gather in flight holds a full unit).
#include <functional>
#include <vector>

#include "core/fsdp/engine_impl.hpp"

namespace shardlab {

namespace {

// The units after order[i], in order, whose all-gathers to issue now: at most `depth` positions
// on, skipping units for which `busy` (already gathered or gathering) holds, and stopping once
// `inflight` plus those chosen reaches max_inflight (0 = no limit).
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

}  // namespace

void Engine::Impl::prefetch(const std::vector<int>& order, int i) {
  // The gathers queue behind order[i]'s own on the shard communicator and run while it computes.
  auto busy = [&](int id) { return units[id].unsharded || units[id].gather_inflight; };
  for (int id :
       prefetch_units(order, i, cfg.prefetch, cfg.max_inflight_gathers, inflight_gathers, busy))
    issue_gather(units[id]);
}

}  // namespace shardlab
