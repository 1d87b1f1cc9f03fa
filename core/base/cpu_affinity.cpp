// Thread affinity through sched_getaffinity / pthread_setaffinity_np (cpu_affinity.hpp).
#include "core/base/cpu_affinity.hpp"

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#endif

namespace shardlab {

namespace {

// The CPUs of task `tid` (0: the calling thread; the process's id: its main thread), in
// increasing order; empty when the system does not say.
std::vector<int> cpus_of_task([[maybe_unused]] int tid) {
  std::vector<int> out;
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(tid, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
#endif
  return out;
}

}  // namespace

// The process's mask is its main thread's: the same answer on a rank thread that is bound.
std::vector<int> allowed_cpus() {
#if defined(__linux__)
  return cpus_of_task(static_cast<int>(getpid()));
#else
  return {};
#endif
}

std::vector<int> this_thread_cpus() { return cpus_of_task(0); }

bool bind_this_thread(const std::vector<int>& cpus) {
  if (cpus.empty()) return true;
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    if (c < 0 || c >= CPU_SETSIZE) return false;
    CPU_SET(c, &set);
  }
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
#else
  return false;
#endif
}

CoreBinding plan_core_binding(int ranks, bool bind) {
  CoreBinding b;
  const std::vector<int> cpus = allowed_cpus();
  if (!bind || ranks < 1 || ranks > static_cast<int>(cpus.size())) return b;
  b.rank_cpu.assign(cpus.begin(), cpus.begin() + ranks);
  b.worker_cpus.assign(cpus.begin() + ranks, cpus.end());
  return b;
}

std::string cpu_list_text(const std::vector<int>& cpus) {
  std::string s;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!s.empty()) s += ",";
    s += std::to_string(cpus[i]);
    if (j > i) s += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return s;
}

}  // namespace shardlab
