// Alpha-beta costs of ring, hierarchical and tree collectives over a cluster's links.
#include "core/comm/topology.hpp"

#include <algorithm>
#include <cmath>
#include <map>

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

// all_gather (or, mirrored, reduce_scatter) of a buffer of S bytes.
double gather_like(const ClusterSpec& s, const GroupPlacement& g, double S) {
  const int n = g.size;
  if (g.intra_node()) return ring(n, S / n, s.intra_node);
  if (!g.uniform) return ring(n, S / n, s.inter_node);  // a flat ring, bound by the slowest link
  // Hierarchical: across nodes, each of the per_node rails moves its 1/n chunks; then inside
  // each node the per_node ranks exchange what they hold (S / per_node each).
  return ring(g.nodes, S / n, s.inter_node) + ring(g.per_node, S / g.per_node, s.intra_node);
}

double tree_all_reduce(const ClusterSpec& s, const GroupPlacement& g, double S) {
  const Link& l = g.intra_node() ? s.intra_node : s.inter_node;
  return 2.0 * log2_ceil(g.size) * (l.latency + S / l.bandwidth);
}

bool tree_wins(const ClusterSpec& s, const GroupPlacement& g, double S) {
  return S <= s.cost.tree_allreduce_max_bytes &&
         tree_all_reduce(s, g, S) < 2.0 * gather_like(s, g, S);
}

double seconds(const ClusterSpec& s, const GroupPlacement& g, CommOp op, double S) {
  if (g.size <= 1) return 0.0;
  const Link& slow = g.intra_node() ? s.intra_node : s.inter_node;
  switch (op) {
    case CommOp::all_gather:
    case CommOp::reduce_scatter: return gather_like(s, g, S);
    case CommOp::all_reduce:
      return tree_wins(s, g, S) ? tree_all_reduce(s, g, S) : 2.0 * gather_like(s, g, S);
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
  return static_cast<int64_t>(std::llround(seconds(s, g, op, static_cast<double>(bytes)) * 1e9));
}

std::string collective_algorithm(const ClusterSpec& s, const GroupPlacement& g, CommOp op,
                                 int64_t bytes) {
  if (g.size <= 1) return "none (one rank)";
  if (op == CommOp::broadcast) return g.intra_node() ? "tree, intra-node" : "tree, inter-node";
  if (op == CommOp::barrier || op == CommOp::split) return "tree (latency only)";
  if (op == CommOp::all_reduce && tree_wins(s, g, static_cast<double>(bytes)))
    return g.intra_node() ? "tree, intra-node" : "tree, inter-node";
  if (g.intra_node()) return "ring, intra-node";
  if (!g.uniform) return "ring, inter-node (flat)";
  return g.per_node > 1 ? "hierarchical: ring across nodes + ring inside each" : "ring, inter-node";
}

}  // namespace shardlab
