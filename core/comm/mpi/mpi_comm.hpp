// The MPI backend (built with SHARDLAB_MPI): each process is one rank; collectives are MPI's own
// (MPI_Allgather, MPI_Allreduce, MPI_Bcast, and the MPI_I* forms for async), reduce_scatter a ring
// of MPI_Isend/MPI_Irecv (faster than Open MPI's own; mpi_comm.cpp). bf16 and f16 travel as
// 2-byte contiguous types summed through f32.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "core/comm/communicator.hpp"
#include "core/comm/flight_recorder.hpp"
#include "core/device/device.hpp"

namespace shardlab {

// Initialises MPI once (MPI_Init_thread asking for MPI_THREAD_SERIALIZED; MPI_Finalize runs at
// exit) unless the program already did; throws when the thread level is too low to use.
void mpi_ensure_initialized();

// A communicator over a duplicate of `comm`; staging is charged to `device`'s tracker. Collective
// over MPI_COMM_WORLD (the watchdog duplicates it). Waits longer than `timeout_s` in one
// collective stop the job (core/comm/mpi/mpi_watchdog.hpp).
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, Device& device,
                                                    double timeout_s = kDefaultCollectiveTimeoutS);

}  // namespace shardlab
