// `shardlab calibrate`: measures this machine and writes a cluster spec the simulator reads
// (docs/simulate.md, "this-machine"). What it measures, with the CPU device and the backend the
// ranks run on:
//   GEMM FLOP/s of square sgemm over sizes (one BLAS thread: one rank's share of the cores); the
//     largest size's rate is the peak, the smaller ones fit the efficiency's half dimension;
//   memory bandwidth of a large copy (bytes read plus written per second), and how close a mix of
//     element-wise and row kernels (layernorm, GELU, softmax, AdamW) comes to it: the spec's
//     memory_efficiency;
//   the collectives' alpha and beta per collective (all_gather in place, reduce_scatter and
//     all_reduce out of place, as the engine calls them): the median call over buffer sizes from
//     64 KiB to 64 MiB, fitted to the ring's (n - 1)(alpha + S / n / beta) in one to three
//     regimes by size (calibrate_collectives.hpp); the link's own alpha and beta are
//     all_gather's smallest-regime alpha and largest-regime beta.
// The machine is one node of --ranks ranks; its inter-node link is the same measured link.
// With --link-groups G the collectives run on G groups at once (group g: the ranks r with
// r mod G = g), so each rank's figure is its share of links the groups use together: launched with
// G ranks on each of two hosts (one rank of every group on each), that is the inter-node bandwidth
// one rank gets while all ranks of its node use the network, as a data-parallel step uses it.
#pragma once

#include <iosfwd>
#include <string>

#include <nlohmann/json.hpp>

namespace shardlab {

struct CalibrateOptions {
  int ranks = 2;                   // ranks for the collectives (local threads; mpi: the MPI world)
  std::string backend = "local";   // local | mpi
  double seconds_per_point = 0.2;  // time spent on each measured size
  bool quick = false;              // fewer sizes and shorter runs (--cluster this-machine)
  int link_groups = 1;             // collectives on this many concurrent groups (see above)
};

// The spec as JSON (parse_cluster_spec reads it); progress lines go to `log`.
nlohmann::json calibrate_this_machine(const CalibrateOptions& opts, std::ostream& log);

}  // namespace shardlab
