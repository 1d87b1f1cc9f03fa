// launch() for backend mpi: under mpirun every process is one rank of MPI_COMM_WORLD. A rank that
// throws cannot release ranks blocked inside MPI, so it prints its failure and calls MPI_Abort,
// which ends the whole job with a non-zero exit status.
#include <cstdio>
#include <exception>

#include "core/comm/mpi/mpi_comm.hpp"
#include "core/comm/mpi/mpi_termination.hpp"
#include "core/comm/mpi_backend.hpp"
#include "core/comm/rank_resources.hpp"
#include "core/trace/recorder.hpp"

namespace shardlab {

bool mpi_built() { return true; }

void mpi_world(int* rank, int* size) {
  mpi_ensure_initialized();
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
}

void launch_mpi(const LaunchOptions& opts, const std::function<void(RankContext&)>& fn) {
  mpi_ensure_initialized();
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (opts.ranks > 1 && opts.ranks != size)
    SL_THROW(InvalidArgument, "backend mpi: --ranks ", opts.ranks, " but mpirun started ", size,
             " processes (the world size comes from mpirun -np)");
  if (opts.device != "cpu")
    SL_THROW(InvalidArgument, "backend mpi: device ", opts.device,
             " is not supported: MPI exchanges host memory (use backend nccl for GPUs)");
  const int previous_rank = thread_rank();
  set_thread_rank(rank);
  // Line the ranks' trace clocks up: every process starts its clock right after one barrier.
  MPI_Barrier(MPI_COMM_WORLD);
  trace_reset_clock();
  RankResources res;
  std::unique_ptr<Communicator> comm;
  try {
    res = make_rank_resources(opts, rank);
    comm = make_mpi_communicator(MPI_COMM_WORLD, *res.device, opts.collective_timeout_s);
    // mpirun ends the survivors of a failed rank with SIGTERM: each says what it was doing and
    // adds its flight record to the run directory's flight.json first (mpi_termination.hpp).
    MpiTerminationWatch termination(rank, comm->flight());
    run_rank_fn(res, *comm, rank, size, fn);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shardlab: rank %d failed: %s\nshardlab: rank %d: aborting the MPI job\n",
                 rank, strip_rank_prefix(e.what(), rank).c_str(), rank);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  } catch (...) {
    std::fprintf(stderr, "shardlab: rank %d failed: unknown exception\n", rank);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  comm.reset();
  set_thread_rank(previous_rank);
}

}  // namespace shardlab
