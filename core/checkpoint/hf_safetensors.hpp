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

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/base/dtype.hpp"
#include "core/checkpoint/ckpt_shard.hpp"
#include "core/checkpoint/safetensors.hpp"

namespace shardlab {

inline constexpr const char* kHfPrefix = "transformer.";  // GPT2LMHeadModel's body
inline constexpr const char* kHfLlamaPrefix = "model.";   // LlamaForCausalLM's body

// Writes the "params" state of the checkpoint at ckpt_path (a directory or a root with `latest`)
// to out_path as f32 or bf16, tensors in unit order, with __metadata__ {"format": "pt",
// "shardlab.step", "shardlab.model_config"}. Returns the number of tensors written.
int export_safetensors(const std::string& ckpt_path, const std::string& out_path, DType dtype);
// The same as a Hugging Face save_pretrained directory, made if absent: dir/model.safetensors
// and dir/config.json (hf_config.hpp's, which transformers' from_pretrained reads). Returns the
// number of tensors written.
int export_hf_directory(const std::string& ckpt_path, const std::string& dir, DType dtype);

struct SafetensorsImportOptions {
  std::string state = kStateParams;  // which state of the shards to fill
  bool allow_unused = false;         // tolerate file tensors that match nothing in the model
};

// The tensors of a Hugging Face save: one safetensors file, or a save_pretrained directory holding
// model.safetensors or shards listed by model.safetensors.index.json ({"weight_map": {tensor:
// file}}). Every file is opened (its header checked) on construction; IoError names the file, or
// the index and its field.
class HfTensors {
 public:
  explicit HfTensors(const std::string& path);
  // What the messages call it: the file, or the directory.
  const std::string& path() const { return path_; }
  // The tensor called `name`, or null; where: the file holding it.
  const SafetensorsEntry* find(const std::string& name, const SafetensorsFile** where) const;
  // Every tensor with its file, in file order.
  std::vector<std::pair<const SafetensorsFile*, const SafetensorsEntry*>> all() const;
  size_t size() const;

 private:
  std::string path_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
};

// Fills `state` of every shard ([begin, end) of its flat buffer; padding and gaps become 0) from
// `path` (a file or a save_pretrained directory, as HfTensors), matching the shards' tensor names
// with or without the Hugging Face prefixes ("transformer." for GPT-2, "model." for Llama), and
// shapes. InvalidArgument naming the file and tensor when one is missing or mis-shaped, or (unless
// allow_unused) when the file holds a tensor the model does not. Returns the tensors read.
int load_safetensors_into(const std::string& path, const std::vector<CkptShard>& shards,
                          const SafetensorsImportOptions& options = {});

}  // namespace shardlab
