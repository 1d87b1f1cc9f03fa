// Edited indexes and safetensors headers that used to pass: an index whose states or chunks
// leave stored bytes unverified, sizes that overflow 64 bits, fractional, oversized or negative
// integers, and repeated keys. Each must fail with IoError naming the file and the field.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "apps/shardlab/checkpoint_commands.hpp"
#include "core/base/file_io.hpp"
#include "core/checkpoint/load.hpp"
#include "core/checkpoint/safetensors.hpp"
#include "core/checkpoint/save.hpp"
#include "tests/checkpoint_fixture.hpp"

using namespace shardlab;
using namespace shardlab::ckpt_test;
using json = nlohmann::json;

namespace {

void expect_has(const std::string& msg, const std::string& part) {
  EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg << "\nwanted: " << part;
}

void overwrite(const std::string& path, const std::string& text) {
  FileHandle f = FileHandle::create(path);
  f.write_all(text.data(), static_cast<int64_t>(text.size()));
}

std::string fresh_checkpoint(const std::string& name) {
  FullState full = make_full_state(tiny_config(), 31);
  return save_as(full, scratch_dir(name), 6, 4);
}

json read_json(const std::string& path) { return json::parse(read_text_file(path)); }

// What each entry point says about `dir`: load (one rank), inspect (exit code and stderr) and
// export. Every one must fail with an Error naming the file; none may crash.
struct Outcome {
  std::string load, inspect_err, export_err;
  int inspect_rc = 0, export_rc = 0;
};

Outcome try_all(const std::string& dir) {
  Outcome o;
  FullState shape_only = make_full_state(tiny_config(), 0);
  RankHolding h = make_holding(shape_only, 0, 1, false, false);
  try {
    load_checkpoint(dir, h.shards);
  } catch (const IoError& e) {
    o.load = e.what();
  }
  std::ostringstream out, err, eout, eerr;
  o.inspect_rc = inspect_command(dir, out, err);
  o.inspect_err = err.str();
  o.export_rc = export_command(dir, dir + "/../out.safetensors", "f32", eout, eerr);
  o.export_err = eerr.str();
  return o;
}

void expect_all_fail(const std::string& dir, const std::string& part) {
  Outcome o = try_all(dir);
  expect_has(o.load, part);
  EXPECT_EQ(o.inspect_rc, 1);
  expect_has(o.inspect_err, part);
  EXPECT_EQ(o.export_rc, 1);
  expect_has(o.export_err, part);
}

void flip_a_byte(const std::string& path) {
  std::string bytes = read_text_file(path);
  bytes[bytes.size() / 3] ^= 0x08;
  overwrite(path, bytes);
}

}  // namespace

// "states": [] made every reader skip every chunk: inspect said "checksums ok" over corrupt shards.
TEST(CheckpointIntegrity, EmptyStatesListIsRejected) {
  std::string dir = fresh_checkpoint("empty_states");
  flip_a_byte(dir + "/shard-0.bin");
  json j = read_json(dir + "/index.json");
  j["states"] = json::array();
  overwrite(dir + "/index.json", j.dump());
  expect_all_fail(dir, "index.json: field 'states' must be a non-empty array");
}

// Chunks under a state the index does not list are never verified: rejected.
TEST(CheckpointIntegrity, ChunksOfAnUnlistedStateAreRejected) {
  std::string dir = fresh_checkpoint("unlisted_state");
  json j = read_json(dir + "/index.json");
  j["states"] = {"params"};
  overwrite(dir + "/index.json", j.dump());
  expect_all_fail(dir,
                  "index.json: tensor wte.weight has chunks for state exp_avg, which field "
                  "'states' does not list");
}

// Bytes in a shard file that no chunk claims are under no checksum: a longer file whose `bytes`
// was edited to match verified as ok.
TEST(CheckpointIntegrity, BytesNoChunkCoversAreRejected) {
  std::string dir = fresh_checkpoint("uncovered");
  std::string bytes = read_text_file(dir + "/shard-3.bin");
  overwrite(dir + "/shard-3.bin", bytes + std::string(100, 'x'));
  json j = read_json(dir + "/index.json");
  for (auto& f : j["files"])
    if (f["name"] == "shard-3.bin") f["bytes"] = bytes.size() + 100;
  overwrite(dir + "/index.json", j.dump());
  expect_all_fail(dir, "index.json: file shard-3.bin: bytes [" + std::to_string(bytes.size()) +
                           ", " + std::to_string(bytes.size() + 100) +
                           ") are covered by no chunk's checksum");

  // Two chunks claiming the same bytes.
  dir = fresh_checkpoint("overlap");
  j = read_json(dir + "/index.json");
  j["tensors"][0]["states"]["exp_avg_sq"][0]["offset"] =
      j["tensors"][0]["states"]["exp_avg"][0]["offset"];
  overwrite(dir + "/index.json", j.dump());
  expect_all_fail(dir, "belong to two chunks");
}

// A count of 2^62 made offset + count * 4 wrap to 0 and pass the bounds check; readers then died
// in std::vector's allocation without naming the file.
TEST(CheckpointIntegrity, HugeCountsDoNotOverflow) {
  std::string dir = fresh_checkpoint("huge_count");
  json j = read_json(dir + "/index.json");
  const int64_t huge = int64_t(1) << 62;
  json& t = j["tensors"][0];
  t["shape"] = {int64_t(1) << 31, int64_t(1) << 31};
  t["numel"] = huge;
  for (auto& [state, chunks] : t["states"].items())
    chunks = json::array({{{"file", "shard-0.bin"},
                           {"begin", 0},
                           {"count", huge},
                           {"offset", 0},
                           {"crc32c", "00000000"}}});
  overwrite(dir + "/index.json", j.dump());
  expect_all_fail(dir, "index.json: tensor wte.weight state exp_avg: chunk at byte 0 with " +
                           std::to_string(huge) + " elements lies outside shard-0.bin");

  // A shape whose product overflows.
  j["tensors"][0]["shape"] = {int64_t(1) << 40, int64_t(1) << 40};
  overwrite(dir + "/index.json", j.dump());
  expect_all_fail(dir,
                  "index.json: tensor wte.weight: shape [1099511627776, 1099511627776] does "
                  "not hold numel");
}

// Integers are JSON integers in range: 1.5 is not truncated to 1, -7 is not a step.
TEST(CheckpointIntegrity, IndexIntegersAreStrict) {
  struct Case {
    std::string what;
    std::function<void(json&)> edit;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"negative step", [](json& j) { j["step"] = -7; },
       "index.json: field 'step' = -7 is out of range [0, "},
      {"fractional step", [](json& j) { j["step"] = 6.5; },
       "index.json: field 'step' must be an integer, not 6.5"},
      {"oversized optimizer_step", [](json& j) { j["optimizer_step"] = 1e30; },
       "index.json: field 'optimizer_step' must be an integer, not 1e+30"},
      {"fractional count", [](json& j) { j["tensors"][0]["states"]["params"][0]["count"] = 96.5; },
       "index.json: tensor wte.weight state params chunk 0: field 'count' must be an integer"},
      {"fractional shape", [](json& j) { j["tensors"][1]["shape"][0] = 8.0; },
       "field 'shape[0]' must be an integer, not 8.0"},
      {"negative world_size", [](json& j) { j["world_size"] = -4; },
       "index.json: field 'world_size' = -4 is out of range [1, "},
      {"string bytes", [](json& j) { j["files"][1]["bytes"] = "12"; },
       "index.json: file shard-1.bin: field 'bytes' must be an integer"},
      {"crc with a sign",
       [](json& j) { j["tensors"][0]["states"]["params"][0]["crc32c"] = "+1234567"; },
       "crc32c \"+1234567\" is not 8 hex digits"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    std::string dir = fresh_checkpoint("strict");
    json j = read_json(dir + "/index.json");
    c.edit(j);
    overwrite(dir + "/index.json", j.dump());
    expect_all_fail(dir, c.want);
  }
  // A repeated key would be read as its last value; it is damage.
  std::string dir = fresh_checkpoint("dup_key");
  std::string text = read_text_file(dir + "/index.json");
  text.insert(1, "\"step\": 9,");
  overwrite(dir + "/index.json", text);
  expect_all_fail(dir, "index.json: key 'step' appears twice in one object");
}

namespace {

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file with this header text and `data` bytes after it.
std::string write_st(const std::string& name, const std::string& header, size_t data) {
  std::string path = scratch_dir("st_strict_" + name) + "/" + name + ".safetensors";
  overwrite(path, le64(header.size()) + header + std::string(data, '\0'));
  return path;
}

std::string st_error(const std::string& path) {
  try {
    SafetensorsFile f(path);
  } catch (const IoError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(CheckpointIntegrity, SafetensorsHeaderIsStrict) {
  // The well-formed base case loads.
  EXPECT_EQ(
      st_error(write_st("ok", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8)), "");
  expect_has(st_error(write_st("dup",
                               R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                               8)),
             "dup.safetensors: header: key 'a' appears twice in one object");
  expect_has(st_error(write_st("frac",
                               R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0.5,8.5]}})", 9)),
             "frac.safetensors: tensor a: field 'data_offsets[0]' must be an integer, not 0.5");
  expect_has(st_error(write_st("fshape",
                               R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", 8)),
             "fshape.safetensors: tensor a: field 'shape[0]' must be an integer, not 2.0");
  expect_has(
      st_error(write_st("negoff", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", 8)),
      "negoff.safetensors: tensor a: field 'data_offsets[0]' = -8 is out of range");
  // A shape whose byte size overflows 64 bits (it used to wrap around to match the offsets).
  expect_has(
      st_error(write_st(
          "big", R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})",
          8)),
      "big.safetensors: tensor a: shape [4611686018427387904, 4] is larger than 2^63 bytes");
}
