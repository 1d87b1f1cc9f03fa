// Checkpoint save: per-rank shard files and manifests, rank 0's index, then the atomic publish.
#include "core/checkpoint/save.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>

#include "core/base/error.hpp"
#include "core/base/file_io.hpp"
#include "core/checkpoint/crc32c.hpp"
#include "core/checkpoint/index.hpp"
#include "core/checkpoint/load.hpp"
#include "core/comm/communicator.hpp"

namespace shardlab {

using json = nlohmann::json;

namespace {

const char* kLatestFile = "latest";

std::string step_name(int64_t step) { return "step-" + std::to_string(step); }
std::string shard_file(int rank) { return "shard-" + std::to_string(rank) + ".bin"; }
std::string manifest_file(int rank) { return "shard-" + std::to_string(rank) + ".json"; }
std::string ranges_file(int rank) { return "shard-" + std::to_string(rank) + ".ranges.json"; }

using Interval = std::pair<int64_t, int64_t>;  // [first, second)

// The parts of [begin, end) that no interval of `taken` covers.
std::vector<Interval> subtract(int64_t begin, int64_t end, std::vector<Interval> taken) {
  std::sort(taken.begin(), taken.end());
  std::vector<Interval> out;
  int64_t pos = begin;
  for (const auto& [b, e] : taken) {
    if (e <= pos || b >= end) continue;
    if (b > pos) out.push_back({pos, b});
    pos = std::max(pos, e);
    if (pos >= end) break;
  }
  if (pos < end) out.push_back({pos, end});
  return out;
}

// Each rank announces the ranges it offers; returns, per unit index of `shards`, the intervals
// this rank writes: its range minus what lower ranks offer (the lowest holder writes).
std::vector<std::vector<Interval>> owned_intervals(const std::string& dir,
                                                   const std::vector<CkptShard>& shards, int rank,
                                                   int world,
                                                   const std::function<void()>& barrier) {
  std::vector<std::vector<Interval>> owned(shards.size());
  for (size_t i = 0; i < shards.size(); ++i)
    if (shards[i].write) owned[i] = {{shards[i].begin, shards[i].end}};
  if (world == 1) return owned;
  json mine = json::array();
  for (const auto& u : shards)
    if (u.write) mine.push_back({u.unit, u.begin, u.end});
  {
    FileHandle f = FileHandle::create(join_path(dir, ranges_file(rank)));
    std::string text = mine.dump();
    f.write_all(text.data(), static_cast<int64_t>(text.size()));
    f.close();
  }
  barrier();
  std::map<int, std::vector<Interval>> lower;  // unit -> ranges offered by ranks below this one
  for (int r = 0; r < rank; ++r) {
    std::string path = join_path(dir, ranges_file(r));
    try {
      for (const auto& e : parse_json_strict(read_text_file(path), path))
        lower[e.at(0).get<int>()].push_back({e.at(1).get<int64_t>(), e.at(2).get<int64_t>()});
    } catch (const json::exception& e) {
      SL_THROW(IoError, path, ": unreadable: ", e.what());
    }
  }
  for (size_t i = 0; i < shards.size(); ++i)
    if (shards[i].write) owned[i] = subtract(shards[i].begin, shards[i].end, lower[shards[i].unit]);
  return owned;
}

// Shard files store floats as the host lays them out; the format says little-endian.
void check_little_endian() {
  const uint32_t one = 1;
  unsigned char b;
  std::memcpy(&b, &one, 1);
  SL_CHECK(b == 1, "checkpoints are little-endian; this host is not");
}

void check_shard(const CkptShard& u, int rank) {
  SL_CHECK(u.begin >= 0 && u.begin <= u.end && u.end <= u.padded_numel, "checkpoint: unit ", u.unit,
           " on rank ", rank, ": range [", u.begin, ", ", u.end,
           ") is not inside the padded buffer of ", u.padded_numel);
  for (const auto& t : u.tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    SL_CHECK(n == t.numel && t.offset >= 0 && t.offset + t.numel <= u.padded_numel,
             "checkpoint: unit ", u.unit, " tensor ", t.name, ": shape ", format_shape(t.shape),
             " numel ", t.numel, " offset ", t.offset, " does not fit the padded buffer of ",
             u.padded_numel);
  }
  for (const auto& [state, ptr] : u.states)
    SL_CHECK(ptr != nullptr || u.begin == u.end, "checkpoint: unit ", u.unit, " state ", state,
             " has no data on rank ", rank);
}

// step-<digits> exactly: a published checkpoint. Returns the step or -1.
int64_t published_step(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() == 5 || name.size() > 5 + 18) return -1;
  for (size_t i = 5; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return -1;
  return std::stoll(name.substr(5));
}

// Writes this rank's shard file and manifest into `dir`: for each unit, the parts of `owned[i]`
// that each tensor covers.
void write_rank_files(const std::string& dir, const std::vector<CkptShard>& shards,
                      const std::vector<std::vector<Interval>>& owned, int rank,
                      const json& rank_state, bool do_fsync) {
  RankManifest m;
  m.rank = rank;
  m.file.name = shard_file(rank);
  m.file.rank = rank;
  m.rank_state = rank_state;
  std::vector<std::string> states;
  for (const auto& u : shards)
    for (const auto& [s, p] : u.states)
      if (std::find(states.begin(), states.end(), s) == states.end()) states.push_back(s);
  std::sort(states.begin(), states.end());
  m.states = states;

  FileHandle f = FileHandle::create(join_path(dir, m.file.name));
  int64_t offset = 0;
  for (size_t ui = 0; ui < shards.size(); ++ui) {
    const CkptShard& u = shards[ui];
    for (const auto& s : states)
      SL_CHECK(u.states.count(s), "checkpoint: rank ", rank, " unit ", u.unit, " has no state ", s,
               " but another unit has it");
    for (const auto& t : u.tensors) {
      CkptIndexTensor mt;
      mt.name = t.name;
      mt.unit = u.unit;
      mt.offset = t.offset;
      mt.shape = t.shape;
      mt.numel = t.numel;
      // This rank's part of the tensor: what it owns of the unit intersected with the tensor.
      for (const auto& [ob, oe] : owned[ui]) {
        int64_t lo = std::max(ob, t.offset), hi = std::min(oe, t.offset + t.numel);
        if (lo >= hi) continue;
        for (const auto& s : states) {
          const float* src = u.states.at(s) + (lo - u.begin);
          int64_t bytes = (hi - lo) * 4;
          f.write_all(src, bytes);
          mt.chunks[s].push_back({m.file.name, lo - t.offset, hi - lo, offset,
                                  crc32c(src, static_cast<size_t>(bytes))});
          offset += bytes;
        }
      }
      m.tensors.push_back(std::move(mt));
    }
  }
  m.file.bytes = offset;
  if (do_fsync) f.sync();
  f.close();

  FileHandle mf = FileHandle::create(join_path(dir, manifest_file(rank)));
  std::string text = manifest_to_json(m).dump();
  mf.write_all(text.data(), static_cast<int64_t>(text.size()));
  if (do_fsync) mf.sync();
  mf.close();
}

// Only a directory (a step saved before) is replaced by a save: never a file, a link or a device
// node that carries the step's name.
void check_replaceable_step(const std::string& final_dir) {
  struct stat st;
  if (::lstat(final_dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
    SL_THROW(IoError, final_dir, ": exists and is ", file_type_name(st.st_mode),
             ", not a checkpoint directory; refusing to replace it");
}

// Swaps two directories in one atomic step where the kernel and the file system can (Linux
// renameat2 RENAME_EXCHANGE); false when they cannot, so the caller falls back to two renames.
bool exchange_paths(const std::string& a, const std::string& b) {
#if defined(__linux__) && defined(RENAME_EXCHANGE)
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) return true;
  if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP || errno == EOPNOTSUPP) return false;
  SL_THROW(IoError, "cannot exchange ", a, " and ", b, ": ", std::strerror(errno));
#else
  (void)a;
  (void)b;
  return false;
#endif
}

// Removes what interrupted saves left in `root` (temp dirs, moved-aside copies, pending notes,
// half-written latest files), except those of another process that still runs: its save may be
// in progress. Leftovers of this process are from its own earlier failed saves.
void remove_stale_leftovers(const std::string& root) {
  for (const auto& l : checkpoint_leftovers(root))
    if (!leftover_owner_running(l)) remove_all(join_path(root, l.name));
}

// Rank 0, before a save: when `latest` names a step that is missing or incomplete (a save killed
// between moving the old copy aside and renaming the new one in), puts a verified complete copy
// back under that name, or points `latest` at the newest complete step, so that removing the
// leftovers next does not leave `latest` naming nothing.
void repair_latest(const std::string& root, bool do_fsync) {
  if (!path_exists(join_path(root, kLatestFile))) return;
  std::string note, dir;
  try {
    dir = resolve_checkpoint(root, &note);
  } catch (const Error&) {
    return;  // nothing loadable to repair with; this save's `latest` replaces it
  }
  if (note.empty()) return;
  std::string name = dir.substr(dir.find_last_of('/') + 1);
  const size_t dot = name.find('.');
  if (dot == std::string::npos) {
    write_file_atomic(join_path(root, kLatestFile), name + "\n");  // another, complete step
  } else {
    std::string target = join_path(root, name.substr(0, dot));
    remove_all(target);  // an incomplete directory under the step's name, if any
    rename_path(dir, target);
    if (do_fsync) sync_dir(root);
  }
  std::cerr << "note: " << note << "; repaired before saving\n";
}

// Rank 0, after every rank's files are durable: index.json, rename, latest, cleanup.
std::string publish(const std::string& root, const std::string& tmp, const CheckpointMeta& meta,
                    int world, const SaveOptions& opt) {
  auto stage = [&](const char* s) {
    if (opt.on_stage) opt.on_stage(s, 0);
  };
  std::vector<RankManifest> manifests;
  for (int r = 0; r < world; ++r) {
    std::string path = join_path(tmp, manifest_file(r));
    manifests.push_back(manifest_from_json(parse_json_strict(read_text_file(path), path), path));
    SL_CHECK(manifests.back().rank == r, path, ": manifest of rank ", manifests.back().rank);
  }
  CheckpointIndex ix = merge_manifests(manifests, meta);
  {
    FileHandle f = FileHandle::create(join_path(tmp, kIndexFile));
    std::string text = index_to_json(ix).dump(1);
    f.write_all(text.data(), static_cast<int64_t>(text.size()));
    if (opt.fsync) f.sync();
    f.close();
  }
  for (int r = 0; r < world; ++r) {
    remove_all(join_path(tmp, manifest_file(r)));
    remove_all(join_path(tmp, ranges_file(r)));
  }
  if (opt.fsync) sync_dir(tmp);
  stage("index_written");

  std::string name = step_name(meta.step);
  std::string final_dir = join_path(root, name);
  check_replaceable_step(final_dir);  // again: it may have changed while the ranks wrote
  if (!path_exists(final_dir)) {
    rename_path(tmp, final_dir);
  } else if (opt.exchange && exchange_paths(tmp, final_dir)) {
    // Saving a step twice replaces it. Swapped in one step, step-<k> is whole at every instant
    // (`latest` may name it); the temp name now holds the old copy, removed below.
  } else {
    // Without an atomic swap the old copy moves aside first so rename() succeeds. Killed between
    // the two renames, step-<k> is missing while both copies are complete: resolve_checkpoint
    // loads one of them, and the next save renames it back into place (repair_latest).
    std::string old_dir = final_dir + ".old-" + std::to_string(::getpid());
    remove_all(old_dir);
    rename_path(final_dir, old_dir);
    stage("moved_aside");
    rename_path(tmp, final_dir);
  }
  if (opt.fsync) sync_dir(root);
  stage("renamed");

  write_file_atomic(join_path(root, kLatestFile), name + "\n");
  stage("latest_updated");

  // Cleanup: the pending marker, temp dirs of interrupted saves, replaced copies, old steps.
  remove_stale_leftovers(root);
  if (opt.keep_last > 0) {
    std::vector<int64_t> steps;
    for (const auto& e : list_dir(root))
      if (published_step(e) >= 0) steps.push_back(published_step(e));
    std::sort(steps.begin(), steps.end());
    for (size_t i = 0; i + opt.keep_last < steps.size(); ++i)
      if (steps[i] != meta.step) remove_all(join_path(root, step_name(steps[i])));
  }
  return final_dir;
}

}  // namespace

std::string save_checkpoint(const std::string& root, const std::vector<CkptShard>& shards,
                            const CheckpointMeta& meta_in, const CkptSync& sync,
                            const json& rank_state, const SaveOptions& opt) {
  check_little_endian();
  SL_CHECK(sync.world >= 1 && sync.rank >= 0 && sync.rank < sync.world, "checkpoint save: rank ",
           sync.rank, " of world ", sync.world);
  SL_CHECK(sync.world == 1 || sync.barrier, "checkpoint save: world ", sync.world,
           " needs a barrier");
  SL_CHECK(meta_in.step >= 0, "checkpoint save: step ", meta_in.step, " is negative");
  auto barrier = [&] {
    if (sync.world > 1) sync.barrier();
  };
  CheckpointMeta meta = meta_in;
  meta.world_size = sync.world;
  std::string name = step_name(meta.step);
  // Rank 0 names the temp dir with its pid and tells the others through a small file, so ranks in
  // different processes agree on it with nothing but a barrier.
  std::string pending = join_path(root, name + ".pending");
  if (sync.rank == 0) {
    make_dirs(root);
    check_replaceable_step(join_path(root, name));
    // Leftovers of earlier failed saves go now, not only after the next success.
    repair_latest(root, opt.fsync);
    remove_stale_leftovers(root);
    std::string tmp_name = name + ".tmp-" + std::to_string(::getpid());
    remove_all(join_path(root, tmp_name));
    make_dirs(join_path(root, tmp_name));
    write_file_atomic(pending, tmp_name);
  }
  barrier();
  std::string tmp_name = read_text_file(pending);
  SL_CHECK(tmp_name.rfind(name + ".tmp-", 0) == 0 && tmp_name.find('/') == std::string::npos,
           pending, ": unexpected content \"", tmp_name, "\"");
  std::string tmp = join_path(root, tmp_name);

  for (const auto& u : shards) check_shard(u, sync.rank);
  auto owned = owned_intervals(tmp, shards, sync.rank, sync.world, barrier);
  write_rank_files(tmp, shards, owned, sync.rank, rank_state, opt.fsync);
  if (opt.on_stage) opt.on_stage("shard_written", sync.rank);
  barrier();

  std::string final_dir = join_path(root, name);
  if (sync.rank == 0) final_dir = publish(root, tmp, meta, sync.world, opt);
  // Nobody returns before the checkpoint is visible (and a failure on rank 0 reaches everyone
  // through the barrier's abort).
  barrier();
  return final_dir;
}

CkptSync ckpt_sync(Communicator& comm) {
  CkptSync s;
  s.rank = comm.rank();
  s.world = comm.size();
  s.barrier = [&comm] { comm.barrier(); };
  return s;
}

std::vector<std::string> stale_temp_dirs(const std::string& root) {
  std::vector<std::string> out;
  if (!is_directory(root)) return out;
  for (const auto& e : list_dir(root))
    if (e.rfind("step-", 0) == 0 && e.find(".tmp-") != std::string::npos)
      out.push_back(join_path(root, e));
  return out;
}

}  // namespace shardlab
