// Atomic saves: a save that fails part way (a rank dies after its shard, rank 0 dies before or
// after the rename, or a temp dir is left by a killed process) leaves the previous checkpoint
// loadable and `latest` pointing at it; the next save cleans the leftovers. Re-saving a step that
// exists keeps `latest` loadable at every stage too, with the atomic swap and without it.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <sstream>

#include "apps/shardlab/checkpoint_commands.hpp"

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
                  const std::string& stage, int rank, bool exchange = true) {
  SaveOptions opt;
  opt.exchange = exchange;
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

// A pid no process has: a child that has exited and been reaped.
long dead_pid() {
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return static_cast<long>(child);
}

void make_leftover_dir(const std::string& dir) {
  make_dirs(dir);
  FileHandle f = FileHandle::create(dir + "/shard-0.bin");
  f.write_all("partial", 7);
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
              std::string::npos)
        << e.what();
  }
}

// Re-saving step 4 (a run resumed from step 2 reaches step 4 again) with a crash at every stage:
// `latest` names step-4 throughout and must load, the old copy before the new one is in place
// and the new one after.
TEST(CheckpointAtomic, ResaveCrashAtEveryStageKeepsLatestLoadable) {
  FullState before = make_full_state(tiny_config(), 11);
  FullState after = make_full_state(tiny_config(), 12);
  struct Case {
    std::string stage;
    int rank;
    bool exchange;
    bool new_copy;
  };
  const std::vector<Case> cases = {
      {"shard_written", 2, true, false},  {"index_written", 0, true, false},
      {"renamed", 0, true, true},         {"latest_updated", 0, true, true},
      {"shard_written", 2, false, false}, {"index_written", 0, false, false},
      {"moved_aside", 0, false, false},   {"renamed", 0, false, true},
      {"latest_updated", 0, false, true}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.stage + (c.exchange ? " (swap)" : " (two renames)"));
    std::string root = scratch_dir("resave_" + c.stage + (c.exchange ? "_x" : "_r"));
    save_as(before, root, 2, 4);
    save_as(before, root, 4, 4);
    save_failing(after, root, 4, c.stage, c.rank, c.exchange);
    EXPECT_EQ(latest_of(root), "step-4\n");
    expect_loads(c.new_copy ? after : before, root, 4);
    // The next save repairs and cleans: only published steps and `latest` remain.
    save_as(after, root, 6, 4);
    EXPECT_EQ(list_dir(root), (std::vector<std::string>{"latest", "step-2", "step-4", "step-6"}));
    expect_loads(c.new_copy ? after : before, root + "/step-4", 4);
  }
}

// The two-rename fallback killed between its renames: step-4 is missing, latest names it, complete
// copies sit in step-4.old-<pid> and step-4.tmp-<pid>. Loading takes the verified old copy and
// says so; inspect lists what the leftovers are.
TEST(CheckpointAtomic, LatestNamingAMissingStepFallsBackToAVerifiedCopy) {
  FullState before = make_full_state(tiny_config(), 13);
  FullState after = make_full_state(tiny_config(), 14);
  std::string root = scratch_dir("resave_window");
  save_as(before, root, 2, 4);
  save_as(before, root, 4, 4);
  save_failing(after, root, 4, "moved_aside", 0, /*exchange=*/false);
  EXPECT_FALSE(path_exists(root + "/step-4"));
  std::string note;
  std::string dir = resolve_checkpoint(root, &note);
  EXPECT_NE(dir.find("/step-4.old-"), std::string::npos) << dir;
  EXPECT_NE(note.find("names step-4, which is missing; using step-4.old-"), std::string::npos)
      << note;
  expect_loads(before, root, 4);
  std::ostringstream out, err;
  EXPECT_EQ(inspect_command(root, out, err), 0) << err.str();
  EXPECT_NE(out.str().find("note        "), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("leftover    step-4.tmp-"), std::string::npos) << out.str();

  // A damaged old copy is skipped for the other complete copy (the new save's).
  std::string old_copy = dir;
  std::string shard = old_copy + "/shard-1.bin";
  std::string bytes = read_text_file(shard);
  bytes[bytes.size() / 2] ^= 0x40;
  {
    FileHandle f = FileHandle::create(shard);
    f.write_all(bytes.data(), static_cast<int64_t>(bytes.size()));
  }
  dir = resolve_checkpoint(root, &note);
  EXPECT_NE(dir.find("/step-4.tmp-"), std::string::npos) << dir;
  expect_loads(after, root, 4);

  // Without usable copies of step 4, the newest complete step.
  remove_all(dir);
  dir = resolve_checkpoint(root, &note);
  EXPECT_EQ(dir, root + "/step-2");
  EXPECT_NE(note.find("step-2, the newest complete checkpoint"), std::string::npos) << note;
}

// Leftovers of failed saves are removed when the next save starts, not only after a success,
// except those of a process that still runs (its save may be in progress).
TEST(CheckpointAtomic, StaleLeftoversGoAtTheStartOfTheNextSave) {
  FullState full = make_full_state(tiny_config(), 15);
  std::string root = scratch_dir("stale");
  save_as(full, root, 1, 2);
  const std::string dead = std::to_string(dead_pid());
  make_leftover_dir(root + "/step-3.tmp-" + dead);
  make_leftover_dir(root + "/step-2.old-" + dead);
  write_file_atomic(root + "/step-3.pending", "step-3.tmp-" + dead);
  write_file_atomic(root + "/latest.tmp-" + dead, "step-");
  make_leftover_dir(root + "/step-5.tmp-1");  // pid 1 always runs

  save_failing(full, root, 2, "shard_written", 2);
  std::vector<std::string> names = list_dir(root);
  for (const std::string gone : {"step-3.tmp-", "step-2.old-", "step-3.pending", "latest.tmp-"})
    for (const auto& e : names) EXPECT_NE(e.rfind(gone, 0), 0u) << e << " was not removed";
  EXPECT_TRUE(path_exists(root + "/step-5.tmp-1"));
  EXPECT_EQ(latest_of(root), "step-1\n");

  save_as(full, root, 2, 2);
  EXPECT_EQ(list_dir(root),
            (std::vector<std::string>{"latest", "step-1", "step-2", "step-5.tmp-1"}));
  std::ostringstream out, err;
  EXPECT_EQ(inspect_command(root, out, err), 0) << err.str();
  EXPECT_NE(out.str().find("leftover    step-5.tmp-1: an unfinished save of step 5 that never "
                           "became visible, by pid 1 (running)"),
            std::string::npos)
      << out.str();
}

// A `latest` that holds anything but a step name is named as such, with a short escaped prefix.
TEST(CheckpointAtomic, GarbageLatestIsNotEchoed) {
  FullState full = make_full_state(tiny_config(), 4);
  std::string root = scratch_dir("latest_garbage");
  save_as(full, root, 7, 1);
  std::string garbage;
  for (int i = 0; i < 300; ++i) garbage += static_cast<char>((i * 97 + 13) & 0xff);
  write_file_atomic(root + "/latest", garbage);
  try {
    resolve_checkpoint(root);
    FAIL() << "no throw";
  } catch (const IoError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("latest: not a valid step name (300 bytes starting \""), std::string::npos)
        << msg;
    EXPECT_LT(msg.size(), 300u) << msg;
    for (char ch : msg) EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << msg;
  }
  write_file_atomic(root + "/latest", "step-7/../../etc\n");
  EXPECT_THROW(resolve_checkpoint(root), IoError);
}
