// NCCL backend: a Communicator over one GPU per rank. Collectives are queued on the rank's
// communication stream and never block the host:
//   issue:  the comm stream waits on an event recorded on the compute stream (inputs ready), then
//           NCCL runs there; the buffers are marked as used by the comm stream in the pool, so
//           freeing them early cannot hand their memory to other work before NCCL is done.
//   wait:   Work::wait() makes the compute stream wait on the collective's end event; a blocking
//           call does that before returning. Host code sees results through copy_to_host.
// Data must be device memory of the rank's CudaDevice (host pointers throw InvalidArgument).
// Destroying a communicator waits for its stream and calls ncclCommDestroy, which is collective:
// every rank destroys its communicator (at the end of its rank function, on its own thread).
//
// Start-up, one of:
//   threads: id = nccl_unique_id() once, then make_nccl_communicator(dev, id, r, N) on each rank's
//            thread (each blocks until all N joined); or make_nccl_communicators(devices) from one.
//   mpirun:  make_nccl_communicator_mpi(dev) in every process (rank 0's id goes out by MPI_Bcast).
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "core/comm/communicator.hpp"
#include "core/device/device.hpp"

namespace shardlab {

// ncclUniqueId as plain bytes, so callers need no NCCL header to pass it around.
struct NcclId {
  std::array<char, 128> bytes{};
};

// A fresh id for one communicator (ncclGetUniqueId). Make it once and give it to every rank.
NcclId nccl_unique_id();

// Rank `rank` of a `world`-rank NCCL communicator on `dev` (a CudaDevice). Blocks until every rank
// has joined with the same id. Throws Error when dev is not a CUDA device or NCCL cannot start.
std::unique_ptr<Communicator> make_nccl_communicator(Device& dev, const NcclId& id, int rank,
                                                     int world);

// All ranks at once from one thread: devices[i] (distinct GPUs) becomes rank i. Each one must then
// be used, and destroyed, on its own thread: like ncclCommDestroy, the destructor is a collective
// among the ranks of a node and would wait forever for the others if they were destroyed in turn.
std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(
    const std::vector<Device*>& devices);

// Under mpirun, one process per GPU: rank and size from MPI_COMM_WORLD (MPI must be initialised).
// Throws Error in builds without MPI.
std::unique_ptr<Communicator> make_nccl_communicator_mpi(Device& dev);

// The GPU a process should use under mpirun: its rank among the processes on its node, modulo the
// number of visible GPUs. Throws Error in builds without MPI or with no GPU.
int mpi_local_gpu_ordinal();

// NCCL's version as "2.28.9".
std::string nccl_version();

}  // namespace shardlab
