// Sharded save and resharding load: a checkpoint saved by 4 ranks (full_shard, padding to a
// multiple of 4) loads bit-identically on 1, 2, 3 and 8 ranks with their own padding, and under
// another strategy (no_shard); elements held by several ranks (replicas) are written once.
#include <gtest/gtest.h>

#include <cmath>

#include "core/checkpoint/index.hpp"
#include "core/checkpoint/load.hpp"
#include "core/checkpoint/save.hpp"
#include "tests/checkpoint_fixture.hpp"

using namespace shardlab;
using namespace shardlab::ckpt_test;

namespace {

// Loads `dir` on `world` ranks and checks every rank's params and Adam state bit for bit.
void load_and_check(const FullState& full, const std::string& dir, int world, bool full_range,
                    int64_t want_step) {
  run_ranks(world, [&](const CkptSync& sync) {
    RankHolding h = make_holding(full, sync.rank, world, full_range, /*fill=*/false);
    LoadOptions opt;
    opt.expect_model_config = gpt_config_json(full.cfg);
    CheckpointMeta m = load_checkpoint(dir, h.shards, opt);
    EXPECT_EQ(m.step, want_step);
    EXPECT_EQ(m.optimizer_step, want_step);
    EXPECT_EQ(m.loader["position"], 1000 + want_step);
    EXPECT_EQ(m.rng["calls"], want_step * 7);
    expect_holding_matches(
        full, h, "load on " + std::to_string(world) + " ranks, rank " + std::to_string(sync.rank));
  });
}

}  // namespace

TEST(CheckpointReshard, SaveOnFourLoadsBitIdenticalOnOneTwoThreeEight) {
  FullState full = make_full_state(tiny_config(), 7);
  std::string root = scratch_dir("reshard");
  std::string dir = save_as(full, root, 10, 4);
  EXPECT_EQ(dir, root + "/step-10");

  // The index describes tensors: every one of them, each state tiled by the 4 ranks' files.
  CheckpointIndex ix = read_index(dir);
  EXPECT_EQ(ix.meta.world_size, 4);
  EXPECT_EQ(ix.meta.strategy, "full_shard");
  ASSERT_EQ(ix.files.size(), 4u);
  ASSERT_EQ(ix.meta.rank_states.size(), 4u);
  EXPECT_EQ(ix.meta.rank_states[3]["rank"], 3);
  int64_t total = 0;
  for (const auto& t : ix.tensors) total += t.numel;
  EXPECT_EQ(total, tiny_config().num_params());
  int64_t file_bytes = 0;
  for (const auto& f : ix.files) file_bytes += f.bytes;
  EXPECT_EQ(file_bytes, total * 4 * 3);  // three states, each element stored exactly once

  for (int m : {1, 2, 3, 8}) load_and_check(full, dir, m, false, 10);
  // Another strategy: no_shard on 2 ranks holds whole buffers (padded to a multiple of 2).
  load_and_check(full, dir, 2, true, 10);
}

TEST(CheckpointReshard, NoShardSaveWritesOnceAndLoadsSharded) {
  FullState full = make_full_state(tiny_config(), 11);
  std::string root = scratch_dir("noshard");
  std::string dir = save_as(full, root, 3, 2, /*full_range=*/true);
  CheckpointIndex ix = read_index(dir);
  EXPECT_EQ(ix.meta.strategy, "no_shard");
  EXPECT_EQ(ix.files[1].bytes, 0);  // the replica wrote nothing
  load_and_check(full, dir, 3, false, 3);
}

TEST(CheckpointReshard, HybridReplicaGroupsWriteOnce) {
  // hybrid_shard over 4 ranks in groups of 2: ranks 0 and 2 hold shard 0, ranks 1 and 3 shard 1.
  FullState full = make_full_state(tiny_config(), 5);
  std::string root = scratch_dir("hybrid");
  run_ranks(4, [&](const CkptSync& sync) {
    RankHolding h = make_holding(full, sync.rank % 2, 2, false, true);
    save_checkpoint(root, h.shards, make_meta(full.cfg, 1, "hybrid_shard"), sync);
  });
  CheckpointIndex ix = read_index(root + "/step-1");
  EXPECT_GT(ix.files[0].bytes, 0);
  EXPECT_GT(ix.files[1].bytes, 0);
  EXPECT_EQ(ix.files[2].bytes, 0);  // the second replica group wrote nothing
  EXPECT_EQ(ix.files[3].bytes, 0);
  load_and_check(full, root, 3, false, 1);
}

TEST(CheckpointReshard, OverlappingRangesAreWrittenByTheLowestRank) {
  // Uneven, overlapping ranges (rank 1 also holds the tail of rank 0's range).
  FullState full = make_full_state(tiny_config(), 6);
  std::string root = scratch_dir("overlap");
  run_ranks(2, [&](const CkptSync& sync) {
    RankHolding h = make_holding(full, 0, 1, /*full_range=*/true, true);
    for (auto& u : h.shards) {
      int64_t cut = u.padded_numel / 2;
      int64_t b = sync.rank == 0 ? 0 : cut - 7, e = sync.rank == 0 ? cut : u.padded_numel;
      for (auto& [st, p] : u.states) p += b;
      u.begin = b;
      u.end = e;
    }
    save_checkpoint(root, h.shards, make_meta(full.cfg, 2, "custom"), sync);
  });
  CheckpointIndex ix = read_index(root + "/step-2");
  int64_t params = tiny_config().num_params();
  EXPECT_EQ(ix.files[0].bytes + ix.files[1].bytes, params * 4 * 3);
  load_and_check(full, root, 2, false, 2);
}

TEST(CheckpointReshard, ElementsNobodyWritesAreAnError) {
  FullState full = make_full_state(tiny_config(), 5);
  std::string root = scratch_dir("nobody");
  try {
    run_ranks(2, [&](const CkptSync& sync) {
      RankHolding h = make_holding(full, sync.rank, 2, false, true);
      if (sync.rank == 1) h.shards[0].write = false;  // unit 0's second half goes unwritten
      save_checkpoint(root, h.shards, make_meta(full.cfg, 1, "full_shard"), sync);
    });
    FAIL() << "no throw";
  } catch (const InvalidArgument& e) {
    std::string m = e.what();
    // Unit 0 (504 elements) splits at 252: wte.weight [0, 384) lacks [252, 384).
    EXPECT_NE(m.find("tensor wte.weight state exp_avg: elements [252, 384) are missing"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("CkptShard::write = true"), std::string::npos) << m;
  }
  EXPECT_FALSE(path_exists(root + "/step-1"));
  EXPECT_FALSE(path_exists(root + "/latest"));
}

TEST(CheckpointReshard, LoadsOnlyTheRequestedStates) {
  FullState full = make_full_state(tiny_config(), 3);
  std::string root = scratch_dir("subset");
  save_as(full, root, 4, 4);
  RankHolding h = make_holding(full, 0, 1, false, false);
  for (auto& s : h.shards) {
    s.states.erase(kStateExpAvg);
    s.states.erase(kStateExpAvgSq);
  }
  load_checkpoint(root, h.shards);  // the root resolves through `latest`
  expect_holding_matches(full, h, "params only");
  // The states not asked for keep their 0xFF pattern (a NaN): the load did not touch them.
  EXPECT_TRUE(std::isnan(h.buffers[1].at(kStateExpAvg)[0]));
}
