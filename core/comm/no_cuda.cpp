// Built when SHARDLAB_CUDA is OFF: the NCCL backend says clearly that this build lacks it.
#include "core/comm/nccl_backend.hpp"

namespace shardlab {

void launch_nccl(const LaunchOptions&, const std::function<void(RankContext&)>&) {
  SL_THROW(InvalidArgument,
           "backend nccl: this build has no CUDA: configure with the `cuda` "
           "preset (-DSHARDLAB_CUDA=ON) on a machine with the CUDA toolkit, or "
           "use --backend local (threads) or --backend mpi (under mpirun)");
}

}  // namespace shardlab
