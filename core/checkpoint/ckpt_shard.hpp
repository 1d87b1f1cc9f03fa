// What one rank holds, described for the checkpoint layer without any engine type: per FSDP unit,
// the tensors of its flat buffer, the padded size, this rank's range of it, and host pointers to
// each saved state over that range. The engine (or a lesson, or a test) fills these; save and load
// only ever see this description, so a checkpoint written under one strategy and world size loads
// under any other.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardlab {

// One tensor of a unit's flat buffer: elements [offset, offset + numel) of the unpadded buffer.
struct CkptTensor {
  std::string name;            // Hugging Face GPT-2 name, e.g. "h.0.attn.c_attn.weight"
  std::vector<int64_t> shape;  // row-major; the product is numel
  int64_t offset = 0;
  int64_t numel = 0;
};

// Converts any layout whose entries have {name, shape, offset, numel} (the model's unit_layout)
// without this header depending on the model.
template <typename Entries>
std::vector<CkptTensor> to_ckpt_tensors(const Entries& entries) {
  std::vector<CkptTensor> out;
  for (const auto& e : entries) {
    CkptTensor t;
    t.name = e.name;
    t.shape.assign(e.shape.begin(), e.shape.end());
    t.offset = static_cast<int64_t>(e.offset);
    t.numel = static_cast<int64_t>(e.numel);
    out.push_back(std::move(t));
  }
  return out;
}

// The names of the saved states. Any string works; these are what the engine uses.
inline constexpr const char* kStateParams = "params";        // fp32 master parameters
inline constexpr const char* kStateExpAvg = "exp_avg";       // Adam first moment m
inline constexpr const char* kStateExpAvgSq = "exp_avg_sq";  // Adam second moment v

// One unit as this rank holds it.
struct CkptShard {
  int unit = 0;
  std::vector<CkptTensor> tensors;  // the unit's layout
  int64_t padded_numel = 0;         // size of the padded flat buffer (a multiple of the group size)
  int64_t begin = 0, end = 0;       // this rank's range [begin, end) of the flat buffer
  // state name -> host fp32 data for elements [begin, end): states[s][i] is flat element begin + i.
  // On save it is read; on load it is filled (padding and gaps between tensors become 0).
  std::map<std::string, float*> states;
  // On save: whether this rank offers its range for writing. Elements that several ranks hold
  // (no_shard replicas, hybrid_shard replica groups) are written once,
  // by the lowest rank that holds them with write = true, so callers need not know the replica
  // layout. false keeps this rank's copy out altogether. Ignored on load.
  bool write = true;
};

// Everything besides tensors that a run needs to resume exactly.
struct CheckpointMeta {
  int64_t step = 0;            // training steps completed; the directory is step-<step>
  int64_t optimizer_step = 0;  // Adam's t (bias correction), may differ from step with accumulation
  std::string strategy;        // e.g. "full_shard"; informational, loads under any strategy
  int world_size = 1;          // ranks that saved; informational, loads under any world size
  nlohmann::json model_config = nlohmann::json::object();  // compared on load
  nlohmann::json loader = nlohmann::json::object();        // opaque data loader position
  nlohmann::json rng = nlohmann::json::object();           // opaque RNG state
  nlohmann::json extra = nlohmann::json::object();         // anything else the trainer keeps
  // One opaque JSON per saving rank (e.g. a per-rank loader cursor); index = rank.
  std::vector<nlohmann::json> rank_states;
};

// How the ranks of a save meet. world == 1 needs no barrier.
struct CkptSync {
  int rank = 0;
  int world = 1;
  std::function<void()> barrier;  // every rank calls it; returns when all have
};

}  // namespace shardlab
