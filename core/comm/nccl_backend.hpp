// Entry point of the NCCL backend that the launcher calls whether or not CUDA is compiled in
// (core/comm/cuda/nccl_launch.cpp with SHARDLAB_CUDA, core/comm/no_cuda.cpp without).
#pragma once

#include <functional>

#include "core/comm/launcher.hpp"

namespace shardlab {

// One rank per GPU: opts.ranks threads in this process (one GPU each), or, under mpirun, this
// process as one rank on the GPU of its node-local rank. Ranks blocked inside NCCL cannot be
// released by a failing peer, so a rank that throws prints "shardlab: rank R failed: ..." and ends
// the process with exit status 1 (under mpirun: MPI_Abort), as the MPI backend does.
void launch_nccl(const LaunchOptions& opts, const std::function<void(RankContext&)>& fn);

}  // namespace shardlab
