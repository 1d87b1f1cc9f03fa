// `shardlab inspect` and `shardlab export` as functions: what they print, their exit codes, and
// their usage errors.
#include <gtest/gtest.h>

#include <sstream>

#include "apps/shardlab/checkpoint_commands.hpp"
#include "core/checkpoint/safetensors.hpp"
#include "tests/checkpoint_fixture.hpp"

using namespace shardlab;
using namespace shardlab::ckpt_test;

namespace {
void expect_has(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "output:\n" << text << "\nwanted: " << part;
}
}  // namespace

TEST(CheckpointCommands, InspectPrintsWhatTheCheckpointHolds) {
  FullState full = make_full_state(tiny_config(), 41);
  std::string root = scratch_dir("cmd_inspect");
  save_as(full, root, 25, 3);
  std::ostringstream out, err;
  ASSERT_EQ(inspect_main({root}, out, err), 0) << err.str();
  std::string o = out.str();
  expect_has(o, "checkpoint  " + root + "/step-25\n");
  expect_has(o, "step        25 (optimizer step 25)\n");
  expect_has(o, "saved by    3 ranks, strategy full_shard\n");
  expect_has(o,
             "model       "
             "{\"max_seq_len\":8,\"n_embd\":12,\"n_head\":2,\"n_layer\":2,\"vocab_size\":32}\n");
  expect_has(o, "states      exp_avg exp_avg_sq params\n");
  expect_has(o, "params held in\n");
  expect_has(o, "tensors     28, 4272 parameters\n");
  // Unit 0 is 504 elements padded to 504 over 3 ranks: wte [0, 384) sits in shards 0..2 at
  // [0, 168) [168, 336) [336, 384).
  expect_has(o, "wte.weight");
  expect_has(o, "[32, 12]");
  expect_has(o, "shard-0.bin[0,168) shard-1.bin[168,336) shard-2.bin[336,384)");
  expect_has(o, "checksums   ok (");
  EXPECT_EQ(err.str(), "");
}

TEST(CheckpointCommands, ExportWritesSafetensorsAndReportsErrors) {
  FullState full = make_full_state(tiny_config(), 42);
  std::string root = scratch_dir("cmd_export");
  save_as(full, root, 2, 2);
  std::ostringstream out, err;
  std::string file = root + "/out.safetensors";
  ASSERT_EQ(export_main({root, file, "--dtype", "bf16"}, out, err), 0) << err.str();
  expect_has(out.str(), "exported 28 tensors (bf16) from " + root + "/step-2 to " + file);
  EXPECT_EQ(SafetensorsFile(file).entries()[0].dtype, "BF16");

  std::ostringstream o2, e2;
  EXPECT_EQ(export_main({root}, o2, e2), 2);
  expect_has(e2.str(), "usage: shardlab export CKPT_DIR OUT.safetensors [--dtype f32|bf16]");
  std::ostringstream o3, e3;
  EXPECT_EQ(export_main({root, file, "--dtype", "f16"}, o3, e3), 2);
  expect_has(e3.str(), "--dtype f16: use f32 or bf16");
  std::ostringstream o4, e4;
  EXPECT_EQ(export_main({root + "/nothing", file}, o4, e4), 1);
  expect_has(e4.str(), "nothing: not a checkpoint (no index.json and no latest file)");
  std::ostringstream o5, e5;
  EXPECT_EQ(inspect_main({}, o5, e5), 2);
  expect_has(e5.str(), "usage: shardlab inspect CKPT_DIR");
}
