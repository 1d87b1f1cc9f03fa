// Checkpoint -> safetensors export and safetensors -> unit buffers import.
#include "core/checkpoint/hf_safetensors.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "core/base/error.hpp"
#include "core/base/file_io.hpp"
#include "core/checkpoint/hf_config.hpp"
#include "core/checkpoint/index.hpp"
#include "core/checkpoint/load.hpp"
#include "core/checkpoint/safetensors.hpp"
#include "core/model/family.hpp"

namespace shardlab {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

const char* const kPrefixes[] = {kHfPrefix, kHfLlamaPrefix};

std::string without_prefix(const std::string& key) {
  for (const char* p : kPrefixes)
    if (key.rfind(p, 0) == 0) return key.substr(std::strlen(p));
  return key;
}

// Keys of Hugging Face files that hold no parameter of ours: GPT-2's tied "lm_head.weight",
// "*.attn.bias" and "*.attn.masked_bias" (causal-mask buffers in older files), and the rotary
// "*.rotary_emb.inv_freq" older Llama saves kept (computed here from rope_theta).
bool ignorable_key(const std::string& key) {
  const std::string k = without_prefix(key);
  return k == "lm_head.weight" || ends_with(k, ".attn.bias") || ends_with(k, ".attn.masked_bias") ||
         ends_with(k, ".rotary_emb.inv_freq");
}

constexpr const char* kHfSingleFile = "model.safetensors";
constexpr const char* kHfIndexFile = "model.safetensors.index.json";

}  // namespace

int export_safetensors(const std::string& ckpt_path, const std::string& out_path, DType dtype) {
  CheckpointReader reader(ckpt_path);
  const CheckpointIndex& ix = reader.index();
  SL_CHECK(std::find(ix.states.begin(), ix.states.end(), kStateParams) != ix.states.end(),
           reader.dir(), ": the checkpoint has no ", kStateParams, " state to export");
  SL_CHECK(dtype == DType::f32 || dtype == DType::bf16, "export: dtype ", dtype_name(dtype),
           " (f32 or bf16)");
  // GPT-2's tensors under GPT2Model's names (no prefix); a Llama-family model's under
  // LlamaForCausalLM's, as save_pretrained writes them ("model." and lm_head.weight).
  const GPTConfig cfg = gpt_config_from_json(ix.meta.model_config, reader.dir() + "/index.json");
  std::map<std::string, std::string> hf_names;
  if (cfg.is_llama()) {
    const Model model = build_model(cfg);
    for (int s = 0; s < model.num_stages(); ++s)
      for (const StageParam& p : model.stage(s).params()) hf_names[p.name] = p.hf_name;
  }
  std::vector<SafetensorsWriter::Decl> decls;
  for (const auto& t : ix.tensors) {
    const auto hf = hf_names.find(t.name);
    decls.push_back({hf == hf_names.end() ? t.name : hf->second, t.shape});
  }
  std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"shardlab.step", std::to_string(ix.meta.step)},
      {"shardlab.model_config", ix.meta.model_config.dump()},
  };
  SafetensorsWriter w(out_path, decls, dtype, metadata);
  for (const auto& t : ix.tensors) w.write_next(reader.read_tensor(t, kStateParams).data());
  w.finish();
  return static_cast<int>(ix.tensors.size());
}

int export_hf_directory(const std::string& ckpt_path, const std::string& dir, DType dtype) {
  const GPTConfig cfg = gpt_config_from_json(CheckpointReader(ckpt_path).index().meta.model_config,
                                             ckpt_path + "/index.json");
  const std::string config_text = hf_config_text(cfg);  // refuses before anything is written
  if (path_exists(dir) && !is_directory(dir))
    SL_THROW(InvalidArgument, dir,
             ": exists and is not a directory (a save_pretrained directory "
             "is written here)");
  make_dirs(dir);
  const std::string weights = checked_output_path(join_path(dir, kHfSingleFile), "output");
  const std::string config = checked_output_path(join_path(dir, "config.json"), "output");
  const int n = export_safetensors(ckpt_path, weights, dtype);
  write_file_atomic(config, config_text, "output");
  return n;
}

HfTensors::HfTensors(const std::string& path) : path_(path) {
  if (!is_directory(path)) {
    files_.push_back(std::make_unique<SafetensorsFile>(path));
    return;
  }
  const std::string index = join_path(path, kHfIndexFile);
  if (!path_exists(index)) {
    const std::string single = join_path(path, kHfSingleFile);
    if (!path_exists(single))
      SL_THROW(IoError, path, ": holds neither ", kHfSingleFile, " nor ", kHfIndexFile,
               " (a Hugging Face save_pretrained directory has one)");
    files_.push_back(std::make_unique<SafetensorsFile>(single));
    return;
  }
  const nlohmann::json j = parse_json_strict(read_text_file(index), index);
  if (!j.is_object() || !j.contains("weight_map") || !j.at("weight_map").is_object())
    SL_THROW(IoError, index, ": field 'weight_map' (an object of tensor: file) is missing");
  std::set<std::string> names;
  for (const auto& [tensor, file] : j.at("weight_map").items()) {
    if (!file.is_string())
      SL_THROW(IoError, index, ": weight_map['", tensor, "'] must be a file name, not ",
               file.dump());
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      SL_THROW(IoError, index, ": weight_map['", tensor, "'] = \"", f,
               "\" is not a file of this directory");
    names.insert(f);
  }
  for (const std::string& f : names)
    files_.push_back(std::make_unique<SafetensorsFile>(join_path(path, f)));
  // Every tensor the index names must be in the file it names.
  for (const auto& [tensor, file] : j.at("weight_map").items()) {
    const SafetensorsFile* where = nullptr;
    if (!find(tensor, &where) || where->path() != join_path(path, file.get<std::string>()))
      SL_THROW(IoError, index, ": weight_map['", tensor, "'] = \"", file.get<std::string>(),
               "\", which does not hold it");
  }
}

const SafetensorsEntry* HfTensors::find(const std::string& name,
                                        const SafetensorsFile** where) const {
  for (const auto& f : files_)
    if (const SafetensorsEntry* e = f->find(name)) {
      if (where) *where = f.get();
      return e;
    }
  return nullptr;
}

std::vector<std::pair<const SafetensorsFile*, const SafetensorsEntry*>> HfTensors::all() const {
  std::vector<std::pair<const SafetensorsFile*, const SafetensorsEntry*>> out;
  for (const auto& f : files_)
    for (const SafetensorsEntry& e : f->entries()) out.emplace_back(f.get(), &e);
  return out;
}

size_t HfTensors::size() const {
  size_t n = 0;
  for (const auto& f : files_) n += f->entries().size();
  return n;
}

int load_safetensors_into(const std::string& path, const std::vector<CkptShard>& shards,
                          const SafetensorsImportOptions& opt) {
  const HfTensors file(path);
  std::set<std::string> used;
  // The prefix a message names: Llama's where the file uses it, else GPT-2's.
  const char* prefix = kHfPrefix;
  for (const auto& fe : file.all())
    if (fe.second->name.rfind(kHfLlamaPrefix, 0) == 0) prefix = kHfLlamaPrefix;
  struct Match {
    const SafetensorsFile* file;
    const SafetensorsEntry* entry;
  };
  // Resolve every tensor first: nothing is written unless the whole model matches.
  std::vector<std::vector<Match>> match(shards.size());
  for (size_t ui = 0; ui < shards.size(); ++ui) {
    const CkptShard& u = shards[ui];
    SL_CHECK(u.states.count(opt.state), "safetensors import: unit ", u.unit, " has no state ",
             opt.state);
    SL_CHECK(u.begin >= 0 && u.begin <= u.end && u.end <= u.padded_numel,
             "safetensors import: unit ", u.unit, ": range [", u.begin, ", ", u.end,
             ") outside the padded buffer of ", u.padded_numel);
    for (const auto& t : u.tensors) {
      const SafetensorsFile* where = nullptr;
      const std::string bare = without_prefix(t.name);
      const SafetensorsEntry* e = file.find(bare, &where);
      for (const char* p : kPrefixes)
        if (!e) e = file.find(p + bare, &where);
      if (!e)
        SL_THROW(InvalidArgument, path, ": tensor ", t.name, " ", format_shape(t.shape), " (unit ",
                 u.unit, ") is missing (looked for \"", bare, "\" and \"", prefix, bare,
                 "\" among ", file.size(), " tensors)");
      if (e->shape != t.shape)
        SL_THROW(InvalidArgument, where->path(), ": tensor ", e->name, " has shape ",
                 format_shape(e->shape), ", the model expects ", format_shape(t.shape));
      SL_CHECK(t.offset >= 0 && t.offset + t.numel <= u.padded_numel, "safetensors import: tensor ",
               t.name, " lies outside unit ", u.unit, "'s padded buffer");
      used.insert(e->name);
      match[ui].push_back({where, e});
    }
  }
  if (!opt.allow_unused)
    for (const auto& [f, e] : file.all())
      if (!used.count(e->name) && !ignorable_key(e->name))
        SL_THROW(InvalidArgument, f->path(), ": tensor ", e->name, " ", format_shape(e->shape),
                 " matches no tensor of the model");

  int read = 0;
  for (size_t ui = 0; ui < shards.size(); ++ui) {
    const CkptShard& u = shards[ui];
    float* dst = u.states.at(opt.state);
    if (u.end > u.begin) std::memset(dst, 0, static_cast<size_t>(u.end - u.begin) * 4);
    for (size_t ti = 0; ti < u.tensors.size(); ++ti) {
      const CkptTensor& t = u.tensors[ti];
      const Match& m = match[ui][ti];
      int64_t lo = std::max(u.begin, t.offset), hi = std::min(u.end, t.offset + t.numel);
      if (lo < hi) {
        float* got = dst + (lo - u.begin);
        m.file->read_f32(*m.entry, lo - t.offset, hi - lo, got);
        // A NaN or Inf parameter would make every loss NaN from the first step (or, before the
        // kernels propagated NaN, a plausible finite loss): refuse it here, naming the element.
        for (int64_t i = 0; i < hi - lo; ++i)
          if (!std::isfinite(got[i]))
            SL_THROW(InvalidArgument, m.file->path(), ": tensor ", m.entry->name, " holds ", got[i],
                     " at element ", lo - t.offset + i, " of ", t.numel,
                     ": parameters must be finite");
      }
      ++read;
    }
  }
  return read;
}

}  // namespace shardlab
