// Built when SHARDLAB_MPI is OFF: the MPI backend says clearly that this build lacks it.
#include "core/comm/mpi_backend.hpp"

namespace shardlab {

bool mpi_built() { return false; }

void launch_mpi(const LaunchOptions&, const std::function<void(RankContext&)>&) {
  SL_THROW(InvalidArgument,
           "backend mpi: this build has no MPI backend: configure with "
           "-DSHARDLAB_MPI=ON (needs OpenMPI: libopenmpi-dev openmpi-bin)");
}

void mpi_world(int*, int*) {
  SL_THROW(InvalidArgument, "this build has no MPI backend: configure with -DSHARDLAB_MPI=ON");
}

}  // namespace shardlab
