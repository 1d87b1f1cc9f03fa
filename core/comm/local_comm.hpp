// The local backend: ranks are threads of one process. A LocalWorld is what the rank threads
// share (who failed, which ranks are alive); each rank makes its Communicator over it with its own
// Device. The collectives take no memory of their own: they read and write the ranks' buffers
// directly (the reduction sums in registers, core/comm/reduce.hpp), so nothing is charged to
// MemCategory::comm_buffers.
//
// Each communicator runs its rank's async collectives on its own worker thread, in issue order,
// so they overlap the rank's compute; a blocking call runs on the calling thread when nothing is
// queued before it (same order, no hand-off). At a collective the workers of all ranks meet
// (a rendezvous that also checks that they agree on op, count, dtype, reduce op and root), each
// does its share of the data movement, and they meet again before anyone returns.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/comm/communicator.hpp"
#include "core/comm/flight_recorder.hpp"
#include "core/device/device.hpp"

namespace shardlab {

class LocalWorld {
 public:
  explicit LocalWorld(int size);
  ~LocalWorld();
  LocalWorld(const LocalWorld&) = delete;
  LocalWorld& operator=(const LocalWorld&) = delete;

  int size() const;

  // Rank `rank` failed with `message`: every collective of every communicator of this world that
  // is blocked, or starts later, throws CommError "rank R: aborted: rank K failed: <message>".
  // The failure reported is the first one that is not `secondary` (a CommError, which another
  // rank's failure may have caused), else the first one. Returns true for the first call.
  bool abort(int rank, const std::string& message, bool secondary = false);
  bool aborted() const;
  int failed_rank() const;              // -1 when nothing failed
  std::string failure_message() const;  // the reported failure's message, without a rank prefix

  // The collective watchdog: a rank that waits longer than this in one collective names the ranks
  // that did not arrive, writes every rank's flight recorder to its FlightRecorder::dump_path()
  // (when set) and aborts the world with that report. Seconds, > 0; kDefaultCollectiveTimeoutS
  // until set.
  void set_collective_timeout(double seconds);
  double collective_timeout() const;
  bool watchdog_fired() const;
  // The CPUs the communicators' worker threads run on (cpu_affinity.hpp's CoreBinding); empty:
  // each worker keeps the CPUs of the rank thread that made it. Set before any communicator.
  void set_worker_cpus(std::vector<int> cpus);
  // World rank `rank`'s flight recorder (its last collectives).
  FlightRecorder& flight(int rank);

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Rank `rank`'s communicator over all ranks of `world`, on `device` (a CPU device: the local
// backend reads and writes the other ranks' host memory).
std::unique_ptr<Communicator> make_local_communicator(const std::shared_ptr<LocalWorld>& world,
                                                      int rank, Device& device);

}  // namespace shardlab
