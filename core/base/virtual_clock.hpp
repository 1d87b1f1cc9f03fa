// Virtual time for a simulated rank (docs/simulate.md). A simulated rank runs the real engine on
// a device that does no arithmetic: its kernels and collectives advance clocks by what a cost
// model says they would take instead. The rank's thread installs its clock here; the trace clock
// (trace_now_ns) and the training loop's step timer then read virtual time on that thread, so a
// simulated run directory holds the predicted timeline, and every other thread is unaffected.
#pragma once

#include <cstdint>

namespace shardlab {

// Virtual times and durations lie in [0, kMaxVirtualNs): 2^60 ns is 36.5 years, and what a run
// directory's reader accepts. Time arithmetic never wraps: converting or adding past the bound
// throws InvalidArgument naming what was charged (a cluster figure so small, or a model so large,
// that no run would ever finish). Where a throw cannot happen (a destructor), the sum saturates
// at kMaxVirtualNs, which the clock then refuses to join.
inline constexpr int64_t kMaxVirtualNs = int64_t(1) << 60;

// `seconds` of virtual time in ns, rounded; throws InvalidArgument "WHAT: ..." when it is not
// finite, negative, or not below kMaxVirtualNs.
int64_t virtual_ns(double seconds, const char* what);
// t + ns; throws InvalidArgument "WHAT: ..." unless both and the sum are in [0, kMaxVirtualNs).
int64_t virtual_add(int64_t t, int64_t ns, const char* what);
// t + ns, or kMaxVirtualNs when the sum reaches it (both in [0, kMaxVirtualNs]).
inline int64_t virtual_add_saturated(int64_t t, int64_t ns) {
  return ns >= kMaxVirtualNs - t ? kMaxVirtualNs : t + ns;
}

// The clock of the compute stream: the time at which the next piece of device work may start.
// Work is issued in order and the host waits for it (as on the CPU device), so this is also the
// host's time. Communication streams keep their own clocks (core/comm/sim_comm.hpp) and join this
// one when waited on.
struct VirtualClock {
  int64_t now_ns = 0;
  int64_t waited_ns = 0;  // time the stream stood idle in join: exposed communication

  // Runs `ns` of work on the stream; returns its end (throws past kMaxVirtualNs).
  int64_t advance(int64_t ns) {
    now_ns = virtual_add(now_ns, ns > 0 ? ns : 0, "virtual clock");
    return now_ns;
  }
  // The stream waits for an event at `t_ns` (a collective's end; throws at kMaxVirtualNs).
  void join(int64_t t_ns) {
    if (t_ns > now_ns) {
      waited_ns = virtual_add(waited_ns, t_ns - now_ns, "virtual clock");
      now_ns = virtual_add(now_ns, t_ns - now_ns, "virtual clock");
    }
  }
};

// The calling thread's virtual clock, or null on a thread that runs in real time.
VirtualClock* thread_virtual_clock();

// Installs `clock` on the calling thread for the lifetime of this object (nesting restores the
// previous one).
class ScopedVirtualClock {
 public:
  explicit ScopedVirtualClock(VirtualClock& clock);
  ~ScopedVirtualClock();
  ScopedVirtualClock(const ScopedVirtualClock&) = delete;
  ScopedVirtualClock& operator=(const ScopedVirtualClock&) = delete;

 private:
  VirtualClock* previous_;
};

}  // namespace shardlab
