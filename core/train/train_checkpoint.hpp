// Checkpoints in training: the FSDP engine's shards through core/checkpoint, plus what the loop
// itself needs to resume exactly (the step, the data loader's position, the configuration that
// gives a position its meaning). docs/checkpoints.md "From the command line" shows the options.
//
// Every function taking an Engine is collective (set_shard all-gathers for the strategies that
// keep full parameters): every rank calls it, in the same order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/checkpoint/ckpt_shard.hpp"
#include "core/fsdp/engine.hpp"

namespace shardlab {

class Communicator;
class DataLoader;
struct TrainConfig;

// Host copies of a rank's shards (Engine::get_shard) and their description for the checkpoint
// layer; ckpt[u].states point into host[u].states, so the struct must not be copied.
struct EngineShards {
  std::vector<UnitShard> host;
  std::vector<CkptShard> ckpt;
  EngineShards() = default;
  EngineShards(const EngineShards&) = delete;
  EngineShards& operator=(const EngineShards&) = delete;
};

// Fills `out` from the engine: every state it keeps, or only "params" when params_only.
void engine_shards(const Engine& engine, EngineShards& out, bool params_only = false);

// The loop's position as a checkpoint stores it (meta.loader): the global batches served and the
// settings that define which tokens a position means (batch, seq, seed, data).
nlohmann::json loader_state_json(const DataLoader& loader, const TrainConfig& cfg);
// The position to continue from; InvalidArgument naming the option when the checkpoint's batch,
// seq, seed or data (a corpus of corpus_tokens tokens) differ from this run's: the same position
// would mean other tokens. `where` names the checkpoint in messages.
int64_t loader_position_from(const nlohmann::json& loader, const TrainConfig& cfg,
                             int64_t corpus_tokens, const std::string& where);

// Collective: writes <root>/step-<step>/ from this rank's shards and updates <root>/latest.
// Returns the checkpoint directory.
std::string save_train_checkpoint(const Engine& engine, Communicator& comm, const std::string& root,
                                  int64_t step, const nlohmann::json& loader,
                                  const nlohmann::json& extra, int keep_last);

// Collective: loads the checkpoint at `path` (a step-<k> directory or a root with `latest`) into
// the engine, resharding to this run's strategy and world size, and restores Adam's step count.
// Returns the checkpoint's meta (meta.step, meta.loader, ...).
CheckpointMeta load_train_checkpoint(Engine& engine, const std::string& path);

// Collective: the engine's parameters from a safetensors file (an export, or a Hugging Face GPT-2
// file of the same shape); optimizer state is zeroed and the step count is 0.
void init_engine_from_safetensors(Engine& engine, const std::string& path);

// Checks before any rank starts that a checkpoint can resume this run: it exists, its index is
// valid, its model config and loader settings match this run's (on a corpus of corpus_tokens
// tokens), and its step is not past cfg.steps. Returns the resolved step directory; when `latest`
// named a step an interrupted save left missing, that is a verified copy and `note` says so.
std::string check_resume(const std::string& path, const TrainConfig& cfg, int64_t corpus_tokens,
                         std::string* note = nullptr);

}  // namespace shardlab
