// Damaged and mismatched checkpoints fail with IoError/InvalidArgument naming the file and the
// problem: a flipped byte (checksum), a truncated shard or index, another model config, another
// tensor shape, a tensor or state that is not there.
#include <gtest/gtest.h>

#include <string>

#include "apps/shardlab/checkpoint_commands.hpp"
#include "core/base/file_io.hpp"
#include "core/checkpoint/crc32c.hpp"
#include "core/checkpoint/load.hpp"
#include "core/checkpoint/save.hpp"
#include "tests/checkpoint_fixture.hpp"

using namespace shardlab;
using namespace shardlab::ckpt_test;

namespace {

// Loads `dir` on one rank into the layouts of `cfg`; returns the error text, "" when it loaded.
template <typename E>
std::string load_error(const std::string& dir, const GPTConfig& cfg, bool check_config = true) {
  FullState shape_only = make_full_state(cfg, 0);
  RankHolding h = make_holding(shape_only, 0, 1, false, false);
  LoadOptions opt;
  if (check_config) opt.expect_model_config = gpt_config_json(cfg);
  try {
    load_checkpoint(dir, h.shards, opt);
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

void expect_has(const std::string& msg, const std::string& part) {
  EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg << "\nwanted: " << part;
}

std::string fresh_checkpoint(const std::string& name, uint64_t seed = 21) {
  FullState full = make_full_state(tiny_config(), seed);
  return save_as(full, scratch_dir(name), 6, 4);
}

void overwrite(const std::string& path, const std::string& text) {
  FileHandle f = FileHandle::create(path);
  f.write_all(text.data(), static_cast<int64_t>(text.size()));
}

}  // namespace

TEST(CheckpointCrc32c, KnownValuesAndSlicingAgreesWithBitwise) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the standard check value (RFC 3720)
  EXPECT_EQ(crc32c_extend_portable(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);  // RFC 3720 B.4: 32 bytes of zeros
  std::string ones(32, '\xff');
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);  // RFC 3720 B.4: 32 bytes of 0xff
  // Against the one-bit-at-a-time definition, on every length and alignment up to 40 bytes.
  std::string data;
  for (int i = 0; i < 64; ++i) data += static_cast<char>(i * 37 + 11);
  for (size_t start = 0; start < 8; ++start)
    for (size_t n = 0; n <= 40; ++n) {
      uint32_t c = 0xffffffffu;
      for (size_t i = start; i < start + n; ++i) {
        c ^= static_cast<unsigned char>(data[i]);
        for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      }
      ASSERT_EQ(crc32c(data.data() + start, n), ~c) << "start " << start << " n " << n;
      ASSERT_EQ(crc32c_extend_portable(0, data.data() + start, n), ~c) << "start " << start;
      ASSERT_EQ(
          crc32c_extend(crc32c(data.data() + start, n / 2), data.data() + start + n / 2, n - n / 2),
          ~c);
    }
}

TEST(CheckpointCorrupt, FlippedByteIsAChecksumErrorNamingTheFile) {
  std::string dir = fresh_checkpoint("flipped");
  std::string path = dir + "/shard-2.bin";
  std::string bytes = read_text_file(path);
  bytes[bytes.size() / 2] ^= 0x10;
  overwrite(path, bytes);
  std::string msg = load_error<IoError>(dir, tiny_config());
  expect_has(msg, "shard-2.bin: checksum mismatch in bytes [");
  expect_has(msg, "(corrupted)");
  // inspect reports it and fails.
  std::ostringstream out, err;
  EXPECT_EQ(inspect_command(dir, out, err), 1);
  expect_has(out.str(), "checksums   FAILED (1 problems)");
  expect_has(err.str(), "shard-2.bin: checksum mismatch");
}

TEST(CheckpointCorrupt, TruncatedShardAndIndexAreNamed) {
  std::string dir = fresh_checkpoint("truncated");
  std::string path = dir + "/shard-1.bin";
  std::string bytes = read_text_file(path);
  overwrite(path, bytes.substr(0, bytes.size() - 100));
  std::string msg = load_error<IoError>(dir, tiny_config());
  expect_has(msg, "shard-1.bin: " + std::to_string(bytes.size() - 100) +
                      " bytes, but index.json says " + std::to_string(bytes.size()) +
                      " (truncated)");

  std::string index = read_text_file(dir + "/index.json");
  overwrite(dir + "/index.json", index.substr(0, index.size() / 2));
  msg = load_error<IoError>(dir, tiny_config());
  expect_has(msg, "index.json: not valid JSON (truncated?)");

  overwrite(dir + "/index.json", "{\"format\": \"something-else\"}");
  expect_has(load_error<IoError>(dir, tiny_config()), "not a shardlab checkpoint index");
}

TEST(CheckpointCorrupt, EditedIndexIsCaught) {
  std::string dir = fresh_checkpoint("edited");
  std::string index = read_text_file(dir + "/index.json");
  // Make one chunk claim more elements than its neighbour leaves: the tiling check fails.
  nlohmann::json j = nlohmann::json::parse(index);
  j["tensors"][0]["states"]["params"][0]["count"] =
      j["tensors"][0]["states"]["params"][0]["count"].get<int64_t>() + 1;
  overwrite(dir + "/index.json", j.dump());
  std::string msg = load_error<IoError>(dir, tiny_config());
  expect_has(msg, "index.json: tensor wte.weight state params: elements [");
  expect_has(msg, "stored twice");
}

TEST(CheckpointCorrupt, OtherConfigOrShapesAreRejected) {
  std::string dir = fresh_checkpoint("mismatch");
  GPTConfig deeper = tiny_config();
  deeper.n_layer = 3;
  std::string msg = load_error<InvalidArgument>(dir, deeper);
  expect_has(msg,
             "index.json: model config differs from this run: model_config.n_layer: checkpoint 2, "
             "this run 3");

  // Without the config check, the layouts themselves disagree.
  GPTConfig wider = tiny_config();
  wider.n_embd = 16;
  msg = load_error<InvalidArgument>(dir, wider, /*check_config=*/false);
  expect_has(
      msg,
      "index.json: tensor wte.weight has shape [32, 12] in the checkpoint, [32, 16] in this model");
  msg = load_error<InvalidArgument>(dir, deeper, /*check_config=*/false);
  expect_has(msg, "index.json: tensor h.2.ln_1.weight (unit 3) is not in the checkpoint");
  GPTConfig shallower = tiny_config();
  shallower.n_layer = 1;
  msg = load_error<InvalidArgument>(dir, shallower, /*check_config=*/false);
  expect_has(msg, "index.json: checkpoint tensor h.1.ln_1.weight [12] is not in this model");
}

TEST(CheckpointCorrupt, UnknownStateIsRejected) {
  std::string dir = fresh_checkpoint("state");
  FullState full = make_full_state(tiny_config(), 0);
  RankHolding h = make_holding(full, 0, 1, false, false);
  std::vector<float> extra(static_cast<size_t>(h.shards[0].end - h.shards[0].begin));
  h.shards[0].states["momentum"] = extra.data();
  try {
    load_checkpoint(dir, h.shards);
    FAIL() << "no throw";
  } catch (const InvalidArgument& e) {
    expect_has(e.what(),
               "index.json: state momentum was not saved (saved: "
               "[\"exp_avg\",\"exp_avg_sq\",\"params\"])");
  }
}
