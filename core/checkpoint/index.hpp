// index.json: the one file that describes a checkpoint by tensors, not by ranks. For every tensor
// and every saved state it lists which shard file holds which element ranges at which byte
// offsets, with a CRC-32C per range, so any number of ranks can read back any slice.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/json_read.hpp"  // parse_json_strict, which the readers of checkpoints use
#include "core/checkpoint/ckpt_shard.hpp"

namespace shardlab {

inline constexpr const char* kIndexFormat = "shardlab-checkpoint";
// Version 2: the index carries a checksum of its own (kIndexChecksumField). Version 1 had none,
// so an edited step, optimizer step or loader position passed every check.
inline constexpr int kIndexVersion = 2;
inline constexpr const char* kIndexFile = "index.json";
// CRC-32C of the index itself: of the compact JSON text (keys sorted, as nlohmann::json dumps
// them) of every other field. Reformatting the file keeps it valid; changing a value does not.
inline constexpr const char* kIndexChecksumField = "index_crc32c";

// Elements [begin, begin + count) of one tensor's state, stored at byte `offset` of `file`.
struct CkptChunk {
  std::string file;
  int64_t begin = 0;
  int64_t count = 0;
  int64_t offset = 0;
  uint32_t crc32c = 0;  // of the count * 4 stored bytes
};

struct CkptIndexTensor {
  std::string name;
  int unit = 0;
  int64_t offset = 0;  // in the unit's unpadded flat buffer at save time (informational)
  std::vector<int64_t> shape;
  int64_t numel = 0;
  // state -> chunks sorted by begin, tiling [0, numel) exactly.
  std::map<std::string, std::vector<CkptChunk>> chunks;
};

struct CkptFileEntry {
  std::string name;  // "shard-<rank>.bin", relative to the checkpoint directory
  int rank = 0;
  int64_t bytes = 0;
};

struct CheckpointIndex {
  CheckpointMeta meta;
  std::vector<std::string> states;  // e.g. params, exp_avg, exp_avg_sq
  std::vector<CkptFileEntry> files;
  std::vector<CkptIndexTensor> tensors;  // in unit order, then layout order

  const CkptIndexTensor* find(const std::string& name) const;
  const CkptFileEntry* find_file(const std::string& name) const;
};

// The index as JSON, with its checksum (kIndexChecksumField) last.
nlohmann::ordered_json index_to_json(const CheckpointIndex& index);
// The checksum an index's JSON `j` should carry: over every field but kIndexChecksumField.
uint32_t index_checksum(const nlohmann::json& j);
// Parses and validates (types, shapes, chunk tiling, ranges inside the files); IoError naming
// `path` and the field on any problem. Integers must be JSON integers in range (step >= 0, ...);
// `states` must be non-empty and every tensor must hold chunks for exactly those states; the
// chunks of each file must tile its `bytes` exactly, so every stored byte is under a CRC.
CheckpointIndex index_from_json(const nlohmann::json& j, const std::string& path);
// index_from_json of checkpoint_dir/index.json, whose checksum must then match (checked last, so
// that a field out of range is named as such).
CheckpointIndex read_index(const std::string& checkpoint_dir);

// ---- per-rank manifests, merged by rank 0 into the index during a save

// What one rank wrote: its layout (so rank 0 learns every unit even if it writes nothing), its
// chunks, its file size and its opaque rank state.
struct RankManifest {
  int rank = 0;
  CkptFileEntry file;
  std::vector<CkptIndexTensor> tensors;  // chunks hold this rank's ranges only
  std::vector<std::string> states;
  nlohmann::json rank_state;
};

nlohmann::json manifest_to_json(const RankManifest& m);
RankManifest manifest_from_json(const nlohmann::json& j, const std::string& path);
// Checks that ranks agree on every tensor's shape and states and that, per state, the chunks of
// all ranks tile each tensor exactly once; InvalidArgument naming the tensor, state and ranks.
CheckpointIndex merge_manifests(const std::vector<RankManifest>& manifests,
                                const CheckpointMeta& meta);

std::string format_shape(const std::vector<int64_t>& shape);  // "[768, 2304]"
std::string crc_hex(uint32_t crc);                            // "e3069283"

}  // namespace shardlab
