// A stage: one piece of a model's forward walk (an embedding, a block's attention or MLP half, a
// final norm and head, ...). It owns its parameters (names, shapes, how they start, the Hugging
// Face tensor each maps to), says what its forward saves for backward, and runs forward and
// backward. A model is an ordered list of stages (model.hpp); whoever runs it (the FSDP engine,
// the single-rank GPT) walks the stages forward and then in reverse, handing each one pointers
// to its parameters and gradients (StageArgs), and never looks inside.
//
// Activations flow through a Pass: one micro-batch's state, made by the model (Model::begin). A
// model's stages share one pass type (GPT-2's residual stream and per-block saved tensors), so a
// stage downcasts it to its own model's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device/device.hpp"

namespace shardlab {

// ---- parameters ---------------------------------------------------------------------------------

// How a parameter starts. normal draws N(0, std) from a stream seeded by (seed, name), so a value
// depends only on the seed and the parameter's name and shape: the same on any number of ranks and
// under any grouping into units.
enum class InitKind : uint8_t { zeros, ones, normal };
struct ParamInit {
  InitKind kind = InitKind::zeros;
  float std = 0.0f;  // normal only
};

// How a Hugging Face checkpoint stores the tensor: as ours (same) or transposed (2-D only): GPT-2's
// Conv1D keeps (in, out) as we do, Llama's nn.Linear keeps (out, in).
enum class HfLayout : uint8_t { same, transposed };

struct StageParam {
  std::string name;            // unique in the model: "h.3.attn.c_attn.weight"
  std::vector<int64_t> shape;  // row-major
  ParamInit init;
  std::string
      hf_name;  // the tensor of a Hugging Face checkpoint: "transformer.h.3.attn.c_attn.weight"
  HfLayout hf_layout = HfLayout::same;
  int64_t numel() const;
};

// Fills `flat` (host memory, the params' numel one after the other) by each one's init rule.
void init_params(const std::vector<StageParam>& params, uint64_t seed, float* flat);

// ---- what a stage computes with ----------------------------------------------------------------

// How a backward call writes its parameter gradients: accumulate (+=), or overwrite a buffer that
// backward has not written yet this micro-batch (GEMMs with beta 0: no zeroing first, and the bits
// of += into zeros).
enum class GradWrite { accumulate, overwrite };

// The kernels a model's stages run, chosen when the model is built. They decide what a stage
// saves for backward (Stage::saved_bytes): naive attention keeps the (B, NH, T, T) probabilities;
// flash attention (core/kernels/flash_attention.hpp) keeps one logsumexp per query row and
// recomputes the probabilities tile by tile in backward.
enum class AttentionKernel : uint8_t { naive, flash };
struct KernelChoice {
  AttentionKernel attention = AttentionKernel::naive;
};
// "naive" | "flash", and back; parse throws InvalidArgument naming `option` and the choices.
const char* attention_kernel_name(AttentionKernel k);
AttentionKernel parse_attention_kernel(const std::string& name, const char* option = "--attention");

// One parameter tensor (or a stage's whole flat range) and its gradient, as a runner hands them.
struct ParamView {
  const float* w = nullptr;  // the values (device memory, fp32)
  float* g = nullptr;        // backward: the gradient, written per `write`
  GradWrite write = GradWrite::accumulate;
};

// What one forward or backward call gets: the stage's own parameters (its flat range, params()
// order) and each tied parameter (ties() order), which lives in another stage's range.
struct StageArgs {
  ParamView own;
  std::vector<ParamView> tied;
};

// One micro-batch: int32 device arrays (B, T); targets may be null for inference. Backward yields
// the gradient of loss_scale * (mean loss over the B T positions).
struct MicroBatch {
  const int* tokens = nullptr;
  const int* targets = nullptr;
  int B = 0, T = 0;
  float loss_scale = 1.0f;
};

// One micro-batch's state between a model's stages: made by Model::begin, which allocates what
// flows between stages (GPT-2: the residual stream); the stages add what they save. A pass may be
// reused for the next micro-batch of the same (B, T) (set `batch`): what stages saved stays
// allocated and is overwritten.
class Pass {
 public:
  Pass(Device& dev, const MicroBatch& batch) : dev(dev), batch(batch) {}
  virtual ~Pass() = default;
  Pass(const Pass&) = delete;
  Pass& operator=(const Pass&) = delete;

  // Before the first stage's backward: what backward passes between stages (GPT-2: one
  // residual-gradient buffer); freed again by end_backward.
  virtual void begin_backward() = 0;
  virtual void end_backward() = 0;

  Device& dev;
  MicroBatch batch;
  float loss = 0.0f;  // set by the stage that computes it (the head), on the host
};

// ---- the stage ---------------------------------------------------------------------------------

class Stage {
 public:
  // name: what it is, for unit names and messages ("block 3 attn", "embedding"); role: the same
  // within its layer ("attn"), for a unit holding several layers' stages of one kind.
  Stage(std::string name, std::string role, std::vector<StageParam> params,
        std::vector<std::string> ties = {});
  virtual ~Stage() = default;
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;

  const std::string& name() const { return name_; }
  const std::string& role() const { return role_; }
  // Its own parameters, in the order they sit in its flat range.
  const std::vector<StageParam>& params() const { return params_; }
  int64_t numel() const { return numel_; }
  // Parameters of other stages it reads (a tied LM head reads the token embedding): their names.
  // The gradient of a tied parameter is written by the stage whose backward runs first (with the
  // owner's unit's GradWrite), and added to by the others.
  const std::vector<std::string>& ties() const { return ties_; }

  // Bytes its forward saves for backward on a micro-batch of (B, T), with the model's kernels.
  virtual int64_t saved_bytes(int B, int T) const = 0;
  virtual void forward(Pass& pass, const StageArgs& a) const = 0;
  // Activation checkpointing: forward again from the same input, to refill what release()
  // dropped; what it would pass on to the next stage is discarded. The default throws.
  virtual void recompute(Pass& pass, const StageArgs& a) const;
  // Gradients: own.g and tied[i].g per their `write`; the input gradient for the stage before.
  virtual void backward(Pass& pass, const StageArgs& a) const = 0;
  // Frees what forward saved (after backward, or after forward under activation checkpointing).
  virtual void release(Pass& pass) const = 0;

 private:
  std::string name_, role_;
  std::vector<StageParam> params_;
  std::vector<std::string> ties_;
  int64_t numel_ = 0;
};

}  // namespace shardlab
