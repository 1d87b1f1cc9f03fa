// Checkpoints in training: engine shards <-> core/checkpoint, and the loop's own state.
#include "core/train/train_checkpoint.hpp"

#include <algorithm>

#include "core/base/error.hpp"
#include "core/base/json_get.hpp"
#include "core/checkpoint/gpt_checkpoint.hpp"
#include "core/checkpoint/hf_safetensors.hpp"
#include "core/checkpoint/index.hpp"
#include "core/checkpoint/load.hpp"
#include "core/checkpoint/save.hpp"
#include "core/comm/communicator.hpp"
#include "core/train/data_loader.hpp"
#include "core/train/trainer.hpp"

namespace shardlab {

using nlohmann::json;

namespace {

// The checkpoint layer's name (core/checkpoint/ckpt_shard.hpp) for a state the engine names by
// itself and its optimizer (UnitShard): the names of PyTorch's optimizer state_dict.
std::string ckpt_state_name(const std::string& engine_name) {
  if (engine_name == UnitShard::kParams) return kStateParams;
  if (engine_name == "m") return kStateExpAvg;
  if (engine_name == "v") return kStateExpAvgSq;
  if (engine_name == "momentum") return "momentum_buffer";
  return engine_name;
}

}  // namespace

void engine_shards(const Engine& engine, EngineShards& out, bool params_only) {
  out.host.clear();
  out.ckpt.clear();
  out.host.reserve(static_cast<size_t>(engine.num_units()));
  for (int u = 0; u < engine.num_units(); ++u) out.host.push_back(engine.get_shard(u));
  for (int u = 0; u < engine.num_units(); ++u) {
    const FlatLayout& l = engine.layout(u);
    UnitShard& h = out.host[static_cast<size_t>(u)];
    CkptShard s;
    s.unit = u;
    s.tensors = to_ckpt_tensors(l.entries());
    s.padded_numel = l.padded_numel();
    s.begin = h.range.offset;
    s.end = h.range.end();
    for (auto& [name, v] : h.states)
      if (!params_only || name == UnitShard::kParams) s.states[ckpt_state_name(name)] = v.data();
    out.ckpt.push_back(std::move(s));
  }
}

// ---- the loader's position ----------------------------------------------------------------------

namespace {

json data_identity(const TrainConfig& cfg, int64_t corpus_tokens) {
  json d = {{"batch", cfg.batch},
            {"seq", cfg.seq},
            {"seed", cfg.engine.seed},
            {"corpus_tokens", corpus_tokens}};
  if (cfg.data == "synthetic")
    d["synthetic"] = {{"vocab", cfg.synthetic.vocab},
                      {"successors", cfg.synthetic.successors},
                      {"seed", cfg.synthetic.seed},
                      {"tokens", cfg.synthetic.tokens}};
  return d;
}

// The option a loader field comes from, for the error message.
std::string option_of(const std::string& field) {
  if (field == "batch" || field == "seq" || field == "seed") return "--" + field;
  if (field == "corpus_tokens") return "--data";
  return "--synthetic-*/--corpus-*";
}

}  // namespace

json loader_state_json(const DataLoader& loader, const TrainConfig& cfg) {
  json j = data_identity(cfg, static_cast<int64_t>(loader.corpus().tokens.size()));
  j["position"] = loader.position();
  j["data"] = cfg.data;
  return j;
}

int64_t loader_position_from(const json& loader, const TrainConfig& cfg, int64_t corpus_tokens,
                             const std::string& where) {
  if (!loader.is_object() || !loader.contains("position") ||
      !loader.at("position").is_number_integer())
    SL_THROW(IoError, where,
             ": loader.position is missing or not an integer (not a checkpoint "
             "written by shardlab train?)");
  const json want = data_identity(cfg, corpus_tokens);
  for (auto& [k, v] : want.items()) {
    const json saved = loader.contains(k) ? loader.at(k) : json();
    if (saved != v)
      SL_THROW(InvalidArgument, where, ": the checkpoint was trained with ", k, " ", saved.dump(),
               ", this run has ", v.dump(), " (", option_of(k),
               "): the saved data position would mean other tokens");
  }
  return json_int(loader, "position", where + ": loader", 0);
}

// ---- save and load ------------------------------------------------------------------------------

std::string save_train_checkpoint(const Engine& engine, Communicator& comm, const std::string& root,
                                  int64_t step, const json& loader, const json& extra,
                                  int keep_last) {
  EngineShards shards;
  engine_shards(engine, shards);
  CheckpointMeta meta;
  meta.step = step;
  meta.optimizer_step = engine.steps_done();
  meta.strategy = strategy_name(engine.config().strategy);
  meta.model_config = engine.model().config();
  meta.loader = loader;
  // The loop draws no random numbers per step: the batch order is a pure function of the seed
  // and the epoch (DataLoader), and parameter initialisation happens once, before step 1.
  meta.rng = {{"batch_order", "splitmix64(seed, epoch)"}, {"seed", loader.value("seed", json())}};
  meta.extra = extra;
  SaveOptions opt;
  opt.keep_last = keep_last;
  return save_checkpoint(root, shards.ckpt, meta, ckpt_sync(comm),
                         {{"rank", engine.rank()}, {"shard_rank", engine.shard_rank()}}, opt);
}

CheckpointMeta load_train_checkpoint(Engine& engine, const std::string& path) {
  EngineShards shards;
  engine_shards(engine, shards);
  LoadOptions opt;
  opt.expect_model_config = engine.model().config();
  const CheckpointMeta meta = load_checkpoint(path, shards.ckpt, opt);
  for (int u = 0; u < engine.num_units(); ++u)
    engine.set_shard(u, shards.host[static_cast<size_t>(u)]);
  engine.set_steps_done(static_cast<int>(meta.optimizer_step));
  return meta;
}

void init_engine_from_safetensors(Engine& engine, const std::string& path) {
  EngineShards shards;
  engine_shards(engine, shards, /*params_only=*/true);
  load_safetensors_into(path, shards.ckpt);
  for (UnitShard& h : shards.host)
    for (auto& [name, v] : h.states)
      if (name != UnitShard::kParams) std::fill(v.begin(), v.end(), 0.0f);
  for (int u = 0; u < engine.num_units(); ++u)
    engine.set_shard(u, shards.host[static_cast<size_t>(u)]);
  engine.set_steps_done(0);
}

std::string check_resume(const std::string& path, const TrainConfig& cfg, int64_t corpus_tokens,
                         std::string* note) {
  const std::string dir = resolve_checkpoint(path, note);
  const CheckpointIndex ix = read_index(dir);
  const std::string where = join_path(dir, kIndexFile);
  const std::string diff =
      config_difference(ix.meta.model_config, gpt_config_json(cfg.model_config()));
  if (!diff.empty())
    SL_THROW(InvalidArgument, where, ": the checkpoint is of another model: ", diff,
             " (use the same --model and overrides as the run that saved it)");
  loader_position_from(ix.meta.loader, cfg, corpus_tokens, where);
  if (ix.meta.step > cfg.steps)
    SL_THROW(InvalidArgument, where, ": the checkpoint is at step ", ix.meta.step,
             ", past --steps ", cfg.steps, " (--steps counts from the start of the run)");
  return dir;
}

}  // namespace shardlab
