// NCCL under mpirun: one process per GPU. Rank 0 makes the NCCL id and MPI_Bcast hands it to every
// process; each picks its GPU by its rank among the processes on its node.
#include <string>

#include "core/base/error.hpp"
#include "core/comm/cuda/nccl_comm.hpp"

#if SHARDLAB_WITH_MPI
#include <mpi.h>
#endif

namespace shardlab {

#if SHARDLAB_WITH_MPI

namespace {

void require_mpi(const char* what) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    SL_THROW(Error, what, " needs MPI to be initialised (run under mpirun with --backend nccl)");
}

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator_mpi(Device& dev) {
  require_mpi("make_nccl_communicator_mpi");
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  NcclId id;
  if (rank == 0) id = nccl_unique_id();
  MPI_Bcast(id.bytes.data(), static_cast<int>(id.bytes.size()), MPI_BYTE, 0, MPI_COMM_WORLD);
  return make_nccl_communicator(dev, id, rank, world);
}

int mpi_local_gpu_ordinal() {
  require_mpi("mpi_local_gpu_ordinal");
  const int gpus = cuda_device_count();
  if (gpus == 0) SL_THROW(Error, "no CUDA device on this node for the nccl backend");
  int world_rank = 0, local_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_free(&node);
  return local_rank % gpus;
}

#else

std::unique_ptr<Communicator> make_nccl_communicator_mpi(Device&) {
  SL_THROW(Error,
           "this build has no MPI: configure with -DSHARDLAB_MPI=ON to start NCCL under "
           "mpirun, or use one process with one thread per GPU");
}

int mpi_local_gpu_ordinal() {
  SL_THROW(Error, "this build has no MPI: mpi_local_gpu_ordinal needs -DSHARDLAB_MPI=ON");
}

#endif

}  // namespace shardlab
