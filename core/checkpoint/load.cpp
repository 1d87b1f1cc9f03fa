// Checkpoint load: index validation, layout and config matching, range reads with checksums.
#include "core/checkpoint/load.hpp"

#include <algorithm>
#include <cstring>
#include <set>

#include "core/base/error.hpp"
#include "core/checkpoint/crc32c.hpp"

namespace shardlab {

using json = nlohmann::json;

std::string resolve_checkpoint(const std::string& path) {
  if (path_exists(join_path(path, kIndexFile))) return path;
  std::string latest = join_path(path, "latest");
  if (path_exists(latest)) {
    std::string name = read_text_file(latest);
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    if (name.empty() || name.find('/') != std::string::npos)
      SL_THROW(IoError, latest, ": malformed (\"", name, "\")");
    std::string dir = join_path(path, name);
    if (!path_exists(join_path(dir, kIndexFile)))
      SL_THROW(IoError, latest, ": points to ", name, ", which has no ", kIndexFile);
    return dir;
  }
  SL_THROW(IoError, path, ": not a checkpoint (no ", kIndexFile, " and no latest file)");
}

std::string config_difference(const json& saved, const json& current, const std::string& where) {
  if (saved.is_object() && current.is_object()) {
    std::set<std::string> keys;
    for (auto& [k, v] : saved.items()) keys.insert(k);
    for (auto& [k, v] : current.items()) keys.insert(k);
    for (const auto& k : keys) {
      std::string w = where + "." + k;
      if (!saved.contains(k)) return w + ": not in the checkpoint, this run " + current[k].dump();
      if (!current.contains(k)) return w + ": checkpoint " + saved[k].dump() + ", not in this run";
      std::string d = config_difference(saved[k], current[k], w);
      if (!d.empty()) return d;
    }
    return "";
  }
  // Numbers compare by value so that 2 and 2.0 agree.
  if (saved.is_number() && current.is_number() && saved.get<double>() == current.get<double>())
    return "";
  if (saved != current) return where + ": checkpoint " + saved.dump() + ", this run " + current.dump();
  return "";
}

// ---- reader

CheckpointReader::CheckpointReader(const std::string& path, bool verify_checksums)
    : dir_(resolve_checkpoint(path)), index_(read_index(dir_)), verify_(verify_checksums) {}

const FileHandle& CheckpointReader::file(const std::string& name) {
  auto it = files_.find(name);
  if (it != files_.end()) return it->second;
  const CkptFileEntry* e = index_.find_file(name);
  SL_CHECK(e, dir_, ": file ", name, " is not in ", kIndexFile);
  std::string path = join_path(dir_, name);
  FileHandle f = FileHandle::open_read(path);
  int64_t size = f.size();
  if (size != e->bytes)
    SL_THROW(IoError, path, ": ", size, " bytes, but ", kIndexFile, " says ", e->bytes,
             size < e->bytes ? " (truncated)" : " (file was changed after the save)");
  return files_.emplace(name, std::move(f)).first->second;
}

void CheckpointReader::read(const CkptIndexTensor& t, const std::string& state, int64_t begin,
                            int64_t count, float* out) {
  read_checked(t, state, begin, count, out, verify_);
}

void CheckpointReader::read_checked(const CkptIndexTensor& t, const std::string& state,
                                    int64_t begin, int64_t count, float* out, bool verify) {
  auto it = t.chunks.find(state);
  SL_CHECK(it != t.chunks.end(), dir_, ": tensor ", t.name, " has no state ", state);
  SL_CHECK(begin >= 0 && count >= 0 && begin + count <= t.numel, dir_, ": tensor ", t.name,
           ": elements [", begin, ", ", begin + count, ") outside its ", t.numel);
  std::vector<float> buf;
  for (const auto& c : it->second) {
    int64_t lo = std::max(begin, c.begin), hi = std::min(begin + count, c.begin + c.count);
    if (lo >= hi) continue;
    const FileHandle& f = file(c.file);
    if (verify) {
      // The checksum covers the whole chunk, so read all of it (a chunk is at most one shard).
      buf.resize(static_cast<size_t>(c.count));
      f.read_at(buf.data(), c.count * 4, c.offset);
      uint32_t crc = crc32c(buf.data(), static_cast<size_t>(c.count * 4));
      if (crc != c.crc32c)
        SL_THROW(IoError, f.path(), ": checksum mismatch in bytes [", c.offset, ", ",
                 c.offset + c.count * 4, ") (tensor ", t.name, " state ", state, "): crc32c ",
                 crc_hex(crc), ", ", kIndexFile, " says ", crc_hex(c.crc32c), " (corrupted)");
      std::memcpy(out + (lo - begin), buf.data() + (lo - c.begin), static_cast<size_t>(hi - lo) * 4);
    } else {
      f.read_at(out + (lo - begin), (hi - lo) * 4, c.offset + (lo - c.begin) * 4);
    }
  }
}

std::vector<std::string> CheckpointReader::verify_all() {
  std::vector<std::string> problems;
  std::vector<float> buf;
  for (const auto& f : index_.files) {
    try {
      file(f.name);
    } catch (const Error& e) {
      problems.push_back(e.what());
    }
  }
  for (const auto& t : index_.tensors)
    for (const auto& s : index_.states) {
      buf.resize(static_cast<size_t>(t.numel));
      try {
        read_checked(t, s, 0, t.numel, buf.data(), true);
      } catch (const Error& e) {
        // A missing or truncated file fails every read from it: report it once.
        if (std::find(problems.begin(), problems.end(), e.what()) == problems.end())
          problems.push_back(e.what());
      }
    }
  return problems;
}

// ---- load

CheckpointMeta load_checkpoint(const std::string& path, const std::vector<CkptShard>& shards,
                               const LoadOptions& opt) {
  CheckpointReader reader(path, opt.verify_checksums);
  const CheckpointIndex& ix = reader.index();
  std::string index_path = join_path(reader.dir(), kIndexFile);

  if (!opt.expect_model_config.is_null()) {
    std::string diff = config_difference(ix.meta.model_config, opt.expect_model_config);
    if (!diff.empty())
      SL_THROW(InvalidArgument, index_path, ": model config differs from this run: ", diff);
  }

  // Match the layouts against the index first, so a mismatch fails before any buffer is touched.
  std::set<std::string> model_names;
  for (const auto& u : shards) {
    SL_CHECK(u.begin >= 0 && u.begin <= u.end && u.end <= u.padded_numel, "checkpoint load: unit ",
             u.unit, ": range [", u.begin, ", ", u.end, ") outside the padded buffer of ",
             u.padded_numel);
    for (const auto& [state, ptr] : u.states) {
      if (std::find(ix.states.begin(), ix.states.end(), state) == ix.states.end())
        SL_THROW(InvalidArgument, index_path, ": state ", state, " was not saved (saved: ",
                 json(ix.states).dump(), ")");
      SL_CHECK(ptr != nullptr || u.begin == u.end, "checkpoint load: unit ", u.unit, " state ",
               state, " has no buffer");
    }
    for (const auto& t : u.tensors) {
      model_names.insert(t.name);
      const CkptIndexTensor* ct = ix.find(t.name);
      if (!ct)
        SL_THROW(InvalidArgument, index_path, ": tensor ", t.name, " (unit ", u.unit,
                 ") is not in the checkpoint, which has ", ix.tensors.size(), " tensors");
      if (ct->shape != t.shape)
        SL_THROW(InvalidArgument, index_path, ": tensor ", t.name, " has shape ",
                 format_shape(ct->shape), " in the checkpoint, ", format_shape(t.shape),
                 " in this model");
      SL_CHECK(t.offset >= 0 && t.offset + t.numel <= u.padded_numel, "checkpoint load: tensor ",
               t.name, " lies outside unit ", u.unit, "'s padded buffer");
    }
  }
  if (opt.require_all_tensors)
    for (const auto& ct : ix.tensors)
      if (!model_names.count(ct.name))
        SL_THROW(InvalidArgument, index_path, ": checkpoint tensor ", ct.name, " ",
                 format_shape(ct.shape), " is not in this model");

  for (const auto& u : shards) {
    for (const auto& [state, dst] : u.states) {
      if (u.end > u.begin) std::memset(dst, 0, static_cast<size_t>(u.end - u.begin) * 4);
      for (const auto& t : u.tensors) {
        int64_t lo = std::max(u.begin, t.offset), hi = std::min(u.end, t.offset + t.numel);
        if (lo < hi) reader.read(*ix.find(t.name), state, lo - t.offset, hi - lo, dst + (lo - u.begin));
      }
    }
  }
  return ix.meta;
}

}  // namespace shardlab
