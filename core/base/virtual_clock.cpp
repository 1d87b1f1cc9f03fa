// The per-thread virtual clock pointer.
#include "core/base/virtual_clock.hpp"

namespace shardlab {

namespace {
thread_local VirtualClock* t_clock = nullptr;
}  // namespace

VirtualClock* thread_virtual_clock() { return t_clock; }

ScopedVirtualClock::ScopedVirtualClock(VirtualClock& clock) : previous_(t_clock) {
  t_clock = &clock;
}

ScopedVirtualClock::~ScopedVirtualClock() { t_clock = previous_; }

}  // namespace shardlab
