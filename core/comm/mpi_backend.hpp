// Entry points of the MPI backend that the rest of the build may call whether or not MPI is
// compiled in (core/comm/mpi/*.cpp with SHARDLAB_MPI, core/comm/no_mpi.cpp without).
#pragma once

#include <functional>

#include "core/comm/launcher.hpp"

namespace shardlab {

// Whether this build has the MPI backend.
bool mpi_built();

// Runs fn as this process's rank of MPI_COMM_WORLD (initialising MPI on first use, finalising at
// exit). A rank that throws prints "shardlab: rank R failed: ..." and calls MPI_Abort.
void launch_mpi(const LaunchOptions& opts, const std::function<void(RankContext&)>& fn);

// This process's rank and the size of MPI_COMM_WORLD, initialising MPI on first use (as above).
void mpi_world(int* rank, int* size);

}  // namespace shardlab
