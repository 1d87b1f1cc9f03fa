// index.json and per-rank manifests: JSON in and out, validation, and the merge rank 0 runs.
#include "core/checkpoint/index.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>

#include "core/base/error.hpp"
#include "core/base/file_io.hpp"
#include "core/base/json_get.hpp"
#include "core/checkpoint/crc32c.hpp"

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

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kIntMax = std::numeric_limits<int>::max();

// The product of the dimensions, or -1 when a dimension is negative or the product overflows.
int64_t shape_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  return n;
}

// A JSON value for a message: at most 60 characters of it (an edited file may hold anything).
std::string short_dump(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// A JSON array of integers in [lo, hi] (shapes): strict like json_int, naming the element.
std::vector<int64_t> json_int_array(const json& j, const char* key, const std::string& where,
                                    int64_t lo, int64_t hi) {
  if (!j.is_object() || !j.contains(key))
    SL_THROW(IoError, where, ": field '", key, "' is missing");
  const json& a = j.at(key);
  if (!a.is_array())
    SL_THROW(IoError, where, ": field '", key, "' must be an array, not ", short_dump(a));
  std::vector<int64_t> out;
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string field = std::string(key) + "[" + std::to_string(i) + "]";
    out.push_back(json_int(json{{field, a[i]}}, field.c_str(), where, lo, hi));
  }
  return out;
}

uint32_t parse_crc(const std::string& s, const std::string& where) {
  bool ok = s.size() == 8;
  for (char ch : s) ok = ok && std::isxdigit(static_cast<unsigned char>(ch));
  if (!ok) SL_THROW(IoError, where, ": crc32c \"", s.substr(0, 16), "\" is not 8 hex digits");
  return static_cast<uint32_t>(std::strtoul(s.c_str(), nullptr, 16));
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

CkptChunk chunk_from_json(const json& j, const std::string& where) {
  CkptChunk c;
  c.file = json_string(j, "file", where);
  c.begin = json_int(j, "begin", where, 0, kInt64Max);
  c.count = json_int(j, "count", where, 1, kInt64Max);
  c.offset = json_int(j, "offset", where, 0, kInt64Max);
  c.crc32c = parse_crc(json_string(j, "crc32c", where), where);
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
  t.name = json_string(j, "name", path + ": tensor");
  if (t.name.empty()) SL_THROW(IoError, path, ": a tensor has an empty name");
  const std::string where = path + ": tensor " + t.name;
  t.unit = static_cast<int>(json_int(j, "unit", where, 0, kIntMax));
  t.offset = json_int(j, "offset", where, 0, kInt64Max);
  t.shape = json_int_array(j, "shape", where, 0, kInt64Max);
  t.numel = json_int(j, "numel", where, 0, kInt64Max);
  if (j.contains("dtype") && json_string(j, "dtype", where) != "F32")
    SL_THROW(IoError, where, ": dtype ", j.at("dtype").get<std::string>(),
             " (checkpoints store F32)");
  if (j.contains("states")) {
    if (!j.at("states").is_object())
      SL_THROW(IoError, where, ": field 'states' must be an object, not ",
               short_dump(j.at("states")));
    for (const auto& [state, list] : j.at("states").items()) {
      if (!list.is_array())
        SL_THROW(IoError, where, " state ", state, ": chunks must be an array, not ",
                 short_dump(list));
      for (size_t i = 0; i < list.size(); ++i)
        t.chunks[state].push_back(
            chunk_from_json(list[i], where + " state " + state + " chunk " + std::to_string(i)));
    }
  }
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
    // next <= numel here, so numel - next does not overflow; begin + count might.
    if (c.count > t.numel - next)
      return head + "chunk [" + std::to_string(c.begin) + ", +" + std::to_string(c.count) +
             ") reaches past numel " + std::to_string(t.numel);
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
  for (const auto& f : index.files)
    files.push_back({{"name", f.name}, {"rank", f.rank}, {"bytes", f.bytes}});
  j["files"] = files;
  ojson tensors = ojson::array();
  for (const auto& t : index.tensors) tensors.push_back(tensor_to_json(t));
  j["tensors"] = tensors;
  j[kIndexChecksumField] = crc_hex(index_checksum(json::parse(j.dump())));
  return j;
}

uint32_t index_checksum(const json& j) {
  json rest = j;
  if (rest.is_object()) rest.erase(kIndexChecksumField);
  const std::string text = rest.dump();  // compact, keys sorted: the canonical form
  return crc32c(text.data(), text.size());
}

namespace {

// The index's fields, each checked for its type and range.
void parse_index(const json& j, const std::string& path, CheckpointIndex& ix) {
  try {
    if (!j.is_object() || j.value("format", "") != kIndexFormat)
      SL_THROW(IoError, path, ": not a shardlab checkpoint index (field \"format\" is not \"",
               kIndexFormat, "\")");
    const int64_t version = json_int(j, "version", path);
    if (version != kIndexVersion)
      SL_THROW(IoError, path, ": index version ", version, ", this build reads ", kIndexVersion,
               version == 1 ? " (version 1 indexes have no checksum of their own)" : "");
    CheckpointMeta& m = ix.meta;
    m.step = json_int(j, "step", path, 0, kInt64Max);
    m.optimizer_step = json_int(j, "optimizer_step", path, 0, kInt64Max);
    m.strategy = json_string(j, "strategy", path);
    m.world_size = static_cast<int>(json_int(j, "world_size", path, 1, kIntMax));
    m.model_config = j.at("model_config");
    m.loader = j.value("loader", json::object());
    m.rng = j.value("rng", json::object());
    m.extra = j.value("extra", json::object());
    if (j.contains("rank_states")) m.rank_states = j.at("rank_states").get<std::vector<json>>();
    // The states are what every load reads and every verify checks: an empty list would make
    // a checkpoint with corrupt shards look verified.
    if (!j.contains("states") || !j.at("states").is_array() || j.at("states").empty())
      SL_THROW(IoError, path, ": field 'states' must be a non-empty array of state names, not ",
               j.contains("states") ? short_dump(j.at("states")) : std::string("missing"));
    for (const auto& s : j.at("states")) {
      if (!s.is_string() || s.get<std::string>().empty())
        SL_THROW(IoError, path, ": field 'states': ", short_dump(s), " is not a state name");
      if (std::find(ix.states.begin(), ix.states.end(), s.get<std::string>()) != ix.states.end())
        SL_THROW(IoError, path, ": field 'states': ", short_dump(s), " is listed twice");
      ix.states.push_back(s.get<std::string>());
    }
    if (!j.contains("files") || !j.at("files").is_array())
      SL_THROW(IoError, path, ": field 'files' must be an array");
    for (const auto& f : j.at("files")) {
      CkptFileEntry e;
      e.name = json_string(f, "name", path + ": files[]");
      const std::string where = path + ": file " + e.name;
      if (e.name.empty() || e.name.find('/') != std::string::npos || e.name == "." ||
          e.name == "..")
        SL_THROW(IoError, path, ": file entry \"", e.name, "\" is not a plain file name");
      if (ix.find_file(e.name)) SL_THROW(IoError, where, " is listed twice in 'files'");
      e.rank = static_cast<int>(json_int(f, "rank", where, 0, kIntMax));
      e.bytes = json_int(f, "bytes", where, 0, kInt64Max);
      ix.files.push_back(e);
    }
    if (!j.contains("tensors") || !j.at("tensors").is_array() || j.at("tensors").empty())
      SL_THROW(IoError, path, ": field 'tensors' must be a non-empty array");
    for (const auto& t : j.at("tensors")) ix.tensors.push_back(tensor_from_json(t, path));
  } catch (const nlohmann::json::exception& e) {
    SL_THROW(IoError, path, ": malformed index: ", e.what());
  }
}

// The tensors against the states and files: every tensor has chunks for every state that tile
// it, and every byte of every file belongs to exactly one chunk.
void check_index(const CheckpointIndex& ix, const std::string& path) {
  // Byte ranges each file's chunks claim, [offset, offset + 4 * count), to check they tile it.
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> claimed;
  std::set<std::string> names;
  int64_t total_numel = 0;
  for (const auto& t : ix.tensors) {
    if (!names.insert(t.name).second) SL_THROW(IoError, path, ": tensor ", t.name, " listed twice");
    if (shape_numel(t.shape) != t.numel)
      SL_THROW(IoError, path, ": tensor ", t.name, ": shape ", format_shape(t.shape),
               " does not hold numel ", t.numel);
    if (__builtin_add_overflow(total_numel, t.numel, &total_numel))
      SL_THROW(IoError, path, ": tensor ", t.name, ": the tensors' numel overflows 64 bits");
    for (const auto& [state, chunks] : t.chunks)
      if (std::find(ix.states.begin(), ix.states.end(), state) == ix.states.end())
        SL_THROW(IoError, path, ": tensor ", t.name, " has chunks for state ", state,
                 ", which field 'states' does not list (", json(ix.states).dump(), ")");
    for (const auto& state : ix.states) {
      auto it = t.chunks.find(state);
      if (it == t.chunks.end())
        SL_THROW(IoError, path, ": tensor ", t.name, " has no chunks for state ", state);
      std::string problem = tiling_problem(t, state, it->second);
      if (!problem.empty()) SL_THROW(IoError, path, ": ", problem);
      for (const auto& c : it->second) {
        const CkptFileEntry* f = ix.find_file(c.file);
        if (!f) SL_THROW(IoError, path, ": tensor ", t.name, " refers to unknown file ", c.file);
        // offset and count are >= 0 (json_int); compare without forming offset + 4 * count.
        if (c.offset > f->bytes || c.count > (f->bytes - c.offset) / 4)
          SL_THROW(IoError, path, ": tensor ", t.name, " state ", state, ": chunk at byte ",
                   c.offset, " with ", c.count, " elements lies outside ", c.file, " (", f->bytes,
                   " bytes)");
        claimed[c.file].push_back({c.offset, c.offset + c.count * 4});
      }
    }
  }
  // Every byte of every file belongs to exactly one chunk, so verifying the chunks verifies the
  // whole file (a file with bytes no CRC covers could hide anything). Summing the sizes bounds
  // every total a reader forms (4 * numel of all tensors of one state is at most this).
  int64_t total_bytes = 0;
  for (const auto& f : ix.files) {
    if (__builtin_add_overflow(total_bytes, f.bytes, &total_bytes))
      SL_THROW(IoError, path, ": file ", f.name, ": the files' sizes overflow 64 bits");
    auto& ranges = claimed[f.name];
    std::sort(ranges.begin(), ranges.end());
    int64_t next = 0;
    for (const auto& [b, e] : ranges) {
      if (b != next)
        SL_THROW(IoError, path, ": file ", f.name, ": bytes [", std::min(b, next), ", ",
                 std::max(b, next), ") ",
                 b > next ? "are covered by no chunk's checksum" : "belong to two chunks");
      next = e;
    }
    if (next != f.bytes)
      SL_THROW(IoError, path, ": file ", f.name, ": bytes [", next, ", ", f.bytes,
               ") are covered by no chunk's checksum");
  }
}

}  // namespace

CheckpointIndex index_from_json(const json& j, const std::string& path) {
  CheckpointIndex ix;
  parse_index(j, path, ix);
  check_index(ix, path);
  return ix;
}

CheckpointIndex read_index(const std::string& checkpoint_dir) {
  std::string path = join_path(checkpoint_dir, kIndexFile);
  if (!path_exists(path))
    SL_THROW(IoError, path, ": missing (not a complete checkpoint directory)");
  const json j = parse_json_strict(read_text_file(path), path);
  CheckpointIndex ix = index_from_json(j, path);
  // Last, so that a field out of range is named as such; a value edited within its range (the
  // step, the loader's position) is caught here.
  if (!j.contains(kIndexChecksumField) || !j.at(kIndexChecksumField).is_string())
    SL_THROW(IoError, path, ": field '", kIndexChecksumField,
             "' (the index's own checksum) is missing or not a string");
  const std::string want = j.at(kIndexChecksumField).get<std::string>();
  const std::string got = crc_hex(index_checksum(j));
  if (want != got)
    SL_THROW(IoError, path, ": the index's checksum ", kIndexChecksumField, " is ",
             want.substr(0, 16), " but its content gives ", got,
             ": index.json was edited or damaged after the save");
  return ix;
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
    m.rank = static_cast<int>(json_int(j, "rank", path, 0, kIntMax));
    m.file.name = json_string(j.at("file"), "name", path);
    m.file.rank = static_cast<int>(json_int(j.at("file"), "rank", path, 0, kIntMax));
    m.file.bytes = json_int(j.at("file"), "bytes", path, 0, kInt64Max);
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
