// The mesh: the N ranks of the world as a 2-D grid, world rank = replica_rank * G + shard_rank.
// A row is a shard group (the G consecutive ranks that split a unit between them, so each keeps
// one shard); a column is a replica group (the N/G ranks that hold the same shard, one per row).
//   no_shard      G = 1: N groups of one rank; one replica group of all N ranks
//   shard_optim, shard_grad_op, full_shard   G = N: one shard group; no replicas
//   hybrid_shard  G = the hybrid group: N/G shard groups of G ranks, G replica groups of N/G
// Pure arithmetic, usable without a communicator: the engine splits its world by the colours
// below, the planner only needs the sizes. Lesson 5's Mesh is the teaching version.
#pragma once

#include <vector>

#include "core/fsdp/strategy.hpp"

namespace shardlab {

struct Mesh {
  int world = 1;          // N
  int rank = 0;           // this rank in the world
  int shard_size = 1;     // G: ranks that split a unit
  int shard_rank = 0;     // this rank's index in its shard group: it owns shard `shard_rank`
  int shard_color = 0;    // which shard group (the split colour)
  int replica_size = 1;   // N / G: ranks that hold the same shard
  int replica_rank = 0;   // this rank's index in its replica group
  int replica_color = 0;  // which replica group (the split colour): the shard its ranks hold

  // World ranks of this rank's shard group and replica group, ascending.
  std::vector<int> shard_ranks() const;
  std::vector<int> replica_ranks() const;
};

// The mesh of `strategy` on `world` ranks, seen from `rank`. hybrid_group is G for hybrid_shard
// (<= 0: the whole world) and ignored otherwise; throws InvalidArgument when it does not divide
// the world (shard_group_size).
Mesh make_mesh(Strategy strategy, int world, int rank, int hybrid_group);

}  // namespace shardlab
