// The topology model of the simulator (docs/simulate.md): how long a collective takes on a group of
// ranks of a ClusterSpec. Ranks are placed by node, world rank r on node r / ranks_per_node. Each
// collective is an alpha-beta sum of its algorithm's steps over the links the group crosses:
//   inside one node: a ring over the intra-node links (NVLink);
//   across nodes, m ranks on each of k nodes: hierarchical, a ring across nodes (every GPU its own
//     NIC, so the m rails run in parallel) and a ring inside each node;
//   all_reduce: reduce-scatter then all-gather, or a binary tree when the buffer is small
//     (<= tree_allreduce_max_bytes), whichever is faster, as NCCL's tuner picks.
// Where a link carries per-collective fits (Link::per_op, written by `shardlab calibrate`), each
// ring step of all_gather, reduce_scatter and all_reduce over that link uses that collective's
// alpha and beta for the buffer's size regime, and all_reduce takes no tree (its fit is of what
// the library actually runs).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/comm/comm_common.hpp"
#include "core/device/cluster_spec.hpp"

namespace shardlab {

// Where a group's ranks sit.
struct GroupPlacement {
  int size = 1;
  int nodes = 1;        // nodes the group touches
  int per_node = 1;     // ranks on each node (when uniform)
  bool uniform = true;  // every touched node holds per_node of the group's ranks
  bool intra_node() const { return nodes == 1; }
};

// `world_ranks`: the group's members as world ranks.
GroupPlacement place_group(const ClusterSpec& s, const std::vector<int>& world_ranks);

// Seconds... in ns: the time of one `op` over `g` whose buffer is `bytes` (collective_bytes: the
// gathered buffer of all_gather, the input of reduce_scatter, the buffer of all_reduce and
// broadcast). 0 for a group of one.
int64_t collective_ns(const ClusterSpec& s, const GroupPlacement& g, CommOp op, int64_t bytes);

// "ring, NVLink" style: the algorithm and links collective_ns used (for tables and the docs).
std::string collective_algorithm(const ClusterSpec& s, const GroupPlacement& g, CommOp op,
                                 int64_t bytes);

}  // namespace shardlab
