// Which CPUs a thread may run on. The local backend binds each rank's thread to a core of its own
// when the ranks fit on the CPUs this process may use, as mpirun binds its processes to cores by
// default at two ranks or fewer: a rank then never shares a core with another rank, and a
// collective's two sides never wait on a rank the scheduler parked behind its peer.
#pragma once

#include <string>
#include <vector>

namespace shardlab {

// The CPUs this process may run on (its main thread's affinity mask, e.g. under taskset), in
// increasing order. Empty where the system does not say (not Linux).
std::vector<int> allowed_cpus();

// The CPUs the calling thread may run on now, in increasing order (empty: unknown).
std::vector<int> this_thread_cpus();

// Restricts the calling thread to `cpus`. An empty list leaves it as it is. Returns false when the
// system refuses (a CPU that is not allowed); the thread's mask is then unchanged.
bool bind_this_thread(const std::vector<int>& cpus);

// Where the local backend puts its threads (core/comm/launcher.cpp): rank r on rank_cpu[r], and
// the communicators' worker threads, which run async collectives beside the ranks' compute, on
// `worker_cpus`: the allowed CPUs no rank holds, or, when the ranks take them all, none (then
// each worker stays on its rank's core, where it shares time with that rank and no other).
struct CoreBinding {
  std::vector<int> rank_cpu;     // empty: the ranks are not bound
  std::vector<int> worker_cpus;  // empty: workers stay where their rank is
};

// The binding for `ranks` local ranks: one core each when `ranks` <= the allowed CPUs and `bind`
// is set, else none (ranks that share cores are left to the scheduler).
CoreBinding plan_core_binding(int ranks, bool bind);

// "0,1" or "0-3,6": a CPU list as taskset and lscpu print one.
std::string cpu_list_text(const std::vector<int>& cpus);

}  // namespace shardlab
