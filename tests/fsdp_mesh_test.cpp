// core/fsdp/mesh: the shard and replica groups of every strategy for N = 1..8 and every G that
// divides N, seen from every rank; and the engine's communicators split by the mesh's colours.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/base/error.hpp"
#include "core/fsdp/mesh.hpp"
#include "tests/fsdp_test_util.hpp"

using namespace shardlab;
using namespace shardlab::fsdp_test;

namespace {

const Strategy kAll[] = {Strategy::no_shard, Strategy::shard_optim, Strategy::shard_grad_op,
                         Strategy::full_shard, Strategy::hybrid_shard};

// Every rank's view of one mesh.
std::vector<Mesh> meshes(Strategy s, int N, int G) {
  std::vector<Mesh> out;
  for (int r = 0; r < N; ++r) out.push_back(make_mesh(s, N, r, G));
  return out;
}

// The groups (as rank lists) of a family, each once; every rank must be in exactly one.
void expect_partition(const std::vector<std::vector<int>>& groups_of_rank, int N, int size) {
  std::set<std::vector<int>> groups(groups_of_rank.begin(), groups_of_rank.end());
  EXPECT_EQ(static_cast<int>(groups.size()) * size, N);
  std::vector<int> seen(N, 0);
  for (const std::vector<int>& g : groups) {
    EXPECT_EQ(static_cast<int>(g.size()), size);
    for (int r : g) ++seen[r];
  }
  for (int r = 0; r < N; ++r) EXPECT_EQ(seen[r], 1) << "rank " << r;
  for (int r = 0; r < N; ++r) {
    const std::vector<int>& g = groups_of_rank[r];
    EXPECT_NE(std::find(g.begin(), g.end(), r), g.end()) << "rank " << r << " not in its group";
  }
}

}  // namespace

TEST(FsdpMesh, GroupSizesOfEveryStrategy) {
  for (int N = 1; N <= 8; ++N) {
    EXPECT_EQ(make_mesh(Strategy::no_shard, N, 0, 0).shard_size, 1);
    EXPECT_EQ(make_mesh(Strategy::no_shard, N, 0, 0).replica_size, N);
    for (Strategy s : {Strategy::shard_optim, Strategy::shard_grad_op, Strategy::full_shard}) {
      EXPECT_EQ(make_mesh(s, N, N - 1, 0).shard_size, N) << strategy_name(s);
      EXPECT_EQ(make_mesh(s, N, N - 1, 0).replica_size, 1) << strategy_name(s);
    }
    for (int G = 1; G <= N; ++G) {
      if (N % G) continue;
      const Mesh m = make_mesh(Strategy::hybrid_shard, N, 0, G);
      EXPECT_EQ(m.shard_size, G);
      EXPECT_EQ(m.replica_size, N / G);
    }
    // hybrid without a group size is full_shard over the world.
    EXPECT_EQ(make_mesh(Strategy::hybrid_shard, N, 0, 0).shard_size, N);
  }
}

TEST(FsdpMesh, GroupsPartitionTheWorldForEveryStrategyNAndG) {
  int meshes_checked = 0;
  for (Strategy s : kAll) {
    for (int N = 1; N <= 8; ++N) {
      for (int G = 1; G <= N; ++G) {
        if (N % G || (s != Strategy::hybrid_shard && G != 1)) continue;
        SCOPED_TRACE(std::string(strategy_name(s)) + " N=" + std::to_string(N) +
                     " G=" + std::to_string(G));
        const std::vector<Mesh> ms = meshes(s, N, G);
        std::vector<std::vector<int>> shard, replica;
        for (const Mesh& m : ms) {
          shard.push_back(m.shard_ranks());
          replica.push_back(m.replica_ranks());
          EXPECT_EQ(m.world, N);
          EXPECT_EQ(m.shard_size * m.replica_size, N);
          // The grid: world rank = replica_rank * G + shard_rank.
          EXPECT_EQ(m.replica_rank * m.shard_size + m.shard_rank, m.rank);
          EXPECT_EQ(m.shard_ranks().at(m.shard_rank), m.rank);
          EXPECT_EQ(m.replica_ranks().at(m.replica_rank), m.rank);
          // Shard groups are consecutive ranks (a machine's GPUs under hybrid).
          const std::vector<int> sr = m.shard_ranks();
          for (size_t i = 1; i < sr.size(); ++i) EXPECT_EQ(sr[i], sr[i - 1] + 1);
          // A rank's two groups meet in the rank alone.
          int common = 0;
          for (int a : sr)
            for (int b : m.replica_ranks()) common += a == b;
          EXPECT_EQ(common, 1);
        }
        expect_partition(shard, N, ms[0].shard_size);
        expect_partition(replica, N, ms[0].replica_size);
        for (int r = 0; r < N; ++r) {
          // Same colour, same group; a replica group's ranks hold the same shard.
          for (int q = 0; q < N; ++q) {
            EXPECT_EQ(ms[r].shard_color == ms[q].shard_color, shard[r] == shard[q]);
            EXPECT_EQ(ms[r].replica_color == ms[q].replica_color, replica[r] == replica[q]);
          }
          for (int q : replica[r]) EXPECT_EQ(ms[q].shard_rank, ms[r].shard_rank);
          for (int q : shard[r]) EXPECT_EQ(ms[q].replica_rank, ms[r].replica_rank);
        }
        ++meshes_checked;
      }
    }
  }
  EXPECT_EQ(meshes_checked, 4 * 8 + (1 + 2 + 2 + 3 + 2 + 4 + 2 + 4));
}

TEST(FsdpMesh, HybridOfFourRanksInTwoGroups) {
  // Ranks 0 1 | 2 3: shard groups {0, 1} and {2, 3}; replica groups {0, 2} and {1, 3}.
  const Mesh m = make_mesh(Strategy::hybrid_shard, 4, 3, 2);
  EXPECT_EQ(m.shard_ranks(), (std::vector<int>{2, 3}));
  EXPECT_EQ(m.replica_ranks(), (std::vector<int>{1, 3}));
  EXPECT_EQ(m.shard_rank, 1);
  EXPECT_EQ(m.replica_rank, 1);
}

TEST(FsdpMesh, RejectsBadGroupsAndRanks) {
  EXPECT_THROW(make_mesh(Strategy::hybrid_shard, 6, 0, 4), InvalidArgument);
  EXPECT_THROW(make_mesh(Strategy::hybrid_shard, 4, 0, 8), InvalidArgument);
  EXPECT_THROW(make_mesh(Strategy::full_shard, 4, 4, 0), InvalidArgument);
  EXPECT_THROW(make_mesh(Strategy::full_shard, 4, -1, 0), InvalidArgument);
  EXPECT_THROW(make_mesh(Strategy::no_shard, 0, 0, 0), InvalidArgument);
  // Only hybrid_shard reads the group size.
  EXPECT_EQ(make_mesh(Strategy::full_shard, 6, 0, 4).shard_size, 6);
}

TEST(FsdpMesh, EngineGroupsAreTheMeshs) {
  // The engine splits its world by the mesh's colours: its shard group and rank are the mesh's.
  const GPTConfig model = tiny_model();
  for (Strategy s : kAll) {
    SCOPED_TRACE(strategy_name(s));
    EngineConfig ec = test_config(s);
    ec.hybrid_group = 2;
    LaunchOptions lo;
    lo.ranks = 4;
    launch(lo, [&](RankContext& ctx) {
      Engine e(*ctx.device, *ctx.comm, ctx.recorder, model, ec);
      const Mesh m = make_mesh(s, 4, ctx.rank, ec.hybrid_group);
      EXPECT_EQ(e.world(), m.world);
      EXPECT_EQ(e.shard_group(), m.shard_size);
      EXPECT_EQ(e.shard_rank(), m.shard_rank);
    });
  }
}
