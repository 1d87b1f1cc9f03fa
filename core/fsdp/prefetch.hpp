// Prefetch: while unit order[i] computes, the all-gathers of the next units in compute order are
// already issued, so their parameters arrive before they are needed. How far ahead is
// EngineConfig::prefetch (the depth) and EngineConfig::max_inflight_gathers (the memory bound:
// each gather in flight holds a full unit). The engine (prefetch.cpp) and the planner
// (plan_schedule.cpp) both choose the units with prefetch_units.
#pragma once

#include <functional>
#include <vector>

namespace shardlab {

// The units after order[i], in order, whose all-gathers to issue now: at most `depth` positions
// ahead, skipping units for which `busy` (already gathered or gathering) holds, and stopping once
// `inflight` plus those chosen reaches max_inflight (0 = no limit).
std::vector<int> prefetch_units(const std::vector<int>& order, int i, int depth, int max_inflight,
                                int inflight, const std::function<bool(int unit)>& busy);

}  // namespace shardlab
