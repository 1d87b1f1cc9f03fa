// The index's own checksum (index_crc32c, core/checkpoint/index.hpp): every chunk of every shard
// had a CRC, the index describing them had none, so an edit of "step" 4 -> 5 made inspect say
// "checksums ok" and a resume start at a step never trained, and edits of the optimizer step or
// the loader's position changed the losses silently.
#include <gtest/gtest.h>

#include <functional>
#include <sstream>
#include <string>

#include "apps/shardlab/checkpoint_commands.hpp"
#include "core/base/file_io.hpp"
#include "core/checkpoint/index.hpp"
#include "core/checkpoint/load.hpp"
#include "tests/checkpoint_fixture.hpp"

using namespace shardlab;
using namespace shardlab::ckpt_test;
using json = nlohmann::json;

namespace {

std::string fresh_checkpoint(const std::string& name) {
  return save_as(make_full_state(tiny_config(), 17), scratch_dir(name), 4, 2);
}

void edit_index(const std::string& dir, const std::function<void(json&)>& edit, int indent = -1) {
  json j = json::parse(read_text_file(dir + "/index.json"));
  edit(j);
  remove_all(dir + "/index.json");
  write_file_atomic(dir + "/index.json", j.dump(indent));
}

}  // namespace

TEST(CheckpointIndexChecksum, EveryIndexCarriesOneThatCoversItsContent) {
  const std::string dir = fresh_checkpoint("index_crc_fresh");
  const json j = json::parse(read_text_file(dir + "/index.json"));
  ASSERT_TRUE(j.contains(kIndexChecksumField));
  EXPECT_EQ(j.at("version"), kIndexVersion);
  EXPECT_EQ(j.at(kIndexChecksumField).get<std::string>(), crc_hex(index_checksum(j)));
  std::ostringstream out, err;
  EXPECT_EQ(inspect_command(dir, out, err), 0) << err.str();
  // Layout is not content: the same index re-indented still reads.
  edit_index(
      dir, [](json&) {}, 4);
  EXPECT_EQ(read_index(dir).meta.step, 4);
}

TEST(CheckpointIndexChecksum, AValueEditedWithinItsRangeIsCaught) {
  struct Edit {
    const char* what;
    std::function<void(json&)> edit;
  };
  const Edit edits[] = {
      {"step 4 -> 5", [](json& j) { j["step"] = 5; }},
      {"optimizer_step", [](json& j) { j["optimizer_step"] = 1; }},
      {"loader position", [](json& j) { j["loader"]["position"] = 12345; }},
      {"model_config", [](json& j) { j["model_config"]["n_head"] = 4; }},
      {"a chunk's crc32c",
       [](json& j) { j["tensors"][0]["states"]["params"][0]["crc32c"] = "00000000"; }},
      {"the checksum removed", [](json& j) { j.erase(kIndexChecksumField); }},
  };
  for (const Edit& e : edits) {
    const std::string dir = fresh_checkpoint("index_crc_edit");
    edit_index(dir, e.edit);
    std::ostringstream out, err;
    EXPECT_EQ(inspect_command(dir, out, err), 1) << e.what;
    EXPECT_EQ(out.str().find("checksums   ok"), std::string::npos) << e.what << ": " << out.str();
    EXPECT_NE(err.str().find("index.json: "), std::string::npos) << e.what;
    EXPECT_NE(err.str().find(kIndexChecksumField), std::string::npos)
        << e.what << ": " << err.str();
    FullState shape = make_full_state(tiny_config(), 0);
    RankHolding h = make_holding(shape, 0, 1, false, false);
    EXPECT_THROW(load_checkpoint(dir, h.shards), IoError) << e.what;
  }
}

TEST(CheckpointIndexChecksum, AFieldOutOfRangeIsStillNamedAsSuch) {
  // The checksum is checked last: an impossible value keeps its own message.
  const std::string dir = fresh_checkpoint("index_crc_range");
  edit_index(dir, [](json& j) { j["step"] = -7; });
  try {
    read_index(dir);
    FAIL() << "no throw";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("field 'step' = -7 is out of range"), std::string::npos)
        << e.what();
  }
  // An index of the version before the checksum says why it is not read.
  edit_index(dir, [](json& j) {
    j["step"] = 4;
    j["version"] = 1;
  });
  try {
    read_index(dir);
    FAIL() << "no throw";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("version 1 indexes have no checksum of their own"),
              std::string::npos)
        << e.what();
  }
}
