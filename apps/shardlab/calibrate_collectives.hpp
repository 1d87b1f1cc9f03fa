// The collective part of `shardlab calibrate`: each collective in the form the engine calls it
// (all_gather in place, as FSDP's unshard gathers into the buffer that holds the rank's shard;
// reduce_scatter and all_reduce out of place) timed on the launched ranks over buffer sizes from
// 64 KiB to 64 MiB, the median of several calls per size, and fitted per collective to the ring's
// alpha-beta time in one to three regimes by buffer size (docs/simulate-validation.md, "How
// calibrate fits the collectives").
//
// The fit: a regime is the line t(S) = k (alpha + S / n / beta), k the ring steps of one call
// (n - 1; 2 (n - 1) for all_reduce, a reduce-scatter and an all-gather), by least squares on the
// relative error (every size weighs the same, 64 KiB as much as 64 MiB), alpha >= 0, beta > 0.
// One line is kept where it holds every size within kRegimeTolerance; otherwise the sizes are cut
// into two, then three, contiguous runs of at least two sizes each (the fewest runs that hold the
// tolerance, else the cut with the smallest worst error). A knee is where the two neighbouring
// lines cross when that is between their sizes, else the geometric middle: it is a measured
// property of the machine (buffers that stay in the caches copy faster than from memory); the
// log prints it beside the cache sizes sysfs gives.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/shardlab/calibrate.hpp"
#include "core/device/cluster_spec.hpp"

namespace shardlab {

struct CollectiveSample {
  int64_t bytes = 0;   // the collective's buffer (collective_bytes)
  double seconds = 0;  // the median call
};

struct CollectiveFit {
  std::vector<LinkRegime> regimes;  // ascending; the last has up_to_bytes 0
  double worst_error = 0;           // the largest |predicted / measured - 1| over the samples
};

constexpr double kRegimeTolerance = 0.10;

// Fits `samples` (ascending bytes, at least two) of a collective with `steps` ring steps per call
// on `ranks` ranks. Throws InvalidArgument for fewer than two samples or a non-positive time.
CollectiveFit fit_collective(const std::vector<CollectiveSample>& samples, int ranks, int steps);

// The time a fit predicts for a buffer of `bytes` (the regime that serves it, as
// Link::for_op picks it).
double fit_seconds(const CollectiveFit& f, int ranks, int steps, double bytes);

struct MeasuredCollectives {
  nlohmann::json per_op;       // {"all_gather": [regimes], ...}: the link's "collectives"
  bool async_progress = true;  // the spec's async_progress: an async collective runs meanwhile
  double latency = 0;    // the link's own alpha (all_gather's first regime) and beta (its last):
  double bandwidth = 0;  // what broadcast, barrier and the tree use
};

// The ranks in one group of the collectives: --ranks, or --ranks / --link-groups.
int link_group_size(const CalibrateOptions& o);

// Times and fits all_gather, reduce_scatter and all_reduce on `o.ranks` ranks of `o.backend`
// (under MPI the world; every process gets rank 0's medians, so all write the same spec). With
// --link-groups G, on G groups of ranks at once, each size the slowest rank's median.
MeasuredCollectives measure_collectives(const CalibrateOptions& o, std::ostream& log);

}  // namespace shardlab
