// A model: an ordered list of stages (stage.hpp) plus what ties their parameters together, as
// torchtitan describes a model to its parallelisms and FSDP2's fully_shard sees a module tree.
// The tree has two levels below the root: `layers`, the repeated list (torchtitan's
// model.layers, GPT-2's transformer blocks), each a run of consecutive stages; and the root's own
// stages, those in no layer (GPT-2's embedding and head). Wrap policies read this tree
// (core/fsdp/wrap_policy.hpp): one unit per layer, per stage of a layer, per K layers, by size.
//
// GPT-2 (gpt2.hpp) and the Llama family (llama.hpp) are two such models; a GPTConfig converts to
// its family's (family.hpp), so code that names a shape gets that model.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/model/config.hpp"
#include "core/model/stage.hpp"

namespace shardlab {

// One item of the model's repeated list: a run of consecutive stages (in forward order).
struct ModelLayer {
  std::string name;         // "block 3": the name of a unit holding this layer
  std::vector<int> stages;  // consecutive stage indices
};

// Where a stage finds a parameter it reads from another stage (Stage::ties).
struct TieRef {
  int owner = 0;       // the stage that owns the parameter
  int64_t offset = 0;  // where it starts in the owner's flat range
  int64_t numel = 0;
};

// What a model is made of; Model checks it and resolves the ties.
struct ModelDef {
  std::string family;                                // "gpt2"
  std::vector<std::shared_ptr<const Stage>> stages;  // in forward order
  std::vector<ModelLayer> layers;                    // in forward order; may be empty
  std::string layer_item =
      "layer";  // what one layer is called, for plurals: "block" -> "blocks 0-1"
  std::string root_label = "root";  // what the root's own stages are, for messages
  int max_seq_len = 0;              // the longest T a pass takes (0: any)
  int vocab_size = 0;               // token ids are in [0, vocab_size)
  nlohmann::json config;            // the shape, as run directories and checkpoints record it
  std::string describe;             // one line for logs: "V=256 T=64 L=2 NH=2 C=64 (...)"
  // Makes one micro-batch's pass (stage.hpp): allocates what flows between the stages.
  std::function<std::unique_ptr<Pass>(Device&, const MicroBatch&)> begin;
};

class Model {
 public:
  // Checks the definition (non-empty, layers consecutive and disjoint, unique parameter names,
  // every tie resolved to a parameter of the same shape in another stage); throws InvalidArgument.
  explicit Model(ModelDef def);
  // The model of this shape, GPT-2's or the Llama family's (family.hpp's build_model). Validates
  // cfg.
  Model(const GPTConfig& cfg);  // NOLINT(google-explicit-constructor): a shape names its model

  const std::string& family() const { return def_->family; }
  int num_stages() const { return static_cast<int>(def_->stages.size()); }
  const Stage& stage(int i) const { return *def_->stages[static_cast<size_t>(i)]; }
  const std::vector<ModelLayer>& layers() const { return def_->layers; }
  // The layer stage i belongs to, -1 for the root's own stages.
  int layer_of(int stage) const { return layer_of_[static_cast<size_t>(stage)]; }
  // The root's own stages, in forward order.
  const std::vector<int>& root_stages() const { return root_stages_; }
  const std::vector<TieRef>& ties(int stage) const { return ties_[static_cast<size_t>(stage)]; }
  const std::string& layer_item() const { return def_->layer_item; }
  const std::string& root_label() const { return def_->root_label; }
  int max_seq_len() const { return def_->max_seq_len; }
  int vocab_size() const { return def_->vocab_size; }
  const nlohmann::json& config() const { return def_->config; }
  const std::string& describe() const { return def_->describe; }
  // Parameters, each counted once (a tied parameter is its owner's).
  int64_t num_params() const { return num_params_; }

  // One micro-batch's pass (the caller checks B and T against the model).
  std::unique_ptr<Pass> begin(Device& dev, const MicroBatch& batch) const {
    return def_->begin(dev, batch);
  }

 private:
  std::shared_ptr<const ModelDef> def_;
  std::vector<int> layer_of_, root_stages_;
  std::vector<std::vector<TieRef>> ties_;
  int64_t num_params_ = 0;
};

}  // namespace shardlab
