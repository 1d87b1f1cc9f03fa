// index.json and per-rank manifests: JSON in and out, validation, and the merge rank 0 runs.
#include "core/checkpoint/index.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

#include "core/base/error.hpp"
#include "core/base/file_io.hpp"

namespace shardlab {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

std::string format_shape(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string crc_hex(uint32_t crc) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}

const CkptIndexTensor* CheckpointIndex::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const CkptFileEntry* CheckpointIndex::find_file(const std::string& name) const {
  for (const auto& f : files)
    if (f.name == name) return &f;
  return nullptr;
}

// ---- JSON helpers

namespace {

int64_t shape_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

uint32_t parse_crc(const json& j, const std::string& path) {
  std::string s = j.get<std::string>();
  char* end = nullptr;
  unsigned long v = std::strtoul(s.c_str(), &end, 16);
  if (s.empty() || s.size() > 8 || *end != '\0')
    SL_THROW(IoError, path, ": crc32c \"", s, "\" is not 8 hex digits");
  return static_cast<uint32_t>(v);
}

ojson chunk_to_json(const CkptChunk& c) {
  ojson j;
  j["file"] = c.file;
  j["begin"] = c.begin;
  j["count"] = c.count;
  j["offset"] = c.offset;
  j["crc32c"] = crc_hex(c.crc32c);
  return j;
}

CkptChunk chunk_from_json(const json& j, const std::string& path) {
  CkptChunk c;
  c.file = j.at("file").get<std::string>();
  c.begin = j.at("begin").get<int64_t>();
  c.count = j.at("count").get<int64_t>();
  c.offset = j.at("offset").get<int64_t>();
  c.crc32c = parse_crc(j.at("crc32c"), path);
  return c;
}

ojson tensor_to_json(const CkptIndexTensor& t) {
  ojson j;
  j["name"] = t.name;
  j["unit"] = t.unit;
  j["offset"] = t.offset;
  j["shape"] = t.shape;
  j["numel"] = t.numel;
  j["dtype"] = "F32";
  ojson states = ojson::object();
  for (const auto& [state, chunks] : t.chunks) {
    ojson list = ojson::array();
    for (const auto& c : chunks) list.push_back(chunk_to_json(c));
    states[state] = list;
  }
  j["states"] = states;
  return j;
}

CkptIndexTensor tensor_from_json(const json& j, const std::string& path) {
  CkptIndexTensor t;
  t.name = j.at("name").get<std::string>();
  t.unit = j.at("unit").get<int>();
  t.offset = j.at("offset").get<int64_t>();
  t.shape = j.at("shape").get<std::vector<int64_t>>();
  t.numel = j.at("numel").get<int64_t>();
  if (j.contains("dtype") && j.at("dtype").get<std::string>() != "F32")
    SL_THROW(IoError, path, ": tensor ", t.name, ": dtype ", j.at("dtype").get<std::string>(),
             " (checkpoints store F32)");
  if (j.contains("states"))
    for (const auto& [state, list] : j.at("states").items())
      for (const auto& c : list) t.chunks[state].push_back(chunk_from_json(c, path));
  return t;
}

ojson meta_to_json(const CheckpointMeta& m) {
  ojson j;
  j["step"] = m.step;
  j["optimizer_step"] = m.optimizer_step;
  j["strategy"] = m.strategy;
  j["world_size"] = m.world_size;
  j["model_config"] = m.model_config;
  j["loader"] = m.loader;
  j["rng"] = m.rng;
  j["extra"] = m.extra;
  j["rank_states"] = m.rank_states;
  return j;
}

// Chunks of one state must cover [0, numel) once, in order: no gap, no overlap. Returns the
// problem in words, or "" when the chunks tile the tensor.
std::string tiling_problem(const CkptIndexTensor& t, const std::string& state,
                           const std::vector<CkptChunk>& chunks) {
  std::string head = "tensor " + t.name + " state " + state + ": ";
  int64_t next = 0;
  for (const auto& c : chunks) {
    if (c.count <= 0 || c.begin < 0)
      return head + "chunk [" + std::to_string(c.begin) + ", +" + std::to_string(c.count) +
             ") is empty or negative";
    if (c.begin != next)
      return head + "elements [" + std::to_string(std::min(next, c.begin)) + ", " +
             std::to_string(std::max(next, c.begin)) + ") are " +
             (c.begin > next ? "missing" : "stored twice (" + c.file + " and another file)");
    next = c.begin + c.count;
  }
  if (next != t.numel)
    return head + "elements [" + std::to_string(next) + ", " + std::to_string(t.numel) +
           ") are missing";
  return "";
}

}  // namespace

// ---- index

ojson index_to_json(const CheckpointIndex& index) {
  ojson j;
  j["format"] = kIndexFormat;
  j["version"] = kIndexVersion;
  ojson meta = meta_to_json(index.meta);  // a named object: items() must not outlive it
  for (auto& [k, v] : meta.items()) j[k] = v;
  j["dtype"] = "F32";
  j["states"] = index.states;
  ojson files = ojson::array();
  for (const auto& f : index.files) files.push_back({{"name", f.name}, {"rank", f.rank}, {"bytes", f.bytes}});
  j["files"] = files;
  ojson tensors = ojson::array();
  for (const auto& t : index.tensors) tensors.push_back(tensor_to_json(t));
  j["tensors"] = tensors;
  return j;
}

CheckpointIndex index_from_json(const json& j, const std::string& path) {
  CheckpointIndex ix;
  try {
    if (!j.is_object() || j.value("format", "") != kIndexFormat)
      SL_THROW(IoError, path, ": not a shardlab checkpoint index (field \"format\" is not \"",
               kIndexFormat, "\")");
    int version = j.at("version").get<int>();
    if (version != kIndexVersion)
      SL_THROW(IoError, path, ": index version ", version, ", this build reads ", kIndexVersion);
    CheckpointMeta& m = ix.meta;
    m.step = j.at("step").get<int64_t>();
    m.optimizer_step = j.at("optimizer_step").get<int64_t>();
    m.strategy = j.at("strategy").get<std::string>();
    m.world_size = j.at("world_size").get<int>();
    m.model_config = j.at("model_config");
    m.loader = j.value("loader", json::object());
    m.rng = j.value("rng", json::object());
    m.extra = j.value("extra", json::object());
    if (j.contains("rank_states")) m.rank_states = j.at("rank_states").get<std::vector<json>>();
    ix.states = j.at("states").get<std::vector<std::string>>();
    for (const auto& f : j.at("files")) {
      CkptFileEntry e;
      e.name = f.at("name").get<std::string>();
      e.rank = f.at("rank").get<int>();
      e.bytes = f.at("bytes").get<int64_t>();
      if (e.name.find('/') != std::string::npos || e.name == ".." || e.bytes < 0)
        SL_THROW(IoError, path, ": file entry \"", e.name, "\" is not a plain file name");
      ix.files.push_back(e);
    }
    for (const auto& t : j.at("tensors")) ix.tensors.push_back(tensor_from_json(t, path));
  } catch (const nlohmann::json::exception& e) {
    SL_THROW(IoError, path, ": malformed index: ", e.what());
  }

  std::set<std::string> names;
  for (const auto& t : ix.tensors) {
    if (!names.insert(t.name).second) SL_THROW(IoError, path, ": tensor ", t.name, " listed twice");
    if (shape_numel(t.shape) != t.numel)
      SL_THROW(IoError, path, ": tensor ", t.name, ": shape ", format_shape(t.shape),
               " does not hold numel ", t.numel);
    for (const auto& state : ix.states) {
      auto it = t.chunks.find(state);
      if (it == t.chunks.end())
        SL_THROW(IoError, path, ": tensor ", t.name, " has no chunks for state ", state);
      std::string problem = tiling_problem(t, state, it->second);
      if (!problem.empty()) SL_THROW(IoError, path, ": ", problem);
      for (const auto& c : it->second) {
        const CkptFileEntry* f = ix.find_file(c.file);
        if (!f) SL_THROW(IoError, path, ": tensor ", t.name, " refers to unknown file ", c.file);
        if (c.offset < 0 || c.offset + c.count * 4 > f->bytes)
          SL_THROW(IoError, path, ": tensor ", t.name, " state ", state, ": bytes [", c.offset,
                   ", ", c.offset + c.count * 4, ") lie outside ", c.file, " (", f->bytes,
                   " bytes)");
      }
    }
  }
  return ix;
}

CheckpointIndex read_index(const std::string& checkpoint_dir) {
  std::string path = join_path(checkpoint_dir, kIndexFile);
  if (!path_exists(path))
    SL_THROW(IoError, path, ": missing (not a complete checkpoint directory)");
  json j;
  try {
    j = json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    SL_THROW(IoError, path, ": not valid JSON (truncated?): ", e.what());
  }
  return index_from_json(j, path);
}

// ---- manifests

json manifest_to_json(const RankManifest& m) {
  ojson j;
  j["rank"] = m.rank;
  j["file"] = {{"name", m.file.name}, {"rank", m.file.rank}, {"bytes", m.file.bytes}};
  j["states"] = m.states;
  ojson tensors = ojson::array();
  for (const auto& t : m.tensors) tensors.push_back(tensor_to_json(t));
  j["tensors"] = tensors;
  j["rank_state"] = m.rank_state;
  return json::parse(j.dump());
}

RankManifest manifest_from_json(const json& j, const std::string& path) {
  RankManifest m;
  try {
    m.rank = j.at("rank").get<int>();
    m.file.name = j.at("file").at("name").get<std::string>();
    m.file.rank = j.at("file").at("rank").get<int>();
    m.file.bytes = j.at("file").at("bytes").get<int64_t>();
    m.states = j.at("states").get<std::vector<std::string>>();
    for (const auto& t : j.at("tensors")) m.tensors.push_back(tensor_from_json(t, path));
    m.rank_state = j.value("rank_state", json());
  } catch (const nlohmann::json::exception& e) {
    SL_THROW(IoError, path, ": malformed manifest: ", e.what());
  }
  return m;
}

CheckpointIndex merge_manifests(const std::vector<RankManifest>& manifests,
                                const CheckpointMeta& meta) {
  SL_CHECK(!manifests.empty(), "checkpoint save: no rank manifests");
  CheckpointIndex ix;
  ix.meta = meta;
  ix.meta.world_size = static_cast<int>(manifests.size());
  ix.meta.rank_states.clear();
  ix.states = manifests[0].states;
  std::map<std::string, size_t> pos;  // tensor name -> index in ix.tensors
  std::map<std::string, int> first_rank;
  for (const auto& m : manifests) {
    SL_CHECK(m.states == ix.states, "checkpoint save: rank ", m.rank, " saves states [",
             nlohmann::json(m.states).dump(), "], rank 0 saves [", nlohmann::json(ix.states).dump(),
             "]");
    ix.files.push_back(m.file);
    ix.meta.rank_states.push_back(m.rank_state);
    for (const auto& t : m.tensors) {
      auto it = pos.find(t.name);
      if (it == pos.end()) {
        pos[t.name] = ix.tensors.size();
        first_rank[t.name] = m.rank;
        CkptIndexTensor copy = t;
        copy.chunks.clear();
        for (const auto& s : ix.states) copy.chunks[s];
        ix.tensors.push_back(copy);
        it = pos.find(t.name);
      }
      CkptIndexTensor& dst = ix.tensors[it->second];
      SL_CHECK(dst.shape == t.shape && dst.unit == t.unit && dst.offset == t.offset,
               "checkpoint save: tensor ", t.name, " is ", format_shape(t.shape), " at unit ",
               t.unit, " offset ", t.offset, " on rank ", m.rank, " but ", format_shape(dst.shape),
               " at unit ", dst.unit, " offset ", dst.offset, " on rank ", first_rank[t.name]);
      for (const auto& [state, chunks] : t.chunks)
        for (const auto& c : chunks) dst.chunks[state].push_back(c);
    }
  }
  // Units in order, tensors in layout order inside each unit.
  std::stable_sort(ix.tensors.begin(), ix.tensors.end(), [](const auto& a, const auto& b) {
    return a.unit != b.unit ? a.unit < b.unit : a.offset < b.offset;
  });
  for (auto& t : ix.tensors) {
    for (auto& [state, chunks] : t.chunks) {
      std::sort(chunks.begin(), chunks.end(),
                [](const CkptChunk& a, const CkptChunk& b) { return a.begin < b.begin; });
      std::string problem = tiling_problem(t, state, chunks);
      if (!problem.empty())
        SL_THROW(InvalidArgument, "checkpoint save: ", problem,
                 " (every element must be held by some rank with CkptShard::write = true)");
    }
  }
  return ix;
}

}  // namespace shardlab
