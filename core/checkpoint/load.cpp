// Checkpoint load: index validation, layout and config matching, range reads with checksums.
#include "core/checkpoint/load.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <set>

#include "core/base/error.hpp"
#include "core/checkpoint/crc32c.hpp"

namespace shardlab {

using json = nlohmann::json;

// ---- latest, leftovers of interrupted saves

namespace {

// step-<digits> (1 to 18 digits) exactly: a published checkpoint's name. Returns the step or -1.
int64_t step_of_name(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() == 5 || name.size() > 5 + 18) return -1;
  for (size_t i = 5; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return -1;
  return std::stoll(name.substr(5));
}

// At most `n` bytes of `s`, printable ASCII as is and anything else as \xNN, for messages about
// files that may hold anything.
std::string escaped_prefix(const std::string& s, size_t n) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < n; ++i) {
    unsigned char ch = static_cast<unsigned char>(s[i]);
    if (ch >= 0x20 && ch < 0x7f && ch != '\\' && ch != '"') {
      out += static_cast<char>(ch);
    } else {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    }
  }
  if (s.size() > n) out += "...";
  return out;
}

// The step name a `latest` file holds ("step-20\n"); IoError for anything else.
std::string read_latest(const std::string& latest) {
  constexpr int64_t kMaxLatestBytes = 64;  // "step-" + 18 digits + newline, with room to spare
  FileHandle f = FileHandle::open_read(latest);
  const int64_t size = f.size();
  std::string text(static_cast<size_t>(std::min(size, kMaxLatestBytes)), '\0');
  f.read_at(text.data(), static_cast<int64_t>(text.size()), 0);
  std::string name = text;
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (size > kMaxLatestBytes || step_of_name(name) < 0)
    SL_THROW(IoError, latest, ": not a valid step name (", size, " bytes starting \"",
             escaped_prefix(text, 24), "\"; a save writes \"step-<k>\")");
  return name;
}

// The pid after "<prefix>.tmp-" or ".old-" in a leftover's name, or -1.
long pid_after(const std::string& name, size_t pos) {
  if (pos >= name.size() || name.size() - pos > 10) return -1;
  for (size_t i = pos; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return -1;
  return std::stol(name.substr(pos));
}

}  // namespace

std::vector<CkptLeftover> checkpoint_leftovers(const std::string& root) {
  std::vector<CkptLeftover> out;
  if (!is_directory(root)) return out;
  for (const auto& e : list_dir(root)) {
    CkptLeftover l;
    l.name = e;
    size_t dot = e.find('.');
    std::string head = e.substr(0, dot);
    if (dot == std::string::npos || (head != "latest" && step_of_name(head) < 0)) continue;
    l.step = step_of_name(head);
    std::string tail = e.substr(dot);
    if (tail.rfind(".tmp-", 0) == 0) {
      l.kind = "tmp";
      l.pid = pid_after(e, dot + 5);
    } else if (tail.rfind(".old-", 0) == 0 && l.step >= 0) {
      l.kind = "old";
      l.pid = pid_after(e, dot + 5);
    } else if (tail == ".pending" && l.step >= 0) {
      l.kind = "pending";
      // Its content names the temp dir, whose suffix is the saving process's pid.
      try {
        std::string t = read_text_file(join_path(root, e));
        size_t p = t.rfind(".tmp-");
        if (t.size() < 64 && p != std::string::npos) l.pid = pid_after(t, p + 5);
      } catch (const Error&) {
      }
    } else {
      continue;
    }
    l.complete = l.kind != "pending" && path_exists(join_path(join_path(root, e), kIndexFile));
    out.push_back(l);
  }
  return out;
}

bool leftover_owner_running(const CkptLeftover& l) {
  if (l.pid <= 0 || l.pid == static_cast<long>(::getpid())) return false;
  // kill(pid, 0) probes without sending: EPERM means it exists under another user.
  return ::kill(static_cast<pid_t>(l.pid), 0) == 0 || errno == EPERM;
}

std::string describe_leftover(const CkptLeftover& l) {
  std::string owner = l.pid <= 0
                          ? "an unknown process"
                          : "pid " + std::to_string(l.pid) +
                                (leftover_owner_running(l) ? " (running)" : " (not running)");
  std::string step = l.step >= 0 ? " of step " + std::to_string(l.step) : " of latest";
  std::string what;
  if (l.kind == "tmp" && l.step < 0)
    what = "a half-written latest file";
  else if (l.kind == "tmp" && !l.complete)
    what = "an unfinished save" + step + " that never became visible";
  else if (l.kind == "tmp")
    what = "a complete copy" + step +
           " under a temporary name (an interrupted save's new copy, "
           "or the old one it replaced)";
  else if (l.kind == "old")
    what = "the previous copy" + step + ", moved aside by a save that replaced it";
  else
    what = "the note of a save" + step + " naming its temp directory";
  return l.name + ": " + what + ", by " + owner + "; never loaded, removed by the next save" +
         (leftover_owner_running(l) ? " once that process has ended" : "");
}

std::string complete_checkpoint_problem(const std::string& dir, int64_t step) {
  if (!path_exists(join_path(dir, kIndexFile))) return join_path(dir, kIndexFile) + ": missing";
  try {
    CheckpointReader reader(dir);
    if (step >= 0 && reader.index().meta.step != step)
      return join_path(dir, kIndexFile) + ": holds step " +
             std::to_string(reader.index().meta.step) + ", not " + std::to_string(step);
    std::vector<std::string> problems = reader.verify_all();
    if (!problems.empty()) return problems.front();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string recover_missing_step(const std::string& root, const std::string& name,
                                 std::string* why) {
  const int64_t step = step_of_name(name);
  std::vector<CkptLeftover> candidates;
  for (const auto& l : checkpoint_leftovers(root))
    if (l.step == step && step >= 0 && l.complete && !leftover_owner_running(l))
      candidates.push_back(l);
  if (candidates.empty()) return "";
  // The moved-aside copy first: it is the one `latest` named when it was published.
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const CkptLeftover& a, const CkptLeftover& b) {
                     return a.kind == "old" && b.kind != "old";
                   });
  std::string rejected;
  for (const auto& l : candidates) {
    std::string dir = join_path(root, l.name);
    std::string problem = complete_checkpoint_problem(dir, step);
    if (problem.empty()) {
      if (why)
        *why = l.name + ", a complete copy of step " + std::to_string(step) +
               " left by an interrupted save (its checksums verify)";
      return dir;
    }
    rejected += "; " + l.name + " is not usable: " + problem;
  }
  // Copies of the step exist but none is whole: the newest complete published step instead.
  std::vector<int64_t> steps;
  for (const auto& e : list_dir(root))
    if (step_of_name(e) >= 0 && path_exists(join_path(join_path(root, e), kIndexFile)))
      steps.push_back(step_of_name(e));
  std::sort(steps.rbegin(), steps.rend());
  for (int64_t s : steps) {
    std::string dir = join_path(root, "step-" + std::to_string(s));
    if (complete_checkpoint_problem(dir, s).empty()) {
      if (why) *why = "step-" + std::to_string(s) + ", the newest complete checkpoint" + rejected;
      return dir;
    }
  }
  return "";
}

std::string resolve_checkpoint(const std::string& path, std::string* note) {
  if (path_exists(join_path(path, kIndexFile))) return path;
  std::string latest = join_path(path, "latest");
  if (path_exists(latest)) {
    std::string name = read_latest(latest);
    std::string dir = join_path(path, name);
    if (path_exists(join_path(dir, kIndexFile))) return dir;
    // A save killed while replacing this very step (moved aside, new copy not yet renamed in)
    // leaves complete copies next to it: load one of those rather than fail.
    std::string why;
    std::string recovered = recover_missing_step(path, name, &why);
    if (recovered.empty())
      SL_THROW(IoError, latest, ": points to ", name, ", which has no ", kIndexFile);
    std::string text = latest + " names " + name + ", which is " +
                       (path_exists(dir) ? "incomplete" : "missing") + "; using " + why;
    if (note)
      *note = text;
    else
      std::cerr << "note: " << text << "\n";
    return recovered;
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
  if (saved != current)
    return where + ": checkpoint " + saved.dump() + ", this run " + current.dump();
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
  SL_CHECK(begin >= 0 && count >= 0 && begin <= t.numel && count <= t.numel - begin, dir_,
           ": tensor ", t.name, ": elements [", begin, ", +", count, ") outside its ", t.numel);
  check_files(t, state);
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
      std::memcpy(out + (lo - begin), buf.data() + (lo - c.begin),
                  static_cast<size_t>(hi - lo) * 4);
    } else {
      f.read_at(out + (lo - begin), (hi - lo) * 4, c.offset + (lo - c.begin) * 4);
    }
  }
}

void CheckpointReader::check_files(const CkptIndexTensor& t, const std::string& state) {
  auto it = t.chunks.find(state);
  if (it == t.chunks.end()) return;
  for (const auto& c : it->second) file(c.file);
}

std::vector<float> CheckpointReader::read_tensor(const CkptIndexTensor& t,
                                                 const std::string& state) {
  // The files' real sizes bound numel (the chunks tile both), so check them before allocating.
  check_files(t, state);
  std::vector<float> out(static_cast<size_t>(t.numel));
  read(t, state, 0, t.numel, out.data());
  return out;
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
      try {
        check_files(t, s);  // before allocating numel floats an edited index may claim
        buf.resize(static_cast<size_t>(t.numel));
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
        SL_THROW(InvalidArgument, index_path, ": state ", state,
                 " was not saved (saved: ", json(ix.states).dump(), ")");
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
        if (lo < hi)
          reader.read(*ix.find(t.name), state, lo - t.offset, hi - lo, dst + (lo - u.begin));
      }
    }
  }
  return ix.meta;
}

}  // namespace shardlab
