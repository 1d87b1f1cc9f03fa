// flight.json entries of ranks that did not fail themselves but were ended with the job: under
// mpirun, the survivors of a rank that died get SIGTERM (core/comm/mpi/mpi_termination.hpp), and
// each adds what it was doing to one flight.json. Independent of MPI, so tests run it anywhere.
#pragma once

#include <string>

#include "core/comm/flight_recorder.hpp"

namespace shardlab {

// "waiting in #14 all_gather unit 0 step 2 (...)" when collectives are in flight (the oldest, the
// one it waits on), else "busy outside collectives since #13 ..." (or "before its first
// collective").
std::string what_the_rank_was_doing(const FlightRecorder& flight);

// Adds the entry of `flight`'s rank, ended by `signal`, to the flight.json at `path`: created with
// a reason saying the job was torn down when absent (or unreadable); otherwise the rank is added
// unless the file already has it (a watchdog's record stays as it wrote it). Survivors run this
// at the same moment: a lock on the file's directory serialises them. Returns false when the file
// cannot be written.
bool add_terminated_rank_to_flight_file(const std::string& path, int signal,
                                        const FlightRecorder& flight);

}  // namespace shardlab
