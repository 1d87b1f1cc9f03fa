// Checkpoint -> safetensors export and safetensors -> unit buffers import.
#include "core/checkpoint/hf_safetensors.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "core/base/error.hpp"
#include "core/checkpoint/index.hpp"
#include "core/checkpoint/load.hpp"
#include "core/checkpoint/safetensors.hpp"

namespace shardlab {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Keys of GPT-2 files that hold no parameter of ours.
bool ignorable_key(const std::string& key) {
  std::string k = key.rfind(kHfPrefix, 0) == 0 ? key.substr(std::strlen(kHfPrefix)) : key;
  return k == "lm_head.weight" || ends_with(k, ".attn.bias") || ends_with(k, ".attn.masked_bias");
}

}  // namespace

int export_safetensors(const std::string& ckpt_path, const std::string& out_path, DType dtype) {
  CheckpointReader reader(ckpt_path);
  const CheckpointIndex& ix = reader.index();
  SL_CHECK(std::find(ix.states.begin(), ix.states.end(), kStateParams) != ix.states.end(),
           reader.dir(), ": the checkpoint has no ", kStateParams, " state to export");
  SL_CHECK(dtype == DType::f32 || dtype == DType::bf16, "export: dtype ", dtype_name(dtype),
           " (f32 or bf16)");
  std::vector<SafetensorsWriter::Decl> decls;
  for (const auto& t : ix.tensors) decls.push_back({t.name, t.shape});
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

int load_safetensors_into(const std::string& path, const std::vector<CkptShard>& shards,
                          const SafetensorsImportOptions& opt) {
  SafetensorsFile file(path);
  std::set<std::string> used;
  // Resolve every tensor first: nothing is written unless the whole model matches.
  std::vector<std::vector<const SafetensorsEntry*>> match(shards.size());
  for (size_t ui = 0; ui < shards.size(); ++ui) {
    const CkptShard& u = shards[ui];
    SL_CHECK(u.states.count(opt.state), "safetensors import: unit ", u.unit, " has no state ",
             opt.state);
    SL_CHECK(u.begin >= 0 && u.begin <= u.end && u.end <= u.padded_numel,
             "safetensors import: unit ", u.unit, ": range [", u.begin, ", ", u.end,
             ") outside the padded buffer of ", u.padded_numel);
    for (const auto& t : u.tensors) {
      const SafetensorsEntry* e = file.find(t.name);
      if (!e) e = file.find(kHfPrefix + t.name);
      if (!e && t.name.rfind(kHfPrefix, 0) == 0)
        e = file.find(t.name.substr(std::strlen(kHfPrefix)));
      if (!e)
        SL_THROW(InvalidArgument, path, ": tensor ", t.name, " ", format_shape(t.shape), " (unit ",
                 u.unit, ") is missing (looked for \"", t.name, "\" and \"", kHfPrefix, t.name,
                 "\" among ", file.entries().size(), " tensors)");
      if (e->shape != t.shape)
        SL_THROW(InvalidArgument, path, ": tensor ", e->name, " has shape ", format_shape(e->shape),
                 ", the model expects ", format_shape(t.shape));
      SL_CHECK(t.offset >= 0 && t.offset + t.numel <= u.padded_numel, "safetensors import: tensor ",
               t.name, " lies outside unit ", u.unit, "'s padded buffer");
      used.insert(e->name);
      match[ui].push_back(e);
    }
  }
  if (!opt.allow_unused)
    for (const auto& e : file.entries())
      if (!used.count(e.name) && !ignorable_key(e.name))
        SL_THROW(InvalidArgument, path, ": tensor ", e.name, " ", format_shape(e.shape),
                 " matches no tensor of the model");

  int read = 0;
  for (size_t ui = 0; ui < shards.size(); ++ui) {
    const CkptShard& u = shards[ui];
    float* dst = u.states.at(opt.state);
    if (u.end > u.begin) std::memset(dst, 0, static_cast<size_t>(u.end - u.begin) * 4);
    for (size_t ti = 0; ti < u.tensors.size(); ++ti) {
      const CkptTensor& t = u.tensors[ti];
      int64_t lo = std::max(u.begin, t.offset), hi = std::min(u.end, t.offset + t.numel);
      if (lo < hi) {
        float* got = dst + (lo - u.begin);
        file.read_f32(*match[ui][ti], lo - t.offset, hi - lo, got);
        // A NaN or Inf parameter would make every loss NaN from the first step (or, before the
        // kernels propagated NaN, a plausible finite loss): refuse it here, naming the element.
        for (int64_t i = 0; i < hi - lo; ++i)
          if (!std::isfinite(got[i]))
            SL_THROW(InvalidArgument, path, ": tensor ", match[ui][ti]->name, " holds ", got[i],
                     " at element ", lo - t.offset + i, " of ", t.numel,
                     ": parameters must be finite");
      }
      ++read;
    }
  }
  return read;
}

}  // namespace shardlab
