// Checkpoint load with resharding: each rank reads, for every tensor of every unit it holds, the
// intersection of its range with the tensor from whichever shard files hold it. A checkpoint
// written by N ranks under one strategy loads on M ranks under any other, with any padding.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/file_io.hpp"
#include "core/checkpoint/ckpt_shard.hpp"
#include "core/checkpoint/index.hpp"

namespace shardlab {

struct LoadOptions {
  // When not null, the checkpoint's model_config must equal it (InvalidArgument names the field).
  nlohmann::json expect_model_config;
  bool verify_checksums = true;
  // Every checkpoint tensor must appear in the shards' layouts (true), or extra ones are skipped.
  bool require_all_tensors = true;
};

// The checkpoint directory `path` names: `path` itself when it holds index.json, else the one its
// `latest` file points to (which must hold "step-<k>"). When that step is missing or incomplete
// but an interrupted save left a complete copy of it (step-<k>.old-<pid>, step-<k>.tmp-<pid>),
// returns that copy once its index and checksums verify, or else the newest complete step, and
// says so in `note` (on stderr when `note` is null). IoError when there is nothing to load.
std::string resolve_checkpoint(const std::string& path, std::string* note = nullptr);

// Leftovers of interrupted saves in a checkpoint root: step-<k>.tmp-<pid>/ (a save that never
// became visible), step-<k>.old-<pid>/ (a replaced copy), step-<k>.pending, latest.tmp-<pid>.
struct CkptLeftover {
  std::string name;       // entry in the root
  std::string kind;       // "tmp", "old" or "pending"
  int64_t step = -1;      // the step it belongs to (-1: latest.tmp-<pid>)
  long pid = -1;          // the saving process (-1: unknown)
  bool complete = false;  // a directory holding index.json
};
std::vector<CkptLeftover> checkpoint_leftovers(const std::string& root);
// Whether the process that left it still runs (and is not this one): its save may be in progress.
bool leftover_owner_running(const CkptLeftover& leftover);
// "step-4.tmp-123: an unfinished save of step 4 ..., by pid 123 (not running); ..." for inspect.
std::string describe_leftover(const CkptLeftover& leftover);
// "" when `dir` holds a checkpoint (of `step`, unless -1) whose index validates and whose every
// chunk verifies; else the first problem.
std::string complete_checkpoint_problem(const std::string& dir, int64_t step = -1);
// A verified complete copy of `name` (step-<k>) among root's leftovers, else the newest complete
// step when copies exist but none is whole; "" when there is none. `why` says which and why.
std::string recover_missing_step(const std::string& root, const std::string& name,
                                 std::string* why);

// Fills every state of every shard ([begin, end) of its flat buffer; padding and gaps become 0)
// and returns the metadata. The shards' states must be among the saved ones (a subset is fine:
// loading only "params" from a full checkpoint works).
CheckpointMeta load_checkpoint(const std::string& path, const std::vector<CkptShard>& shards,
                               const LoadOptions& options = {});

// Random access to a checkpoint's tensors: opens shard files lazily (checking their sizes against
// the index) and verifies each chunk's CRC-32C as it reads it.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& path, bool verify_checksums = true);
  const CheckpointIndex& index() const { return index_; }
  const std::string& dir() const { return dir_; }
  // Elements [begin, begin + count) of `tensor`'s `state` into out.
  void read(const CkptIndexTensor& tensor, const std::string& state, int64_t begin, int64_t count,
            float* out);
  // The whole of `tensor`'s `state`, after checking the sizes of the files it is read from.
  std::vector<float> read_tensor(const CkptIndexTensor& tensor, const std::string& state);
  // Reads every chunk of every state; returns one line per problem (empty: all checksums match).
  std::vector<std::string> verify_all();

 private:
  const FileHandle& file(const std::string& name);
  void check_files(const CkptIndexTensor& tensor, const std::string& state);
  void read_checked(const CkptIndexTensor& tensor, const std::string& state, int64_t begin,
                    int64_t count, float* out, bool verify);
  std::string dir_;
  CheckpointIndex index_;
  bool verify_;
  std::map<std::string, FileHandle> files_;
};

// "model_config.n_layer: checkpoint 2, this run 3" for the first difference; "" when equal.
std::string config_difference(const nlohmann::json& saved, const nlohmann::json& current,
                              const std::string& where = "model_config");

}  // namespace shardlab
