// The per-thread virtual clock pointer.
#include "core/base/virtual_clock.hpp"

#include <cmath>

#include "core/base/error.hpp"

namespace shardlab {

namespace {
thread_local VirtualClock* t_clock = nullptr;
}  // namespace

VirtualClock* thread_virtual_clock() { return t_clock; }

namespace {
constexpr double kMaxVirtualSeconds = static_cast<double>(kMaxVirtualNs) * 1e-9;
}  // namespace

int64_t virtual_ns(double seconds, const char* what) {
  if (!(seconds >= 0) || seconds >= kMaxVirtualSeconds)  // NaN fails the first test
    SL_THROW(InvalidArgument, what, ": ", seconds,
             " s of simulated time, beyond the virtual clock's 2^60 ns (36.5 years): a cluster "
             "figure (FLOP/s, bandwidth, efficiency) too small for this model, or a model too "
             "large for this cluster");
  return static_cast<int64_t>(std::llround(seconds * 1e9));
}

int64_t virtual_add(int64_t t, int64_t ns, const char* what) {
  if (t < 0 || ns < 0 || t >= kMaxVirtualNs || ns >= kMaxVirtualNs - t)
    SL_THROW(InvalidArgument, what, ": simulated time ", static_cast<double>(t) * 1e-9, " s + ",
             static_cast<double>(ns) * 1e-9,
             " s passes the virtual clock's 2^60 ns (36.5 years): a cluster figure too small for "
             "this model, or a model too large for this cluster");
  return t + ns;
}

ScopedVirtualClock::ScopedVirtualClock(VirtualClock& clock) : previous_(t_clock) {
  t_clock = &clock;
}

ScopedVirtualClock::~ScopedVirtualClock() { t_clock = previous_; }

}  // namespace shardlab
