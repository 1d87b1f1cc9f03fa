// The launcher starts the ranks of a run and hands each one its context. The same training code
// runs under every backend:
//   local: `--ranks N` starts N threads in this process (the default; no setup)
//   mpi:   under `mpirun -np N`, each process is one rank
//   nccl:  one thread per GPU in this process (CUDA builds)
//   sim:   one rank of `--ranks N` on a cluster spec, on a thread of its own with a MetaDevice, a
//          SimCommunicator and a virtual clock (docs/simulate.md)
// If any rank throws, the others are released from their collectives (CommError) and launch()
// rethrows the first failure as RankFailure naming the rank and its message.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/base/error.hpp"
#include "core/comm/communicator.hpp"
#include "core/comm/flight_recorder.hpp"
#include "core/device/cluster_spec.hpp"
#include "core/device/device.hpp"
#include "core/memory/tracker.hpp"

namespace shardlab {

class Recorder;

// Everything one rank owns. Lives for the duration of the rank function.
struct RankContext {
  int rank = 0;
  int world = 1;
  MemoryTracker* tracker = nullptr;
  Device* device = nullptr;
  Communicator* comm = nullptr;
  Recorder* recorder = nullptr;  // never null: a disabled recorder when tracing is off
  FlightRecorder* flight() const { return &comm->flight(); }  // the rank's last collectives
};

struct LaunchOptions {
  std::string backend = "local";  // local | mpi | nccl | sim
  int ranks = 1;                  // local, nccl and sim; mpi takes the size from mpirun
  std::string device = "cpu";     // cpu | cuda | meta (sim only)
  // sim: the cluster, the one rank that runs (standing for all of them) and the GEMM math its
  // device is charged at.
  std::shared_ptr<const ClusterSpec> cluster;
  int sim_rank = 0;
  GemmMath gemm_math = GemmMath::fp32;
  int64_t mem_limit = 0;  // per-rank tracker capacity in bytes, 0 = unlimited
  // local: bind each rank's thread to a CPU of its own when there are 2 or more ranks and they fit
  // on the CPUs this process may use (core/base/cpu_affinity.hpp); false, or SHARDLAB_BIND_TO=none
  // in the environment, leaves every thread to the scheduler.
  bool bind_to_cores = true;
  // The collective watchdog (local and mpi): a rank waiting longer than this in one collective
  // stops the job, naming the ranks that did not arrive, and writes flight.json where the rank's
  // FlightRecorder::set_dump_path says.
  double collective_timeout_s = kDefaultCollectiveTimeoutS;
  // After a failure, how long the local launcher waits for the other ranks to notice before it
  // ends the process (exit status 1) with the failure: a rank stuck outside any collective
  // (an endless loop, a sleep) never notices. 0: wait for ever (tests, library use).
  double exit_after_failure_s = 0;
  // Called once per rank after its tracker exists and before fn runs: makes the rank's recorder
  // (e.g. appending to <run_dir>/rank<R>.jsonl). Null: a disabled recorder.
  std::function<std::unique_ptr<Recorder>(int rank)> make_recorder;
};

// A rank failed; what() is "rank R: <its message>".
class RankFailure : public Error {
 public:
  RankFailure(int rank, const std::string& msg) : Error(msg), rank_(rank) {}
  int rank() const { return rank_; }

 private:
  int rank_;
};

// Runs fn on every rank and returns when all are done. Throws RankFailure for the first rank that
// failed (others are unblocked and their secondary CommErrors are not reported).
void launch(const LaunchOptions& opts, const std::function<void(RankContext&)>& fn);

// The CPU each local rank's thread is bound to under `opts` (empty: not bound). One rank has no
// peer to wait for and is never bound.
std::vector<int> local_rank_cpus(const LaunchOptions& opts);

// True when this process was started by mpirun (OMPI_COMM_WORLD_SIZE or PMI_SIZE set).
bool under_mpirun();

}  // namespace shardlab
