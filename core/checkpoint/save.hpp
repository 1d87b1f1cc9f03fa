// Sharded, atomic checkpoint save. Every rank writes the element ranges it holds into its own
// shard-<rank>.bin; rank 0 merges the ranks' manifests into index.json. The checkpoint becomes
// visible only once complete: written under <root>/step-<k>.tmp-<pid>/, fsynced, renamed to
// <root>/step-<k>/, then <root>/latest is replaced atomically. See docs/checkpoints.md.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/checkpoint/ckpt_shard.hpp"

namespace shardlab {

class Communicator;

struct SaveOptions {
  int keep_last = 0;  // after a save, keep only this many newest step-* directories (0: all)
  bool fsync = true;  // fsync files and directories (off only for throwaway scratch)
  // Called on each rank as the save passes a stage: "shard_written" (every rank, its files are
  // durable), then on rank 0 "index_written", "moved_aside" (only when replacing an existing
  // step without an atomic swap), "renamed", "latest_updated". Throwing aborts the save at that
  // point, exactly as a crash would leave it (tests use it to inject failures).
  std::function<void(const std::string& stage, int rank)> on_stage;
  // Replace an existing step-<k> with one atomic swap (renameat2 RENAME_EXCHANGE) where the file
  // system supports it; false forces the two-rename fallback (tests of its crash window).
  bool exchange = true;
};

// Collective over sync.world ranks: every rank calls it with its own shards and the same meta.
// `rank_state` is this rank's opaque JSON (index.json keeps one per rank). meta.world_size is taken
// from sync.world. Returns the final directory <root>/step-<meta.step>.
std::string save_checkpoint(const std::string& root, const std::vector<CkptShard>& shards,
                            const CheckpointMeta& meta, const CkptSync& sync,
                            const nlohmann::json& rank_state = nlohmann::json::object(),
                            const SaveOptions& options = {});

// A CkptSync whose barrier is comm.barrier() (every backend implements it).
CkptSync ckpt_sync(Communicator& comm);

// <root>/step-<k>.tmp-* directories left by interrupted saves (they are never loaded).
std::vector<std::string> stale_temp_dirs(const std::string& root);

}  // namespace shardlab
