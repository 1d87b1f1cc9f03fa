// launch() for backend nccl: one rank per GPU, as threads of this process or, under mpirun, as
// processes. NCCL cannot release peers blocked in a collective when one rank fails, so a failing
// rank reports itself and ends the process (or, under mpirun, the job) with a non-zero status.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <thread>
#include <vector>

#include "core/comm/cuda/nccl_comm.hpp"
#include "core/comm/mpi_backend.hpp"
#include "core/comm/nccl_backend.hpp"
#include "core/comm/rank_resources.hpp"
#include "core/device/cuda/cuda_device.hpp"
#include "core/trace/recorder.hpp"

namespace shardlab {

namespace {

[[noreturn]] void fail_rank(int rank, const char* what) {
  std::fprintf(stderr,
               "shardlab: rank %d failed: %s\nshardlab: ending the run (NCCL cannot "
               "release ranks blocked in a collective)\n",
               rank, strip_rank_prefix(what, rank).c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

// Runs fn on one rank whose communicator `make_comm` builds once the rank's device (GPU `gpu`)
// exists.
void run_rank(const LaunchOptions& opts, int rank, int world, int gpu,
              const std::function<std::unique_ptr<Communicator>(Device&)>& make_comm,
              const std::function<void(RankContext&)>& fn) {
  set_thread_rank(rank);
  try {
    RankResources res = make_rank_resources(opts, rank, gpu);
    std::unique_ptr<Communicator> comm = make_comm(*res.device);
    run_rank_fn(res, *comm, rank, world, fn);
    res.device->synchronize();
    comm.reset();  // collective among the ranks: every rank destroys its own, on its own thread
  } catch (const std::exception& e) {
    fail_rank(rank, e.what());
  } catch (...) {
    fail_rank(rank, "unknown exception");
  }
  set_thread_rank(-1);
}

}  // namespace

void launch_nccl(const LaunchOptions& base, const std::function<void(RankContext&)>& fn) {
  LaunchOptions opts = base;
  if (opts.device != "cuda" && opts.device != "cpu")
    SL_THROW(InvalidArgument, "backend nccl: unknown device '", opts.device, "'");
  opts.device = "cuda";  // NCCL moves GPU memory: every rank is a CUDA device
  const int gpus = cuda_device_count();
  if (gpus == 0)
    SL_THROW(Error, "backend nccl: no CUDA device: ", cuda_unavailable_reason(),
             " (use --backend local or mpi on the CPU)");

  if (under_mpirun()) {
    // One process per GPU, chosen by the process's rank among those on its node.
    int rank = 0, world = 1;
    mpi_world(&rank, &world);
    const int gpu = mpi_local_gpu_ordinal();
    run_rank(
        opts, rank, world, gpu, [](Device& dev) { return make_nccl_communicator_mpi(dev); }, fn);
    return;
  }

  if (opts.ranks < 1 || opts.ranks > gpus)
    SL_THROW(InvalidArgument, "backend nccl: --ranks ", opts.ranks, " but ", gpus,
             " GPU(s) are visible (one rank per GPU; run more with mpirun across machines)");
  const NcclId id = nccl_unique_id();
  const int world = opts.ranks;
  std::vector<std::thread> threads;
  threads.reserve(world);
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      run_rank(
          opts, r, world, r, [&](Device& dev) { return make_nccl_communicator(dev, id, r, world); },
          fn);
    });
  for (std::thread& t : threads) t.join();
}

}  // namespace shardlab
