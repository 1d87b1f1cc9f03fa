// Run directory: creation with a default name and overwrite protection, meta.json, per-rank
// recorders, and finish() (summary.json and trace.json from the rank files).
#include "core/trace/run_dir.hpp"

#include <unistd.h>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/base/error.hpp"
#include "core/trace/chrome_trace.hpp"
#include "core/trace/run_reader.hpp"

namespace shardlab {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string safe_path_part(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    out += ok ? c : '_';
  }
  return out.empty() ? "run" : out;
}

// The files a run writes (and an overwrite removes); anything else in the directory is left alone.
bool is_run_file(const std::string& name) {
  if (name == "meta.json" || name == "summary.json" || name == "trace.json") return true;
  if (name.size() >= 11 && name.compare(0, 4, "rank") == 0 &&
      name.compare(name.size() - 6, 6, ".jsonl") == 0)
    return true;
  return name.find(".tmp.") != std::string::npos;
}

bool is_empty_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec) && fs::directory_iterator(p, ec) == fs::directory_iterator();
}

}  // namespace

std::string default_run_name(const json& meta, std::time_t now) {
  std::string name = "run";
  auto it = meta.find("strategy");
  if (it != meta.end() && it->is_string()) name = safe_path_part(it->get<std::string>());
  // A simulated run: "sim-<strategy>-n<simulated ranks>-...". The ranks come from whichever
  // object holds them, so each lookup is checked against its own container's end.
  const json* ranks = nullptr;
  const auto sim = meta.find("simulated");
  if (sim != meta.end() && sim->is_object()) {
    name = "sim-" + name;
    const auto r = sim->find("ranks");
    if (r != sim->end()) ranks = &*r;
  }
  if (ranks == nullptr) {
    const auto w = meta.find("world_size");
    if (w != meta.end()) ranks = &*w;
  }
  // dump() writes the integer's own digits: get<int>() would wrap a world_size above 2^31.
  if (ranks != nullptr && ranks->is_number_integer()) name += "-n" + ranks->dump();
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  return name + "-" + stamp;
}

RunDir RunDir::create(json meta, const RunDirOptions& opts) {
  SL_CHECK(meta.is_object() || meta.is_null(), "run meta must be a JSON object");
  if (meta.is_null()) meta = json::object();
  const auto now = std::chrono::system_clock::now();
  const std::time_t now_t = std::chrono::system_clock::to_time_t(now);

  fs::path dir;
  std::error_code ec;
  if (!opts.dir.empty()) {
    dir = opts.dir;
    if (fs::exists(dir, ec) && !is_empty_dir(dir)) {
      if (!fs::is_directory(dir, ec))
        SL_THROW(InvalidArgument, dir.string(), ": exists and is not a directory");
      if (!opts.overwrite)
        SL_THROW(InvalidArgument, dir.string(),
                 ": run directory exists and is not empty; choose another name or allow overwrite");
      std::vector<fs::path> old;
      for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
        if (is_run_file(it->path().filename().string())) old.push_back(it->path());
      for (const fs::path& p : old)
        if (!fs::remove(p, ec) && ec)
          SL_THROW(IoError, p.string(), ": cannot remove the old run file: ", ec.message());
    }
  } else {
    // Two runs started in the same second get -2, -3, ... rather than sharing a directory.
    const std::string base = default_run_name(meta, now_t);
    dir = fs::path(opts.root) / base;
    for (int k = 2; fs::exists(dir, ec); ++k)
      dir = fs::path(opts.root) / (base + "-" + std::to_string(k));
  }
  fs::create_directories(dir, ec);
  if (ec) SL_THROW(IoError, dir.string(), ": cannot create the run directory: ", ec.message());

  std::tm tm{};
  gmtime_r(&now_t, &tm);
  char iso[32];
  std::strftime(iso, sizeof iso, "%Y-%m-%dT%H:%M:%SZ", &tm);
  meta["start_time"] = iso;
  meta["start_time_unix"] = std::chrono::duration<double>(now.time_since_epoch()).count();
  meta["version"] = SHARDLAB_VERSION;
  write_file_atomic((dir / "meta.json").string(), meta.dump(2) + "\n");
  trace_reset_clock();
  return RunDir(dir.string());
}

RunDir RunDir::open(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) SL_THROW(IoError, dir, ": no such run directory");
  return RunDir(dir);
}

std::string RunDir::rank_path(int rank) const {
  return (fs::path(dir_) / ("rank" + std::to_string(rank) + ".jsonl")).string();
}

std::unique_ptr<Recorder> RunDir::make_recorder(int rank) const {
  return std::make_unique<Recorder>(rank, rank_path(rank));
}

RunSummary RunDir::finish() const {
  const RunData run = read_run(dir_);
  RunSummary s = compute_summary(run);
  write_file_atomic((fs::path(dir_) / "summary.json").string(), summary_to_json(s).dump(2) + "\n");
  write_file_atomic((fs::path(dir_) / "trace.json").string(), chrome_trace_json(run));
  return s;
}

}  // namespace shardlab
