// Unit-state strips (see unit_strips.hpp).
#include "viewer/model/unit_strips.hpp"

#include <algorithm>

namespace shardlab::viewer {

bool UnitStrips::state_at(int unit, int64_t t, UnitState* s) const {
  if (unit < 0 || unit >= n_units()) return false;
  const auto& segs = by_unit[unit];
  auto it = std::upper_bound(segs.begin(), segs.end(), t,
                             [](int64_t v, const UnitSegment& g) { return v < g.t0; });
  if (it == segs.begin()) return false;
  *s = (it - 1)->state;
  return true;
}

UnitStrips build_unit_strips(const std::vector<UnitEvent>& events, int64_t t_last) {
  UnitStrips u;
  for (const UnitEvent& e : events) {
    if (e.unit < 0) continue;
    if (e.unit >= u.n_units()) u.by_unit.resize(e.unit + 1);
    auto& segs = u.by_unit[e.unit];
    int64_t t = segs.empty() ? e.t : std::max(e.t, segs.back().t0);
    if (!segs.empty()) segs.back().t1 = t;
    segs.push_back({t, std::max(t, t_last), e.state});
  }
  return u;
}

}  // namespace shardlab::viewer
