// Alpha-beta costs of ring, hierarchical and tree collectives over a cluster's links.
#include "core/comm/topology.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/base/virtual_clock.hpp"

namespace shardlab {

namespace {

// One ring phase over n participants moving `chunk` bytes per step: n - 1 steps.
double ring(int n, double chunk, const Link& l) {
  return n > 1 ? (n - 1) * (l.latency + chunk / l.bandwidth) : 0.0;
}

int log2_ceil(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

// all_gather (or, mirrored, reduce_scatter) of a buffer of S bytes; `op` picks the links'
// per-collective alpha and beta where the spec has them (all_reduce's are fitted to its two ring
// passes, each of them this).
double gather_like(const ClusterSpec& s, const GroupPlacement& g, double S, const char* op) {
  const int n = g.size;
  const Link in = s.intra_node.for_op(op, S), ex = s.inter_node.for_op(op, S);
  if (g.intra_node()) return ring(n, S / n, in);
  if (!g.uniform) return ring(n, S / n, ex);  // a flat ring, bound by the slowest link
  // Hierarchical: across nodes, each of the per_node rails moves its 1/n chunks; then inside
  // each node the per_node ranks exchange what they hold (S / per_node each).
  return ring(g.nodes, S / n, ex) + ring(g.per_node, S / g.per_node, in);
}

// The links the group crosses carry an all_reduce of their own (calibrate measured it): its
// fit already holds whichever algorithm the library ran, so no tree is chosen on top of it.
bool measured_all_reduce(const ClusterSpec& s, const GroupPlacement& g) {
  const char* op = comm_op_name(CommOp::all_reduce);
  return g.intra_node() ? s.intra_node.has_op(op)
                        : s.inter_node.has_op(op) && (g.per_node == 1 || s.intra_node.has_op(op));
}

double tree_all_reduce(const ClusterSpec& s, const GroupPlacement& g, double S) {
  const Link& l = g.intra_node() ? s.intra_node : s.inter_node;
  return 2.0 * log2_ceil(g.size) * (l.latency + S / l.bandwidth);
}

bool tree_wins(const ClusterSpec& s, const GroupPlacement& g, double S) {
  const char* op = comm_op_name(CommOp::all_reduce);
  return S <= s.cost.tree_allreduce_max_bytes && !measured_all_reduce(s, g) &&
         tree_all_reduce(s, g, S) < 2.0 * gather_like(s, g, S, op);
}

double seconds(const ClusterSpec& s, const GroupPlacement& g, CommOp op, double S) {
  if (g.size <= 1) return 0.0;
  const Link& slow = g.intra_node() ? s.intra_node : s.inter_node;
  switch (op) {
    case CommOp::all_gather:
    case CommOp::reduce_scatter: return gather_like(s, g, S, comm_op_name(op));
    case CommOp::all_reduce:
      return tree_wins(s, g, S) ? tree_all_reduce(s, g, S)
                                : 2.0 * gather_like(s, g, S, comm_op_name(op));
    case CommOp::broadcast:  // pipelined down a tree: the depth's latency, the bytes once
      return log2_ceil(g.size) * slow.latency + S / slow.bandwidth;
    case CommOp::barrier:
    case CommOp::split: return 2.0 * log2_ceil(g.size) * slow.latency;
  }
  return 0.0;
}

}  // namespace

GroupPlacement place_group(const ClusterSpec& s, const std::vector<int>& world_ranks) {
  GroupPlacement g;
  g.size = static_cast<int>(world_ranks.size());
  std::map<int, int> per_node;
  for (int r : world_ranks) ++per_node[r / s.ranks_per_node];
  g.nodes = static_cast<int>(per_node.size());
  g.per_node = per_node.empty() ? 1 : per_node.begin()->second;
  for (const auto& kv : per_node) g.uniform = g.uniform && kv.second == g.per_node;
  return g;
}

int64_t collective_ns(const ClusterSpec& s, const GroupPlacement& g, CommOp op, int64_t bytes) {
  return virtual_ns(seconds(s, g, op, static_cast<double>(bytes)), comm_op_name(op));
}

std::string collective_algorithm(const ClusterSpec& s, const GroupPlacement& g, CommOp op,
                                 int64_t bytes) {
  if (g.size <= 1) return "none (one rank)";
  if (op == CommOp::broadcast) return g.intra_node() ? "tree, intra-node" : "tree, inter-node";
  if (op == CommOp::barrier || op == CommOp::split) return "tree (latency only)";
  if (op == CommOp::all_reduce && tree_wins(s, g, static_cast<double>(bytes)))
    return g.intra_node() ? "tree, intra-node" : "tree, inter-node";
  const Link& l = g.intra_node() ? s.intra_node : s.inter_node;
  const std::string fitted = l.has_op(comm_op_name(op)) ? ", alpha-beta of this collective" : "";
  if (g.intra_node()) return "ring, intra-node" + fitted;
  if (!g.uniform) return "ring, inter-node (flat)" + fitted;
  return (g.per_node > 1 ? "hierarchical: ring across nodes + ring inside each"
                         : "ring, inter-node") +
         fitted;
}

}  // namespace shardlab
