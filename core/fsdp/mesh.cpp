// The mesh's arithmetic: shard and replica groups from the world size, the strategy and G.
#include "core/fsdp/mesh.hpp"

#include "core/base/error.hpp"

namespace shardlab {

Mesh make_mesh(Strategy strategy, int world, int rank, int hybrid_group) {
  SL_CHECK(world >= 1, "world size ", world, " must be at least 1");
  SL_CHECK(rank >= 0 && rank < world, "mesh: rank ", rank, " outside [0, ", world, ")");
  const int G = shard_group_size(strategy, world, hybrid_group);
  Mesh m;
  m.world = world;
  m.rank = rank;
  m.shard_size = G;
  m.shard_rank = rank % G;
  m.shard_color = rank / G;
  m.replica_size = world / G;
  m.replica_rank = rank / G;
  m.replica_color = rank % G;
  return m;
}

std::vector<int> Mesh::shard_ranks() const {
  std::vector<int> out;
  for (int s = 0; s < shard_size; ++s) out.push_back(shard_color * shard_size + s);
  return out;
}

std::vector<int> Mesh::replica_ranks() const {
  std::vector<int> out;
  for (int g = 0; g < replica_size; ++g) out.push_back(g * shard_size + replica_color);
  return out;
}

}  // namespace shardlab
