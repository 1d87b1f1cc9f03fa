// launch(): starts the ranks of a run. Local: one thread per rank over a LocalWorld; if a rank
// throws, the world aborts (every collective, blocked or later, fails with CommError), the threads
// join and the first failure comes back as RankFailure. MPI: see core/comm/mpi/mpi_launch.cpp.
#include "core/comm/launcher.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/base/cpu_affinity.hpp"
#include "core/comm/local_comm.hpp"
#include "core/comm/mpi_backend.hpp"
#include "core/comm/nccl_backend.hpp"
#include "core/comm/rank_resources.hpp"
#include "core/comm/sim_comm.hpp"
#include "core/device/meta_device.hpp"
#include "core/trace/recorder.hpp"

namespace shardlab {

namespace {

// SHARDLAB_BIND_TO=none turns the binding off in every program (the benchmarks too), as
// SHARDLAB_CPU_POOL=0 turns off the host pool: for A/B runs. core (or unset) keeps the option's.
bool binding_allowed_by_env() {
  const char* e = std::getenv("SHARDLAB_BIND_TO");
  if (!e || !*e || std::strcmp(e, "core") == 0) return true;
  if (std::strcmp(e, "none") == 0) return false;
  SL_THROW(InvalidArgument, "SHARDLAB_BIND_TO='", e, "': expected core or none");
}

CoreBinding local_binding(const LaunchOptions& opts) {
  return plan_core_binding(opts.ranks,
                           opts.bind_to_cores && opts.ranks >= 2 && binding_allowed_by_env());
}

void run_local_rank(const LaunchOptions& opts, const std::function<void(RankContext&)>& fn,
                    const std::shared_ptr<LocalWorld>& world, int rank, const CoreBinding& cores) {
  set_thread_rank(rank);
  // Before the communicator exists: its worker thread starts from this thread's CPUs. A refusal
  // (the mask changed since the plan) leaves the rank unbound, which only costs speed.
  if (!cores.rank_cpu.empty()) bind_this_thread({cores.rank_cpu[static_cast<size_t>(rank)]});
  // Declared outside the try: the world is aborted before this rank's communicator and buffers
  // go away, so no other rank waits on them.
  RankResources res;
  std::unique_ptr<Communicator> comm;
  try {
    res = make_rank_resources(opts, rank);
    comm = make_local_communicator(world, rank, *res.device);
    run_rank_fn(res, *comm, rank, world->size(), fn);
  } catch (const CommError& e) {
    world->abort(rank, strip_rank_prefix(e.what(), rank), /*secondary=*/true);
  } catch (const std::exception& e) {
    world->abort(rank, strip_rank_prefix(e.what(), rank));
  } catch (...) {
    world->abort(rank, "unknown exception (not derived from std::exception)");
  }
  comm.reset();  // drains this rank's queued collectives (they fail at once after an abort)
  set_thread_rank(-1);
}

void launch_local(const LaunchOptions& opts, const std::function<void(RankContext&)>& fn) {
  if (opts.ranks < 1) SL_THROW(InvalidArgument, "launch: --ranks ", opts.ranks, " must be >= 1");
  auto world = std::make_shared<LocalWorld>(opts.ranks);
  world->set_collective_timeout(opts.collective_timeout_s);
  // Ranks are threads: one BLAS thread each, or they fight over the cores.
  if (opts.ranks > 1) set_blas_threads(1);
  const CoreBinding cores = local_binding(opts);
  world->set_worker_cpus(cores.worker_cpus);
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  std::vector<std::thread> threads;
  threads.reserve(opts.ranks);
  for (int r = 0; r < opts.ranks; ++r) {
    try {
      threads.emplace_back([&, r] {
        run_local_rank(opts, fn, world, r, cores);
        std::lock_guard<std::mutex> lk(mu);
        ++finished;
        cv.notify_all();
      });
    } catch (const std::exception& e) {
      // No thread for rank r (out of threads, or of address space for their stacks). The ranks
      // already running would wait for it in their first collective, and destroying joinable
      // threads calls std::terminate: fail the world as if rank r had thrown, and join them.
      world->abort(
          r, std::string("could not start a thread of this rank (") + e.what() + "): --ranks " +
                 std::to_string(opts.ranks) +
                 " is more threads than this process can start (two per rank); use fewer ranks");
      break;
    }
  }
  const int started = static_cast<int>(threads.size());
  if (opts.exit_after_failure_s > 0) {
    // Wait for the ranks, but not for ever once one has failed: a rank that never reaches a
    // collective again would keep the process alive.
    std::unique_lock<std::mutex> lk(mu);
    auto failed_since = std::chrono::steady_clock::time_point::max();
    while (!cv.wait_for(lk, std::chrono::milliseconds(100), [&] { return finished == started; })) {
      if (!world->aborted()) continue;
      const auto now = std::chrono::steady_clock::now();
      if (failed_since == std::chrono::steady_clock::time_point::max()) failed_since = now;
      if (std::chrono::duration<double>(now - failed_since).count() < opts.exit_after_failure_s)
        continue;
      std::fprintf(stderr,
                   "shardlab: error: rank %d: %s [%d of %d ranks still running %g s after this "
                   "failure, stuck outside any collective: exiting]\n",
                   world->failed_rank(), world->failure_message().c_str(), started - finished,
                   opts.ranks, opts.exit_after_failure_s);
      std::fflush(nullptr);
      std::_Exit(1);
    }
  }
  for (std::thread& t : threads) t.join();
  const int failed = world->failed_rank();
  if (failed >= 0)
    throw RankFailure(failed, "rank " + std::to_string(failed) + ": " + world->failure_message());
}

// One simulated rank on a thread of its own, so that its virtual clock and rank name stay there.
void launch_sim(const LaunchOptions& opts, const std::function<void(RankContext&)>& fn) {
  if (!opts.cluster) SL_THROW(InvalidArgument, "launch: backend sim needs a cluster spec");
  if (opts.device != "meta")
    SL_THROW(InvalidArgument, "launch: backend sim runs on device meta, not '", opts.device, "'");
  opts.cluster->check_ranks(opts.ranks);
  const int rank = opts.sim_rank;
  if (rank < 0 || rank >= opts.ranks)
    SL_THROW(InvalidArgument, "launch: simulated rank ", rank, " outside [0, ", opts.ranks, ")");
  std::string failure;
  std::thread t([&] {
    set_thread_rank(rank);
    VirtualClock clock;
    ScopedVirtualClock on_this_thread(clock);
    try {
      RankResources res;
      res.tracker = std::make_unique<MemoryTracker>(rank, opts.mem_limit);
      res.recorder = opts.make_recorder ? opts.make_recorder(rank) : nullptr;
      if (!res.recorder) res.recorder = Recorder::disabled(rank);
      if (res.recorder->enabled()) res.recorder->attach(*res.tracker);
      res.device = make_meta_device(*res.tracker, *opts.cluster, clock, opts.gemm_math, opts.ranks);
      std::unique_ptr<Communicator> comm =
          make_sim_communicator(opts.cluster, opts.ranks, rank, clock);
      run_rank_fn(res, *comm, rank, opts.ranks, fn);
    } catch (const std::exception& e) {
      failure = strip_rank_prefix(e.what(), rank);
    } catch (...) {
      failure = "unknown exception (not derived from std::exception)";
    }
    set_thread_rank(-1);
  });
  t.join();
  if (!failure.empty()) throw RankFailure(rank, "rank " + std::to_string(rank) + ": " + failure);
}

}  // namespace

std::vector<int> local_rank_cpus(const LaunchOptions& opts) {
  return opts.backend == "local" ? local_binding(opts).rank_cpu : std::vector<int>{};
}

bool under_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr;
}

void launch(const LaunchOptions& opts, const std::function<void(RankContext&)>& fn) {
  if (opts.backend == "local") {
    launch_local(opts, fn);
  } else if (opts.backend == "mpi") {
    launch_mpi(opts, fn);
  } else if (opts.backend == "nccl") {
    launch_nccl(opts, fn);
  } else if (opts.backend == "sim") {
    launch_sim(opts, fn);
  } else {
    SL_THROW(InvalidArgument, "launch: unknown backend '", opts.backend,
             "' (expected local, mpi, nccl or sim)");
  }
}

}  // namespace shardlab
