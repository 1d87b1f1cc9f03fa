// Atomic saves: a save that fails part way (a rank dies after its shard, rank 0 dies before or
// after the rename, or a temp dir is left by a killed process) leaves the previous checkpoint
// loadable and `latest` pointing at it; the next successful save cleans the leftovers.
#include <gtest/gtest.h>

#include "core/base/file_io.hpp"
#include "core/checkpoint/load.hpp"
#include "core/checkpoint/save.hpp"
#include "tests/checkpoint_fixture.hpp"

using namespace shardlab;
using namespace shardlab::ckpt_test;

namespace {

std::string latest_of(const std::string& root) { return read_text_file(root + "/latest"); }

// Loads `root` (through latest) on 2 ranks and checks it is `full` at `step`.
void expect_loads(const FullState& full, const std::string& root, int64_t step) {
  run_ranks(2, [&](const CkptSync& sync) {
    RankHolding h = make_holding(full, sync.rank, 2, false, false);
    CheckpointMeta m = load_checkpoint(root, h.shards);
    EXPECT_EQ(m.step, step);
    expect_holding_matches(full, h, "after a failed save");
  });
}

// Saves `full` at `step` on 4 ranks with a hook that throws at `stage` on `rank`.
void save_failing(const FullState& full, const std::string& root, int64_t step,
                  const std::string& stage, int rank) {
  SaveOptions opt;
  opt.on_stage = [&](const std::string& s, int r) {
    if (s == stage && r == rank) throw IoError("injected failure at " + s);
  };
  try {
    save_as(full, root, step, 4, false, opt);
    FAIL() << "the injected failure did not stop the save";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), "injected failure at " + stage);
  }
}

}  // namespace

TEST(CheckpointAtomic, FailedSavesLeaveThePreviousCheckpoint) {
  FullState first = make_full_state(tiny_config(), 1);
  FullState second = make_full_state(tiny_config(), 2);
  std::string root = scratch_dir("atomic");
  save_as(first, root, 1, 4);
  EXPECT_EQ(latest_of(root), "step-1\n");

  // Rank 2 dies once its shard is on disk: no index, no rename.
  save_failing(second, root, 2, "shard_written", 2);
  EXPECT_FALSE(path_exists(root + "/step-2"));
  ASSERT_EQ(stale_temp_dirs(root).size(), 1u);
  EXPECT_TRUE(path_exists(stale_temp_dirs(root)[0] + "/shard-2.bin"));
  EXPECT_FALSE(path_exists(stale_temp_dirs(root)[0] + "/index.json"));
  EXPECT_EQ(latest_of(root), "step-1\n");
  expect_loads(first, root, 1);

  // Rank 0 dies with the index written but before the rename: still invisible.
  save_failing(second, root, 2, "index_written", 0);
  EXPECT_FALSE(path_exists(root + "/step-2"));
  EXPECT_EQ(latest_of(root), "step-1\n");
  expect_loads(first, root, 1);

  // Rank 0 dies after the rename, before `latest` moves: step-2 is complete, latest is step-1.
  save_failing(second, root, 2, "renamed", 0);
  EXPECT_TRUE(path_exists(root + "/step-2/index.json"));
  EXPECT_EQ(latest_of(root), "step-1\n");
  expect_loads(first, root, 1);
  expect_loads(second, root + "/step-2", 2);

  // A temp dir from a killed process, with a partial shard, as another pid would leave it.
  make_dirs(root + "/step-3.tmp-999999");
  {
    FileHandle f = FileHandle::create(root + "/step-3.tmp-999999/shard-0.bin");
    f.write_all("partial", 7);
  }
  expect_loads(first, root, 1);

  // The next successful save publishes and removes every leftover.
  FullState third = make_full_state(tiny_config(), 3);
  save_as(third, root, 3, 4);
  EXPECT_EQ(latest_of(root), "step-3\n");
  EXPECT_TRUE(stale_temp_dirs(root).empty());
  for (const auto& e : list_dir(root))
    EXPECT_TRUE(e == "latest" || e == "step-1" || e == "step-2" || e == "step-3") << e;
  expect_loads(third, root, 3);
  EXPECT_EQ(list_dir(root + "/step-3"),
            (std::vector<std::string>{"index.json", "shard-0.bin", "shard-1.bin", "shard-2.bin",
                                      "shard-3.bin"}));
}

TEST(CheckpointAtomic, KeepLastPrunesOldSteps) {
  FullState full = make_full_state(tiny_config(), 4);
  std::string root = scratch_dir("keep_last");
  SaveOptions opt;
  opt.keep_last = 2;
  for (int64_t step : {5, 10, 15}) save_as(full, root, step, 2, false, opt);
  EXPECT_EQ(list_dir(root), (std::vector<std::string>{"latest", "step-10", "step-15"}));
  // Saving the same step again replaces it atomically.
  FullState other = make_full_state(tiny_config(), 9);
  save_as(other, root, 15, 2, false, opt);
  expect_loads(other, root, 15);
  EXPECT_EQ(list_dir(root), (std::vector<std::string>{"latest", "step-10", "step-15"}));
}

TEST(CheckpointAtomic, ResolveCheckpoint) {
  FullState full = make_full_state(tiny_config(), 4);
  std::string root = scratch_dir("resolve");
  EXPECT_THROW(resolve_checkpoint(root), IoError);
  save_as(full, root, 7, 1);
  EXPECT_EQ(resolve_checkpoint(root), root + "/step-7");
  EXPECT_EQ(resolve_checkpoint(root + "/step-7"), root + "/step-7");
  write_file_atomic(root + "/latest", "step-8\n");
  try {
    resolve_checkpoint(root);
    FAIL() << "no throw";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("points to step-8, which has no index.json"),
              std::string::npos) << e.what();
  }
}
