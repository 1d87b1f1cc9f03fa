// The bridge between checkpoints and Hugging Face GPT-2 safetensors files: export a checkpoint's
// parameters as one file, and start a run from such a file.
//
// Names: the model's tensor names are Hugging Face GPT-2's ("wte.weight", "h.0.attn.c_attn.weight",
// "ln_f.bias"; Conv1D weights stored (in, out)). Export writes them without a prefix, as the
// GPT2Model keys of the published gpt2 model.safetensors are. Import accepts both that and the
// "transformer."-prefixed keys that GPT2LMHeadModel.save_pretrained writes, and skips the keys
// that are no parameters of ours: "lm_head.weight" (tied to wte), "*.attn.bias" and
// "*.attn.masked_bias" (causal-mask buffers in older files).
#pragma once

#include <string>
#include <vector>

#include "core/base/dtype.hpp"
#include "core/checkpoint/ckpt_shard.hpp"

namespace shardlab {

inline constexpr const char* kHfPrefix = "transformer.";

// Writes the "params" state of the checkpoint at ckpt_path (a directory or a root with `latest`)
// to out_path as f32 or bf16, tensors in unit order, with __metadata__ {"format": "pt",
// "shardlab.step", "shardlab.model_config"}. Returns the number of tensors written.
int export_safetensors(const std::string& ckpt_path, const std::string& out_path, DType dtype);

struct SafetensorsImportOptions {
  std::string state = kStateParams;  // which state of the shards to fill
  bool allow_unused = false;         // tolerate file tensors that match nothing in the model
};

// Fills `state` of every shard ([begin, end) of its flat buffer; padding and gaps become 0) from
// the file, matching the shards' tensor names (with or without "transformer.") and shapes.
// InvalidArgument naming the file and tensor when one is missing or mis-shaped, or (unless
// allow_unused) when the file holds a tensor the model does not. Returns the tensors read.
int load_safetensors_into(const std::string& path, const std::vector<CkptShard>& shards,
                          const SafetensorsImportOptions& options = {});

}  // namespace shardlab
