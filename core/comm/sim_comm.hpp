// SimCommunicator: the communicator of a simulated rank (docs/simulate.md). It stands for one rank
// of an N-rank job; data-parallel ranks do the same work, so that rank's timeline is every rank's.
// Collectives move no data. Each one runs on its communicator's stream (as the local backend runs
// a communicator's collectives in issue order on one worker): it starts when issued, or when the
// stream's previous collective ends, and takes what the topology model (topology.hpp) gives for its
// group's placement on the cluster. An async call returns at once; waiting joins the rank's compute
// clock to the collective's end. A spec with "async_progress": false (MPI without a progress
// thread, as `shardlab calibrate --backend mpi` finds it) starts an async collective only when the
// rank waits on it or makes a blocking call on that communicator: it does not overlap compute.
// Bytes are counted and the flight recorder fed by Communicator itself, as for every backend, and
// spans recorded with record_comm_span. Like the local backend's collectives (which reduce in
// registers), a simulated one takes no memory: a simulated rank's memory is the local backend's,
// category by category.
#pragma once

#include <memory>

#include "core/base/virtual_clock.hpp"
#include "core/comm/communicator.hpp"
#include "core/device/cluster_spec.hpp"

namespace shardlab {

// World rank `rank` of `world` ranks on cluster `spec` (world must fit it: ClusterSpec::
// check_ranks); times go to `clock`, the rank's compute stream. Sub-communicators come from
// split_group (split without the members throws InvalidArgument).
std::unique_ptr<Communicator> make_sim_communicator(std::shared_ptr<const ClusterSpec> spec,
                                                    int world, int rank, VirtualClock& clock);

}  // namespace shardlab
