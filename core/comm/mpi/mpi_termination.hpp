// What a rank leaves behind when mpirun tears the job down. When one process of an MPI job dies
// (killed, crashed, out of memory), mpirun ends the others: SIGTERM first, SIGKILL a moment later.
// The collective watchdog cannot help then (nobody times out), so each surviving rank catches
// SIGTERM and, before SIGKILL comes, says on stderr what it was doing (waiting in which
// collective, or busy outside them since which) and adds its flight record to the run
// directory's flight.json, as the watchdog would have: the ranks still alive at the end are the
// ones the record names, the missing one is the rank that failed.
//
// The handler itself only writes a byte to a pipe (async-signal-safe); a thread waiting on the
// pipe does the work, then ends the process with status 128 + the signal.
#pragma once

#include <memory>
#include <thread>

#include "core/comm/flight_recorder.hpp"

namespace shardlab {

class MpiTerminationWatch {
 public:
  // Installs handlers for SIGTERM and SIGINT and starts the waiting thread. `flight` is the
  // rank's recorder; its dump path (set later by the trainer) says where flight.json goes.
  MpiTerminationWatch(int rank, FlightRecorder& flight);
  // Restores the previous handlers and stops the thread.
  ~MpiTerminationWatch();
  MpiTerminationWatch(const MpiTerminationWatch&) = delete;
  MpiTerminationWatch& operator=(const MpiTerminationWatch&) = delete;

 private:
  void wait_for_signal();
  int rank_;
  FlightRecorder& flight_;
  std::thread thread_;
};

}  // namespace shardlab
