// The collective watchdog of the MPI backend. MPI cannot tell one rank where the others are, so
// the ranks ask each other: every wait on a collective polls (MPI_Test) instead of blocking, and
// answers "where are you?" probes on a private duplicate of MPI_COMM_WORLD with the collective it
// is waiting in and its last completed one. A rank whose wait outlasts the timeout probes every
// rank, listens for a grace period, and names the ranks that did not answer (busy outside any
// collective: hung, or slow) and those waiting in a different collective (a desync); then it
// writes flight.json and fails, and the launcher ends the job with MPI_Abort.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "core/comm/flight_recorder.hpp"

namespace shardlab {

class MpiWatchdog {
 public:
  // Collective over `world` (duplicates it). One per process, shared by its communicators.
  MpiWatchdog(MPI_Comm world, std::shared_ptr<FlightRecorder> flight);
  ~MpiWatchdog();
  MpiWatchdog(const MpiWatchdog&) = delete;
  MpiWatchdog& operator=(const MpiWatchdog&) = delete;

  void set_timeout(double seconds) { timeout_s_ = seconds; }

  // Waits for `req` like MPI_Wait, answering probes meanwhile. When the wait outlasts the
  // timeout, finds the missing ranks and throws CommError with the report. Returns MPI's code.
  int wait(MPI_Request* req, int64_t seq);
  bool fired() const { return fired_; }

 private:
  void answer_probes(int64_t seq);
  [[noreturn]] void fire(int64_t seq);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::shared_ptr<FlightRecorder> flight_;
  double timeout_s_ = kDefaultCollectiveTimeoutS;
  bool fired_ = false;
};

}  // namespace shardlab
