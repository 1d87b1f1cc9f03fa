// Unit-state strips: for each FSDP unit of a rank, the time it spent sharded, gathering and
// unsharded, as segments between its state events.
#pragma once

#include <cstdint>
#include <vector>

#include "core/trace/run_reader.hpp"

namespace shardlab::viewer {

struct UnitSegment {
  int64_t t0 = 0, t1 = 0;
  UnitState state = UnitState::sharded;
};

struct UnitStrips {
  std::vector<std::vector<UnitSegment>> by_unit;  // index = unit id; sorted by t0
  int n_units() const { return static_cast<int>(by_unit.size()); }
  // The state of `unit` at time t; false before its first event.
  bool state_at(int unit, int64_t t, UnitState* s) const;
};

// A unit's state holds from its event until its next event, the last one until t_last.
// Events with a negative unit are ignored.
UnitStrips build_unit_strips(const std::vector<UnitEvent>& events, int64_t t_last);

}  // namespace shardlab::viewer
