// core/trace run directories end to end: synthetic 2- and 4-rank runs (threads acting as ranks,
// each with a tracker and a communication worker thread) write a run directory; every file is
// parsed and checked against the schema, the summary against the trackers and the recorded spans,
// and trace.json against the Chrome trace event format (validator below).
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/trace/chrome_trace.hpp"
#include "core/trace/recorder.hpp"
#include "core/trace/run_dir.hpp"
#include "core/trace/run_reader.hpp"
#include "core/trace/summary.hpp"

using namespace shardlab;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("shardlab_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ---- the synthetic run ------------------------------------------------------------------------
// Each step s occupies [1000 s, 1000 s + 1000) ns. Compute: forward [0, 400), backward [500, 900).
// Comm (worker thread): all_gather [350, 550) of which [400, 500) is exposed, reduce_scatter
// [850, 1000) of which [900, 1000) is exposed. Per step: comm 350 ns, exposed 200 ns.
constexpr int kSteps = 4;
constexpr int64_t kTokensPerRankStep = 1000;
int64_t ag_bytes(int rank) { return 4096 * (rank + 1); }
constexpr int64_t kRsBytes = 8192;
constexpr int64_t kBcastBytes = 640;
double step_time(int rank, int s) { return 0.01 * (s + 1) + 0.001 * rank; }

struct RankResult {
  MemArray peak{}, at_peak{}, final_cur{};
  int64_t peak_total = 0;
};

RankResult run_rank(const RunDir& rd, int rank) {
  MemoryTracker tracker(rank);
  {
    std::unique_ptr<Recorder> rec = rd.make_recorder(rank);
    rec->attach(tracker);
    tracker.allocate(MemCategory::params, 1000 * (rank + 1));
    tracker.allocate(MemCategory::optimizer_state, 2000 * (rank + 1));
    rec->span(Lane::comm, "broadcast", -1, kBcastBytes, DType::f32, 0, 0, 0);
    rec->mark("start");
    for (int s = 0; s < kSteps; ++s) {
      const int64_t b = 1000 * s;
      // The communication worker records its spans and stages buffers concurrently.
      std::thread worker([&] {
        tracker.allocate(MemCategory::comm_buffers, 512);
        rec->span(Lane::comm, "all_gather", 0, ag_bytes(rank), DType::bf16, b + 300, b + 350,
                  b + 550, b + 540);
        tracker.release(MemCategory::comm_buffers, 512);
        rec->span(Lane::comm, "reduce_scatter", 0, kRsBytes, DType::f32, b + 850, b + 850,
                  b + 1000);
      });
      rec->unit(0, UnitState::gathering);
      tracker.allocate(MemCategory::params_unsharded, 4000);
      rec->unit(0, UnitState::unsharded);
      tracker.allocate(MemCategory::activations, 300 * (s + 1));
      rec->span(Lane::compute, "forward", 0, 0, DType::f32, b, b, b + 400);
      tracker.allocate(MemCategory::grads_unsharded, 2000);
      rec->span(Lane::compute, "backward", 0, 0, DType::f32, b + 500, b + 500, b + 900);
      tracker.release(MemCategory::activations, 300 * (s + 1));
      tracker.release(MemCategory::params_unsharded, 4000);
      tracker.release(MemCategory::grads_unsharded, 2000);
      rec->unit(0, UnitState::resharded);
      worker.join();
      rec->step(s, 3.0 - 0.25 * s, kTokensPerRankStep, step_time(rank, s));
    }
    // Reach the peak total again with another mix: the breakdown "at the peak" is the first one.
    tracker.allocate(MemCategory::workspace, tracker.peak_total() - tracker.total());
    rec->mark("end");
    rec->flush();
  }
  return {tracker.peak_all(), tracker.at_peak(), tracker.current_all(), tracker.peak_total()};
}

// ---- schema of rank<R>.jsonl -----------------------------------------------------------------
void check_event_schema(const json& e, int rank, const std::string& where) {
  ASSERT_TRUE(e.is_object()) << where;
  ASSERT_TRUE(e.at("t").is_number_integer()) << where;
  ASSERT_EQ(e.at("rank"), rank) << where;
  const std::string kind = e.at("kind");
  auto has_int = [&](const char* k) {
    EXPECT_TRUE(e.at(k).is_number_integer()) << where << " " << k;
  };
  auto has_str = [&](const char* k) { EXPECT_TRUE(e.at(k).is_string()) << where << " " << k; };
  if (kind == "mem") {
    has_str("category");
    EXPECT_NO_THROW(parse_mem_category(e.at("category"))) << where;
    has_int("bytes");
    has_int("cat_total");
    has_int("total");
    EXPECT_EQ(e.size(), 7u) << where;
  } else if (kind == "span") {
    EXPECT_TRUE(e.at("lane") == "compute" || e.at("lane") == "comm") << where;
    has_str("op");
    has_int("unit");
    has_int("bytes");
    EXPECT_NO_THROW(parse_dtype(e.at("dtype"))) << where;
    for (const char* k : {"t_issue", "t_start", "t_end", "t_wait"}) has_int(k);
    EXPECT_LE(e.at("t_issue").get<int64_t>(), e.at("t_start").get<int64_t>()) << where;
    EXPECT_LE(e.at("t_start").get<int64_t>(), e.at("t_end").get<int64_t>()) << where;
    EXPECT_EQ(e.size(), 12u) << where;
  } else if (kind == "unit") {
    has_int("unit");
    const std::string st = e.at("state");
    EXPECT_TRUE(st == "sharded" || st == "gathering" || st == "unsharded" || st == "resharded");
    EXPECT_EQ(e.size(), 5u) << where;
  } else if (kind == "step") {
    has_int("step");
    EXPECT_TRUE(e.at("loss").is_number()) << where;
    has_int("tokens");
    EXPECT_TRUE(e.at("step_time").is_number()) << where;
    EXPECT_EQ(e.size(), 7u) << where;
  } else if (kind == "mark") {
    has_str("text");
    EXPECT_EQ(e.size(), 4u) << where;
  } else {
    ADD_FAILURE() << where << ": unknown kind " << kind;
  }
}

}  // namespace

// ---- Chrome trace event format validator ------------------------------------------------------
// Checks what the format (and Perfetto's importer) require: a JSON object with a traceEvents array;
// every event has name, ph, ts >= 0, pid, tid; X has dur >= 0; C has numeric args; M is a known
// metadata kind with args; i has a valid scope; ts never decreases; complete events on one thread
// nest or follow each other; every thread used has a thread_name and every pid a process_name.
// Returns the parsed trace for further checks.
json validate_chrome_trace(const std::string& text) {
  json t = json::parse(text);
  EXPECT_TRUE(t.is_object());
  EXPECT_TRUE(t.at("traceEvents").is_array());
  double last_ts = 0;
  std::set<int> named_pids;
  std::set<std::pair<int, int>> named_threads, used_threads;
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> slices;
  for (const json& e : t.at("traceEvents")) {
    const std::string where = e.dump();
    EXPECT_TRUE(e.at("name").is_string()) << where;
    EXPECT_TRUE(e.at("pid").is_number_integer()) << where;
    EXPECT_TRUE(e.at("tid").is_number_integer()) << where;
    EXPECT_TRUE(e.at("ts").is_number()) << where;
    const double ts = e.at("ts").get<double>();
    EXPECT_GE(ts, 0.0) << where;
    EXPECT_GE(ts, last_ts) << "ts decreases at " << where;
    last_ts = ts;
    const std::string ph = e.at("ph");
    const std::pair<int, int> thread{e.at("pid"), e.at("tid")};
    if (ph == "M") {
      const std::string n = e.at("name");
      EXPECT_TRUE(n == "process_name" || n == "thread_name" || n == "process_sort_index" ||
                  n == "thread_sort_index")
          << where;
      EXPECT_TRUE(e.at("args").is_object()) << where;
      if (n == "process_name") named_pids.insert(thread.first);
      if (n == "thread_name") named_threads.insert(thread);
    } else if (ph == "X") {
      EXPECT_TRUE(e.at("dur").is_number()) << where;
      EXPECT_GE(e.at("dur").get<double>(), 0.0) << where;
      used_threads.insert(thread);
      slices[thread].emplace_back(ts, ts + e.at("dur").get<double>());
    } else if (ph == "C") {
      EXPECT_TRUE(e.at("args").is_object()) << where;
      EXPECT_FALSE(e.at("args").empty()) << where;
      for (const auto& kv : e.at("args").items()) EXPECT_TRUE(kv.value().is_number()) << where;
    } else if (ph == "i" || ph == "I") {
      if (e.contains("s")) {
        const std::string s = e.at("s");
        EXPECT_TRUE(s == "g" || s == "p" || s == "t") << where;
      }
    } else {
      ADD_FAILURE() << "unexpected phase " << ph << " in " << where;
    }
  }
  for (const auto& th : used_threads) {
    EXPECT_TRUE(named_threads.count(th))
        << "pid " << th.first << " tid " << th.second << " unnamed";
    EXPECT_TRUE(named_pids.count(th.first)) << "pid " << th.first << " unnamed";
  }
  // Complete events on one thread: each either ends before the next starts or encloses it.
  for (auto& [th, v] : slices) {
    std::sort(v.begin(), v.end(), [](auto a, auto b) {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    });
    std::vector<double> open;
    for (const auto& [b, e] : v) {
      while (!open.empty() && open.back() <= b) open.pop_back();
      EXPECT_TRUE(open.empty() || open.back() >= e)
          << "pid " << th.first << " tid " << th.second << ": slice [" << b << ", " << e
          << ") overlaps without nesting";
      open.push_back(e);
    }
  }
  return t;
}

class TraceRun : public ::testing::TestWithParam<int> {};

TEST_P(TraceRun, SyntheticRunFilesParseAndMatchTheTrackers) {
  const int world = GetParam();
  const fs::path dir = fresh_dir("trace_run_n" + std::to_string(world));
  json meta = {{"strategy", "full_shard"}, {"world_size", world}, {"backend", "local"},
               {"mesh", {world}},          {"params", 12345},     {"dtypes", {{"param", "f32"}}}};
  const RunDir rd = RunDir::create(meta, {dir.string()});

  std::vector<RankResult> expect(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) ranks.emplace_back([&, r] { expect[r] = run_rank(rd, r); });
  for (auto& t : ranks) t.join();
  const RunSummary sum = rd.finish();

  // meta.json: the caller's fields plus start time and version.
  const json m = json::parse(read_file(dir / "meta.json"));
  EXPECT_EQ(m.at("strategy"), "full_shard");
  EXPECT_EQ(m.at("world_size"), world);
  EXPECT_EQ(m.at("params"), 12345);
  EXPECT_EQ(m.at("version"), SHARDLAB_VERSION);
  EXPECT_EQ(m.at("start_time").get<std::string>().size(), 20u);  // 2024-01-02T03:04:05Z
  EXPECT_TRUE(m.at("start_time_unix").is_number());

  // rank<R>.jsonl: every line is an event of the schema; counts per kind are what was recorded.
  for (int r = 0; r < world; ++r) {
    std::ifstream f(dir / ("rank" + std::to_string(r) + ".jsonl"));
    std::string line;
    std::map<std::string, int> kinds;
    int n = 0;
    while (std::getline(f, line)) {
      ++n;
      const json e = json::parse(line);
      check_event_schema(e, r, "rank" + std::to_string(r) + ".jsonl:" + std::to_string(n));
      kinds[e.at("kind")]++;
    }
    EXPECT_EQ(kinds["span"], 1 + 4 * kSteps);
    EXPECT_EQ(kinds["step"], kSteps);
    EXPECT_EQ(kinds["unit"], 3 * kSteps);
    EXPECT_EQ(kinds["mark"], 2);
    EXPECT_EQ(kinds["mem"], 3 + 8 * kSteps);
  }

  // Memory: replaying the events gives each tracker's peaks and its breakdown at the peak exactly.
  ASSERT_EQ(sum.ranks.size(), static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(sum.ranks[r].peak, expect[r].peak) << "rank " << r;
    EXPECT_EQ(sum.ranks[r].at_peak, expect[r].at_peak) << "rank " << r;
    EXPECT_EQ(sum.ranks[r].peak_total, expect[r].peak_total) << "rank " << r;
    EXPECT_EQ(sum.ranks[r].peak[static_cast<int>(MemCategory::activations)], 300 * kSteps);
    EXPECT_EQ(sum.ranks[r].at_peak[static_cast<int>(MemCategory::workspace)], 0);
    EXPECT_GT(sum.ranks[r].peak[static_cast<int>(MemCategory::workspace)], 0);
  }

  // Comm bytes by op and dtype, per rank and in total, and per step.
  int64_t ag_total = 0;
  for (int r = 0; r < world; ++r) {
    std::map<std::string, CommStat> by;
    for (const CommStat& c : sum.ranks[r].comm) by[c.op] = c;
    ASSERT_EQ(by.size(), 3u);
    EXPECT_EQ(by["all_gather"].dtype, DType::bf16);
    EXPECT_EQ(by["all_gather"].calls, kSteps);
    EXPECT_EQ(by["all_gather"].bytes, kSteps * ag_bytes(r));
    EXPECT_EQ(by["all_gather"].bytes_per_step, static_cast<double>(ag_bytes(r)));
    EXPECT_EQ(by["reduce_scatter"].dtype, DType::f32);
    EXPECT_EQ(by["reduce_scatter"].bytes, kSteps * kRsBytes);
    EXPECT_EQ(by["broadcast"].bytes, kBcastBytes);
    ag_total += kSteps * ag_bytes(r);
  }
  ASSERT_EQ(sum.comm.size(), 3u);
  EXPECT_EQ(sum.comm[0].op, "all_gather");  // sorted by op
  EXPECT_EQ(sum.comm[0].bytes, ag_total);
  EXPECT_EQ(sum.comm[0].bytes_per_step, static_cast<double>(ag_total) / kSteps);
  EXPECT_EQ(sum.comm[2].op, "reduce_scatter");
  EXPECT_EQ(sum.comm[2].bytes, world * kSteps * kRsBytes);

  // Exposed comm: 200 of 350 ns per step on every rank (see the schedule above).
  for (const RankSummary& r : sum.ranks) {
    EXPECT_EQ(r.comm_ns, 350 * kSteps);
    EXPECT_EQ(r.exposed_comm_ns, 200 * kSteps);
    EXPECT_EQ(r.compute_ns, 800 * kSteps);
  }
  EXPECT_DOUBLE_EQ(sum.exposed_comm_fraction, 200.0 / 350.0);

  // Steps: a step takes the slowest rank's time; step 0 is left out as warm-up (4 > 2 steps).
  const double c = 0.001 * (world - 1);
  EXPECT_EQ(sum.step_time.steps, kSteps);
  EXPECT_EQ(sum.step_time.measured, kSteps - 1);
  EXPECT_TRUE(sum.step_time.warmup_excluded);
  EXPECT_NEAR(sum.step_time.min_s, 0.02 + c, 1e-12);
  EXPECT_NEAR(sum.step_time.max_s, 0.04 + c, 1e-12);
  EXPECT_NEAR(sum.step_time.mean_s, 0.03 + c, 1e-12);
  EXPECT_NEAR(sum.step_time.median_s, 0.03 + c, 1e-12);
  EXPECT_NEAR(sum.tokens_per_s, 3.0 * world * kTokensPerRankStep / (0.09 + 3 * c), 1e-6);
  EXPECT_DOUBLE_EQ(sum.tokens_per_step, static_cast<double>(world * kTokensPerRankStep));

  // summary.json holds the same numbers, and recomputing from the files reproduces it.
  const json sj = json::parse(read_file(dir / "summary.json"));
  EXPECT_EQ(sj, summary_to_json(sum));
  EXPECT_EQ(sj, summary_to_json(compute_summary(read_run(dir.string()))));
  EXPECT_EQ(sj.at("ranks").at(0).at("peak_bytes").at("params"), 1000);

  // trace.json: valid Chrome trace; one process per rank; spans, memory and steps all present.
  const json tr = validate_chrome_trace(read_file(dir / "trace.json"));
  std::map<int, int64_t> comm_bytes;
  std::map<int, json> last_memory;
  int x_events = 0, steps = 0;
  std::set<std::string> process_names;
  for (const json& e : tr.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "process_name")
      process_names.insert(e.at("args").at("name").get<std::string>());
    if (e.at("ph") == "X") {
      ++x_events;
      if (e.at("tid").get<int>() % 2 == 1)
        comm_bytes[e.at("pid")] += e.at("args").at("bytes").get<int64_t>();
    }
    if (e.at("ph") == "C") last_memory[e.at("pid")] = e.at("args");
    if (e.at("ph") == "i" && e.at("s") == "p") ++steps;
  }
  EXPECT_EQ(static_cast<int>(process_names.size()), world);
  EXPECT_EQ(x_events, world * (1 + 4 * kSteps));
  EXPECT_EQ(steps, world * kSteps);
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(comm_bytes[r], kBcastBytes + kSteps * (ag_bytes(r) + kRsBytes));
    for (int k = 0; k < kNumMemCategories; ++k) {
      const char* name = mem_category_name(static_cast<MemCategory>(k));
      if (static_cast<MemCategory>(k) == MemCategory::unattributed) {  // imported runs only
        EXPECT_FALSE(last_memory[r].contains(name));
        continue;
      }
      EXPECT_EQ(last_memory[r].at(name).get<int64_t>(), expect[r].final_cur[k]);
    }
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Trace, TraceRun, ::testing::Values(2, 4));

TEST(TraceRunDir, RefusesToOverwriteUnlessAsked) {
  const fs::path dir = fresh_dir("trace_overwrite");
  {
    const RunDir rd = RunDir::create({{"strategy", "no_shard"}}, {dir.string()});
    rd.make_recorder(0)->mark("first run");
  }
  try {
    RunDir::create({{"strategy", "no_shard"}}, {dir.string()});
    FAIL() << "no throw";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(dir.string()), std::string::npos) << e.what();
  }
  // Asked to: the old rank files go, so the new run does not append to them.
  std::ofstream(dir / "notes.txt") << "kept";
  RunDirOptions o{dir.string()};
  o.overwrite = true;
  const RunDir rd = RunDir::create({{"strategy", "full_shard"}}, o);
  EXPECT_FALSE(fs::exists(dir / "rank0.jsonl"));
  EXPECT_TRUE(fs::exists(dir / "notes.txt"));
  EXPECT_EQ(json::parse(read_file(dir / "meta.json")).at("strategy"), "full_shard");
  // An existing but empty directory is fine without overwrite.
  const fs::path empty = fresh_dir("trace_empty_dir");
  fs::create_directories(empty);
  EXPECT_NO_THROW(RunDir::create(json::object(), {empty.string()}));
  fs::remove_all(dir);
  fs::remove_all(empty);
}

TEST(TraceRunDir, DefaultNameFromStrategyWorldAndTime) {
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 4;
  tm.tm_mday = 6;
  tm.tm_hour = 7;
  tm.tm_min = 8;
  tm.tm_sec = 9;
  tm.tm_isdst = -1;
  const std::time_t t = std::mktime(&tm);
  EXPECT_EQ(default_run_name({{"strategy", "full_shard"}, {"world_size", 4}}, t),
            "full_shard-n4-20240506-070809");
  EXPECT_EQ(default_run_name(json::object(), t), "run-20240506-070809");
  EXPECT_EQ(default_run_name({{"strategy", "../x y"}}, t), ".._x_y-20240506-070809");
  // A simulated run is named by the ranks it stands for, not the one rank that ran.
  EXPECT_EQ(
      default_run_name(
          {{"strategy", "full_shard"}, {"world_size", 1}, {"simulated", {{"ranks", 1024}}}}, t),
      "sim-full_shard-n1024-20240506-070809");
  EXPECT_EQ(default_run_name(
                {{"strategy", "no_shard"}, {"world_size", 8}, {"simulated", json::object()}}, t),
            "sim-no_shard-n8-20240506-070809");

  // Two runs in the same second under one root get distinct directories.
  const fs::path root = fresh_dir("trace_root");
  const json meta = {{"strategy", "hybrid_shard"}, {"world_size", 2}};
  RunDirOptions o;
  o.root = root.string();
  const RunDir a = RunDir::create(meta, o);
  const RunDir b = RunDir::create(meta, o);
  EXPECT_NE(a.path(), b.path());
  EXPECT_EQ(fs::path(a.path()).parent_path(), root);
  EXPECT_EQ(fs::path(a.path()).filename().string().rfind("hybrid_shard-n2-", 0), 0u) << a.path();
  fs::remove_all(root);
}

TEST(TraceRunDir, AtomicWriteLeavesNoTemporaryAndReplaces) {
  const fs::path dir = fresh_dir("trace_atomic");
  fs::create_directories(dir);
  const std::string p = (dir / "x.json").string();
  write_file_atomic(p, "one");
  write_file_atomic(p, "two");
  EXPECT_EQ(read_file(p), "two");
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
  EXPECT_THROW(write_file_atomic((dir / "missing" / "x.json").string(), "x"), IoError);
  fs::remove_all(dir);
}

TEST(TraceChrome, OverlappingSpansGoToExtraThreadsAndNestedStay) {
  RunData run;
  run.dir = "synthetic";
  run.ranks.resize(1);
  auto span = [](Lane l, const char* op, int64_t s, int64_t e) {
    return SpanEvent{l, op, -1, 0, DType::f32, s, s, e, -1};
  };
  // Nested compute spans stay on tid 0; two comm spans in flight at once need two threads.
  run.ranks[0].spans = {
      span(Lane::compute, "forward", 0, 1000), span(Lane::compute, "attention", 100, 400),
      span(Lane::comm, "all_gather", 0, 600), span(Lane::comm, "all_gather", 500, 900),
      span(Lane::comm, "reduce_scatter", 950, 1200)};
  const json t = validate_chrome_trace(chrome_trace_json(run));
  std::map<std::string, std::vector<int>> tids;
  std::map<int, std::string> thread_names;
  for (const json& e : t.at("traceEvents")) {
    if (e.at("ph") == "X") tids[e.at("name")].push_back(e.at("tid"));
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      thread_names[e.at("tid")] = e.at("args").at("name");
  }
  EXPECT_EQ(tids["forward"], std::vector<int>({0}));
  EXPECT_EQ(tids["attention"], std::vector<int>({0}));
  EXPECT_EQ(tids["all_gather"], std::vector<int>({1, 3}));
  EXPECT_EQ(tids["reduce_scatter"], std::vector<int>({1}));
  EXPECT_EQ(thread_names[0], "compute");
  EXPECT_EQ(thread_names[1], "comm");
  EXPECT_EQ(thread_names[3], "comm #2");
  // ts and dur in microseconds, exact.
  for (const json& e : t.at("traceEvents"))
    if (e.at("ph") == "X" && e.at("name") == "reduce_scatter") {
      EXPECT_DOUBLE_EQ(e.at("ts").get<double>(), 0.95);
      EXPECT_DOUBLE_EQ(e.at("dur").get<double>(), 0.25);
    }
}

TEST(TraceChrome, OffloadCopyLaneAndHostMemoryHaveTheirOwnTracks) {
  RunData run;
  run.dir = "synthetic";
  run.ranks.resize(2);
  for (int r = 0; r < 2; ++r) {
    RankTrace& rt = run.ranks[r];
    rt.spans = {SpanEvent{Lane::compute, "forward", 0, 0, DType::f32, 0, 0, 1000, -1},
                SpanEvent{Lane::copy, "h2d", 1, 4096, DType::f32, 100, 100, 300, -1},
                SpanEvent{Lane::copy, "d2h", 1, 4096, DType::f32, 900, 900, 1100, -1},
                SpanEvent{Lane::comm, "all_gather", 1, 8192, DType::f32, 300, 300, 700, -1}};
    rt.mem = {{0, MemCategory::params_unsharded, 8192, 8192, 8192}};
    rt.host_mem = {{0, MemCategory::optimizer_state, 1000, 1000, 1000},
                   {50, MemCategory::params, 4096, 4096, 5096}};
  }
  const json t = validate_chrome_trace(chrome_trace_json(run));
  std::map<std::pair<int, int>, std::string> thread_names;
  std::map<std::string, std::vector<std::pair<int, int>>> where;    // op -> (pid, tid)
  std::map<int, std::vector<json>> host_counters, device_counters;  // pid -> args
  for (const json& e : t.at("traceEvents")) {
    const std::pair<int, int> th{e.at("pid"), e.at("tid")};
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      thread_names[th] = e.at("args").at("name");
    if (e.at("ph") == "X") {
      where[e.at("name")].push_back(th);
      if (e.at("name") == "h2d" || e.at("name") == "d2h") {
        EXPECT_EQ(e.at("cat"), "copy");
        EXPECT_EQ(e.at("args").at("bytes"), 4096);
      }
    }
    if (e.at("ph") == "C" && e.at("name") == "host memory")
      host_counters[e.at("pid")].push_back(e.at("args"));
    if (e.at("ph") == "C" && e.at("name") == "memory")
      device_counters[e.at("pid")].push_back(e.at("args"));
  }
  for (int r = 0; r < 2; ++r) {
    // The copies on their own thread "copy", apart from compute (0) and comm (1).
    EXPECT_EQ(thread_names[std::make_pair(r, 1000)], "copy") << r;
    for (const char* op : {"h2d", "d2h"})
      EXPECT_EQ(where[op], (std::vector<std::pair<int, int>>{{0, 1000}, {1, 1000}})) << op;
    EXPECT_EQ(where["all_gather"], (std::vector<std::pair<int, int>>{{0, 1}, {1, 1}}));
    // The host tier: its own counter, every category, the totals the events carried.
    ASSERT_EQ(host_counters[r].size(), 2u) << r;
    EXPECT_EQ(host_counters[r][0].at("optimizer_state"), 1000);
    EXPECT_EQ(host_counters[r][1].at("optimizer_state"), 1000);
    EXPECT_EQ(host_counters[r][1].at("params"), 4096);
    EXPECT_EQ(host_counters[r][1].at("params_unsharded"), 0);
    ASSERT_EQ(device_counters[r].size(), 1u) << r;
    EXPECT_EQ(device_counters[r][0].at("params"), 0) << "host bytes stay out of the device counter";
  }
}

TEST(TraceSummary, IntervalArithmetic) {
  const auto u = interval_union({{5, 10}, {0, 3}, {2, 4}, {10, 12}, {20, 20}});
  EXPECT_EQ(u, (std::vector<Interval>{{0, 4}, {5, 12}}));
  EXPECT_EQ(total_length(u), 11);
  // comm [0,4) and [5,12) against compute [1,2) and [6,20): not covered 0-1, 2-4, 5-6 = 4.
  EXPECT_EQ(length_not_covered(u, interval_union({{1, 2}, {6, 20}})), 4);
  EXPECT_EQ(length_not_covered(u, {}), 11);
  EXPECT_EQ(length_not_covered({}, u), 0);
  EXPECT_EQ(length_not_covered(u, {{-5, 100}}), 0);
}

// Sums of bytes, tokens and span lengths used to overflow int64 (undefined behaviour; UBSan at
// summary.cpp) on hostile events; they now hold at INT64_MAX.
TEST(TraceSummary, SumsSaturateInsteadOfOverflowing) {
  constexpr int64_t kBig = INT64_MAX / 2 + 1;
  EXPECT_EQ(saturating_add(kBig, kBig), INT64_MAX);
  EXPECT_EQ(saturating_add(-kBig, -kBig - 1), INT64_MIN);
  EXPECT_EQ(saturating_add(5, -7), -2);
  EXPECT_EQ(total_length({{INT64_MIN, 0}, {1, INT64_MAX}}), INT64_MAX);
  EXPECT_EQ(length_not_covered({{INT64_MIN, INT64_MAX}}, {}), INT64_MAX);

  RunData run;
  run.ranks.resize(2);
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < 2; ++k)
      run.ranks[r].spans.push_back({Lane::comm, "all_gather", 0, kBig, DType::f32, 0, 0, 10, -1});
    run.ranks[r].steps = {{10, 0, 1.0, kBig, 0.5}};
  }
  const RunSummary s = compute_summary(run);
  ASSERT_EQ(s.comm.size(), 1u);
  EXPECT_EQ(s.comm[0].calls, 4);
  EXPECT_EQ(s.comm[0].bytes, INT64_MAX);
  EXPECT_EQ(s.ranks[0].comm[0].bytes, INT64_MAX);
  EXPECT_GT(s.tokens_per_step, 0.0);
  EXPECT_EQ(s.tokens_per_step, static_cast<double>(INT64_MAX));
}

TEST(TraceSummary, TwoStepsKeepBothAndNoCommIsZeroExposed) {
  RunData run;
  run.ranks.resize(1);
  run.ranks[0].steps = {{10, 0, 2.0, 100, 0.5}, {20, 1, 1.5, 100, 0.25}};
  const RunSummary s = compute_summary(run);
  EXPECT_FALSE(s.step_time.warmup_excluded);
  EXPECT_EQ(s.step_time.measured, 2);
  EXPECT_DOUBLE_EQ(s.step_time.median_s, 0.375);
  EXPECT_DOUBLE_EQ(s.tokens_per_s, 200 / 0.75);
  EXPECT_EQ(s.exposed_comm_fraction, 0.0);
  EXPECT_TRUE(s.comm.empty());
}

TEST(TraceSummary, PrintsTheUnitsMetaNames) {
  // shardlab train's meta.json: the wrap policy in config, the units by id; more than 8 are cut.
  const fs::path dir = fresh_dir("trace_units");
  nlohmann::json units = nlohmann::json::array();
  units.push_back({{"name", "root"}, {"numel", 10}});
  for (int l = 0; l < 10; ++l) units.push_back({{"name", "block " + std::to_string(l)}});
  const RunDir rd = RunDir::create({{"strategy", "full_shard"},
                                    {"world_size", 2},
                                    {"config", {{"wrap", "block"}}},
                                    {"units", units}},
                                   {dir.string()});
  for (int r = 0; r < 2; ++r) run_rank(rd, r);
  rd.finish();
  std::ostringstream os;
  EXPECT_EQ(print_summary(dir.string(), os), 0);
  EXPECT_NE(os.str().find("units 11 (wrap block): root | block 0 | block 1 | block 2 | block 3 | "
                          "block 4 | block 5 | block 6 ... (3 more)\n"),
            std::string::npos)
      << os.str();
  if (!std::getenv("SHARDLAB_KEEP_TEST_RUNS")) fs::remove_all(dir);
}

TEST(TraceSummary, PrintsTablesAndFailsOnMissingRun) {
  const fs::path dir = fresh_dir("trace_print");
  const RunDir rd = RunDir::create(
      {{"strategy", "shard_grad_op"}, {"world_size", 2}, {"backend", "local"}}, {dir.string()});
  for (int r = 0; r < 2; ++r) run_rank(rd, r);
  rd.finish();
  std::ostringstream os;
  EXPECT_EQ(print_summary(dir.string(), os), 0);
  const std::string out = os.str();
  EXPECT_NE(out.find("strategy shard_grad_op"), std::string::npos) << out;
  EXPECT_NE(out.find("exposed comm 57.1%"), std::string::npos) << out;  // 200 / 350
  EXPECT_NE(out.find("reduce_scatter"), std::string::npos) << out;
  EXPECT_NE(out.find("first excluded as warm-up"), std::string::npos) << out;
  EXPECT_EQ(out.find("units "), std::string::npos) << "this meta.json names no units";
  std::ostringstream none;
  EXPECT_EQ(print_summary((dir / "nope").string(), none), 1);
  if (!std::getenv("SHARDLAB_KEEP_TEST_RUNS")) fs::remove_all(dir);
}

// ---- per step, and runs compared (shardlab summary) ---------------------------------------------

namespace {

// A synthetic run of `steps` steps of 1000 ns on `n` ranks, in the schedule of the TraceRun test:
// compute [0, 400) and [500, 900), an all-gather [350, 550) and a reduce-scatter [850, 1000) per
// step (comm 350 ns, 200 exposed), each step event at the step's end. `waits[s][r]`: rank r's
// wait in step s (exact, on every comm span's first), none when empty. `gather` scales the
// all-gather's bytes and sent.
RunData synthetic_steps(int n, int steps, const std::vector<std::vector<int64_t>>& waits = {},
                        int64_t gather = 1) {
  RunData run;
  run.dir = "synthetic";
  run.meta = {{"strategy", "full_shard"}, {"world_size", n}, {"model", {{"num_params", 1000}}}};
  run.ranks.resize(n);
  for (int r = 0; r < n; ++r) {
    RankTrace& rt = run.ranks[r];
    for (int s = 0; s < steps; ++s) {
      const int64_t b = 1000 * s;
      SpanEvent ag{Lane::comm, "all_gather", 1, 4000 * gather, DType::f32, b + 350,
                   b + 350,    b + 550,      -1};
      ag.sent = 3000 * gather;
      if (!waits.empty()) ag.wait_ns = waits[s][r];
      SpanEvent rs{Lane::comm, "reduce_scatter", 1,        4000, DType::f32,
                   b + 850,    b + 850,          b + 1000, -1};
      rs.sent = 3000;
      if (!waits.empty()) rs.wait_ns = 0;
      rt.spans.push_back({Lane::compute, "forward", 1, 0, DType::f32, b, b, b + 400, -1});
      rt.spans.push_back(ag);
      rt.spans.push_back(
          {Lane::compute, "backward", 1, 0, DType::f32, b + 500, b + 500, b + 900, -1});
      rt.spans.push_back(rs);
      rt.steps.push_back({b + 1000, s + 1, 2.0, 64, 1e-6});
    }
  }
  return run;
}

// The text with every run of spaces as one: tables compared without their column widths.
std::string squash(const std::string& s) {
  std::string out;
  for (char c : s)
    if (c != ' ' || out.empty() || out.back() != ' ') out += c;
  return out;
}

}  // namespace

TEST(TraceSummary, PerStepFiguresAreMeansOverTheMeasuredSteps) {
  // 5 steps: the first is left out as warm-up; each measured step has comm 350 ns, 200 exposed,
  // compute 800 ns on every rank. The run totals count all 5.
  const RunSummary s = compute_summary(synthetic_steps(2, 5));
  for (const RankSummary& r : s.ranks) {
    EXPECT_EQ(r.measured_steps, 4);
    EXPECT_DOUBLE_EQ(r.compute_ns_per_step, 800);
    EXPECT_DOUBLE_EQ(r.comm_ns_per_step, 350);
    EXPECT_DOUBLE_EQ(r.exposed_comm_ns_per_step, 200);
    EXPECT_EQ(r.comm_ns, 5 * 350);
  }
  EXPECT_DOUBLE_EQ(s.comm_ns_per_step, 350);
  EXPECT_DOUBLE_EQ(s.exposed_comm_ns_per_step, 200);
  const nlohmann::json j = summary_to_json(s);
  EXPECT_DOUBLE_EQ(j.at("comm_per_step_per_rank").at("calls").get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j.at("comm_per_step_per_rank").at("sent").get<double>(), 6000.0);
  EXPECT_DOUBLE_EQ(j.at("ranks").at(1).at("per_step").at("exposed_comm_ns").get<double>(), 200);

  // The table: per step where the heading says per step (one call of each op per step and rank),
  // and the run totals labelled as totals.
  std::ostringstream os;
  print_summary_table(s, nlohmann::json::object(), os);
  const std::string t = squash(os.str());
  for (const char* want :
       {"communication per step and rank (the run's sums / 5 steps / 2 ranks;",
        "\nall_gather f32 1 2.93 KiB 3.91 KiB\n", "\ntotal 2 5.86 KiB 7.81 KiB\n",
        "\nrun totals, all ranks and steps: 20 calls, sent 58.59 KiB, buffer 78.12 KiB\n",
        "\ntime per step and rank (mean over the 4 measured steps;", "\n0 0.001 0.000 0.000 57.1\n",
        "\nexposed comm 57.1% of comm time: 0.000 of 0.000 ms per step and rank"})
    EXPECT_NE(t.find(want), std::string::npos) << want << "\n" << t;
}

TEST(TraceSummary, ComparisonGivesPerStepBytesAndTheirRatios) {
  // The second run's all-gather moves twice the bytes: 3000 + 3000 against 6000 + 3000 sent per
  // step and rank, 1.50x; buffers 8000 against 12000, 1.50x.
  const RunData a = synthetic_steps(2, 4), b = synthetic_steps(2, 4, {}, 2);
  std::ostringstream os;
  print_summary_comparison({"runs/a", "runs/b"}, {compute_summary(a), compute_summary(b)},
                           {a.meta, b.meta}, os);
  const std::string t = squash(os.str());
  EXPECT_NE(t.find("\nper step and rank:\n"), std::string::npos) << t;
  EXPECT_NE(t.find("\n all_gather sent per rank 2.93 KiB 5.86 KiB\n"), std::string::npos) << t;
  EXPECT_NE(t.find("\nruns/b against runs/a, per step and rank: sent per rank 1.50x, buffer 1.50x"),
            std::string::npos)
      << t;
}

TEST(Stragglers, NamedOnlyBeyondTheRunsNoise) {
  // Rank 1 arrives last in every step and the others wait ~300 ns for it: named, lead 300.
  {
    const RunData run = synthetic_steps(
        3, 6,
        {{9, 0, 9}, {300, 0, 310}, {290, 5, 300}, {310, 0, 305}, {300, 2, 296}, {295, 0, 300}});
    const Straggler g = compute_summary(run).stragglers.straggler;
    EXPECT_EQ(g.rank, 1);
    EXPECT_EQ(g.steps, 5);  // the warm-up step left out
    EXPECT_TRUE(g.named()) << g.lead_ns << " " << g.threshold_ns;
    EXPECT_NEAR(g.lead_ns, 299, 5);
  }
  // A real straggler's lead swings with its own slowness (here 90 to 230 ns, spread 59 ns): its
  // median, 160 ns, stands 4.8 standard errors (33 ns) above zero: named.
  {
    const RunData run =
        synthetic_steps(2, 6, {{9, 0}, {120, 0}, {200, 0}, {160, 0}, {90, 0}, {230, 0}});
    const Straggler g = compute_summary(run).stragglers.straggler;
    EXPECT_EQ(g.rank, 1);
    EXPECT_NEAR(g.lead_ns, 160, 1e-6);
    EXPECT_NEAR(g.noise_ns, 1.4826 * 40, 1e-6);
    EXPECT_NEAR(g.error_ns, 1.2533 * 1.4826 * 40 / std::sqrt(5.0), 1e-6);
    EXPECT_TRUE(g.named()) << g.lead_ns << " " << g.threshold_ns;
  }
  // The rank that waits least changes from step to step: some rank always waits least, but the
  // lead of the one that waited least overall swings around zero: none named.
  {
    const RunData run = synthetic_steps(
        3, 6,
        {{0, 0, 0}, {300, 0, 200}, {0, 300, 250}, {250, 300, 0}, {0, 280, 300}, {310, 0, 260}});
    const Straggler g = compute_summary(run).stragglers.straggler;
    EXPECT_GE(g.rank, 0);
    EXPECT_FALSE(g.named()) << g.lead_ns << " " << g.threshold_ns;
    std::ostringstream os;
    print_stragglers(compute_summary(run).stragglers, os);
    EXPECT_NE(os.str().find("straggler: none beyond this run's noise"), std::string::npos)
        << os.str();
    // The lead step by step still shows, swinging: the reason for the verdict.
    EXPECT_NE(os.str().find("lead by step"), std::string::npos) << os.str();
  }
  // A steady lead of 20 ns in steps of 1000 ns: under 5% of the step, not named.
  {
    const RunData run =
        synthetic_steps(2, 6, {{0, 0}, {20, 0}, {20, 0}, {21, 0}, {20, 0}, {19, 0}});
    const Straggler g = compute_summary(run).stragglers.straggler;
    EXPECT_EQ(g.rank, 1);
    EXPECT_NEAR(g.threshold_ns, 0.05 * 1000, 1e-6);
    EXPECT_FALSE(g.named());
  }
}

// Exposed comm by op and unit: each collective of the measured steps against its rank's compute
// (the warm-up step left out), collectives in flight together each counting their own time, the
// most exposed first, and the table naming the units from meta.json.
TEST(Summary, ExposedCommByOpAndUnit) {
  RunData run;
  run.meta = {{"world_size", 1},
              {"units", json::array({{{"name", "root"}}, {{"name", "blocks.0"}}})}};
  RankTrace rt;
  auto span = [&](Lane lane, const char* op, int unit, int64_t a, int64_t b) {
    rt.spans.push_back({lane, op, unit, 0, DType::f32, a, a, b, -1});
  };
  for (int64_t base : {0, 100, 200}) {  // steps end at 100, 200, 300; the first is the warm-up
    span(Lane::compute, "forward", 0, base + 10, base + 50);
    span(Lane::comm, "all_gather", 0, base, base + 20);           // 10 of 20 exposed
    span(Lane::comm, "reduce_scatter", 1, base + 40, base + 70);  // 20 of 30
    rt.steps.push_back({base + 100, static_cast<int>(base / 100) + 1, 1.0, 1, 1e-7});
  }
  span(Lane::comm, "all_reduce", -1, 160, 180);  // overlaps no compute; the rs above until 170
  run.ranks.push_back(rt);
  const RunSummary s = compute_summary(run);
  EXPECT_EQ(s.measured_steps, 2);
  ASSERT_EQ(s.exposed.size(), 3u);
  EXPECT_EQ(s.exposed[0].op, "reduce_scatter");
  EXPECT_EQ(s.exposed[0].unit, 1);
  EXPECT_EQ(s.exposed[0].calls, 2);
  EXPECT_EQ(s.exposed[0].comm_ns, 60);
  EXPECT_EQ(s.exposed[0].exposed_ns, 40);
  EXPECT_EQ(s.exposed[1].op, "all_gather");
  EXPECT_EQ(s.exposed[1].calls, 2);
  EXPECT_EQ(s.exposed[1].exposed_ns, 20);
  EXPECT_EQ(s.exposed[2].op, "all_reduce");
  EXPECT_EQ(s.exposed[2].exposed_ns, 20);
  std::ostringstream os;
  print_summary_table(s, run.meta, os);
  EXPECT_NE(os.str().find("reduce_scatter   blocks.0               1.00         0.000"),
            std::string::npos)
      << os.str();
  const json j = summary_to_json(s);
  EXPECT_EQ(j.at("exposed_by_op_and_unit").at("sums_over_ranks")[0].at("exposed_ns"), 40);
}
