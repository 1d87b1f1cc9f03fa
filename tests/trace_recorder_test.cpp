// core/trace/recorder: event lines and their schema, the tracker listener, thread safety, flushing
// to a file, and the disabled recorder.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/trace/recorder.hpp"

using namespace shardlab;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::vector<json> parse_lines(const std::string& text) {
  std::vector<json> out;
  std::istringstream is(text);
  std::string line;
  while (std::getline(is, line)) out.push_back(json::parse(line));
  return out;
}

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("shardlab_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST(TraceRecorder, EveryKindHasItsFields) {
  trace_reset_clock();
  Recorder rec(3, "");
  rec.mem({MemCategory::grads, 256, 256, 1000});
  rec.span(Lane::comm, "all_gather", 2, 4096, DType::bf16, 10, 20, 30, 25);
  rec.unit(2, UnitState::gathering);
  rec.step(7, 2.5, 1024, 0.125);
  rec.mark("say \"hi\"\n\\");
  EXPECT_EQ(rec.event_count(), 5);
  std::vector<json> ev = parse_lines(rec.buffered_text());
  ASSERT_EQ(ev.size(), 5u);
  for (const json& e : ev) {
    EXPECT_EQ(e.at("rank"), 3);
    EXPECT_GE(e.at("t").get<int64_t>(), 0);
  }
  EXPECT_EQ(ev[0].at("kind"), "mem");
  EXPECT_EQ(ev[0].at("category"), "grads");
  EXPECT_EQ(ev[0].at("bytes"), 256);
  EXPECT_EQ(ev[0].at("cat_total"), 256);
  EXPECT_EQ(ev[0].at("total"), 1000);
  EXPECT_EQ(ev[1].at("kind"), "span");
  EXPECT_EQ(ev[1].at("lane"), "comm");
  EXPECT_EQ(ev[1].at("op"), "all_gather");
  EXPECT_EQ(ev[1].at("unit"), 2);
  EXPECT_EQ(ev[1].at("bytes"), 4096);
  EXPECT_EQ(ev[1].at("dtype"), "bf16");
  EXPECT_EQ(ev[1].at("t"), 30);  // a span's time is its end
  EXPECT_EQ(ev[1].at("t_issue"), 10);
  EXPECT_EQ(ev[1].at("t_start"), 20);
  EXPECT_EQ(ev[1].at("t_end"), 30);
  EXPECT_EQ(ev[1].at("t_wait"), 25);
  EXPECT_EQ(ev[2].at("kind"), "unit");
  EXPECT_EQ(ev[2].at("state"), "gathering");
  EXPECT_EQ(ev[3].at("kind"), "step");
  EXPECT_EQ(ev[3].at("step"), 7);
  EXPECT_EQ(ev[3].at("loss").get<double>(), 2.5);
  EXPECT_EQ(ev[3].at("tokens"), 1024);
  EXPECT_EQ(ev[3].at("step_time").get<double>(), 0.125);
  EXPECT_EQ(ev[4].at("text"), "say \"hi\"\n\\");
}

TEST(TraceRecorder, DoublesRoundTripAndNonFiniteIsNull) {
  Recorder rec(0, "");
  const double loss = 0.1 + 0.2;  // not a short decimal: must come back bit for bit
  rec.step(0, loss, 1, 1.0 / 3.0);
  rec.step(1, std::nan(""), 1, 0.5);
  std::vector<json> ev = parse_lines(rec.buffered_text());
  EXPECT_EQ(ev[0].at("loss").get<double>(), loss);
  EXPECT_EQ(ev[0].at("step_time").get<double>(), 1.0 / 3.0);
  EXPECT_TRUE(ev[1].at("loss").is_null());
}

TEST(TraceRecorder, AttachedTrackerChangesBecomeMemEvents) {
  MemoryTracker tracker(1);
  {
    Recorder rec(1, "");
    rec.attach(tracker);
    tracker.allocate(MemCategory::params, 100);
    tracker.allocate(MemCategory::activations, 40);
    tracker.release(MemCategory::params, 100);
    std::vector<json> ev = parse_lines(rec.buffered_text());
    ASSERT_EQ(ev.size(), 3u);
    EXPECT_EQ(ev[2].at("category"), "params");
    EXPECT_EQ(ev[2].at("bytes"), -100);
    EXPECT_EQ(ev[2].at("cat_total"), 0);
    EXPECT_EQ(ev[2].at("total"), 40);
  }
  // The recorder detached itself: the tracker keeps working after it is gone.
  tracker.allocate(MemCategory::params, 8);
  EXPECT_EQ(tracker.total(), 48);
}

TEST(TraceRecorder, DisabledRecordsNothing) {
  MemoryTracker tracker(0);
  auto rec = Recorder::disabled(5);
  EXPECT_FALSE(rec->enabled());
  EXPECT_EQ(rec->rank(), 5);
  rec->attach(tracker);
  tracker.allocate(MemCategory::params, 10);
  rec->span(Lane::compute, "forward", 0, 0, DType::f32, 0, 1, 2);
  rec->step(0, 1.0, 1, 1.0);
  rec->mark("x");
  rec->flush();
  { ScopedSpan s(rec.get(), "forward"); }
  { ScopedSpan s(nullptr, "forward"); }
  EXPECT_EQ(rec->event_count(), 0);
  EXPECT_EQ(rec->buffered_text(), "");
}

TEST(TraceRecorder, ThreadsRecordConcurrentlyWithoutLosingLines) {
  const fs::path dir = fresh_dir("rec_threads");
  const fs::path file = dir / "rank0.jsonl";
  constexpr int kThreads = 4, kPerThread = 3000;
  {
    Recorder rec(0, file.string());
    std::vector<std::thread> threads;
    for (int k = 0; k < kThreads; ++k)
      threads.emplace_back([&rec, k] {
        for (int i = 0; i < kPerThread; ++i) {
          rec.span(k % 2 ? Lane::comm : Lane::compute, "op", k, i, DType::f32, i, i, i + 1);
          if (i % 1000 == 999) rec.flush();
        }
      });
    for (auto& t : threads) t.join();
  }  // the destructor flushes the rest
  std::vector<json> ev = parse_lines(read_file(file));
  ASSERT_EQ(ev.size(), static_cast<size_t>(kThreads * kPerThread));
  // Each thread's lines appear complete and in its own order.
  std::vector<int64_t> next(kThreads, 0);
  for (const json& e : ev) {
    const int k = e.at("unit");
    EXPECT_EQ(e.at("bytes").get<int64_t>(), next[k]);
    ++next[k];
  }
  fs::remove_all(dir);
}

TEST(TraceRecorder, FlushAppendsAndEmptiesTheBuffer) {
  const fs::path dir = fresh_dir("rec_flush");
  const fs::path file = dir / "rank2.jsonl";
  Recorder rec(2, file.string());
  EXPECT_TRUE(fs::exists(file));  // created at once, so a viewer sees the rank
  rec.mark("a");
  rec.mark("b");
  EXPECT_EQ(rec.event_count(), 2);
  EXPECT_EQ(read_file(file), "");
  rec.flush();
  EXPECT_EQ(rec.event_count(), 0);
  EXPECT_EQ(parse_lines(read_file(file)).size(), 2u);
  rec.step(0, 1.0, 1, 0.1);  // a step flushes by itself
  EXPECT_EQ(rec.event_count(), 0);
  EXPECT_EQ(parse_lines(read_file(file)).size(), 3u);
  fs::remove_all(dir);
}

TEST(TraceRecorder, UnwritablePathThrowsIoErrorNamingIt) {
  try {
    Recorder rec(0, "/nonexistent_dir_shardlab/rank0.jsonl");
    FAIL() << "no throw";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent_dir_shardlab/rank0.jsonl"),
              std::string::npos);
  }
}

TEST(TraceRecorder, ScopedSpanRecordsAComputeSpan) {
  Recorder rec(0, "");
  trace_reset_clock();
  const int64_t before = trace_now_ns();
  { ScopedSpan s(&rec, "backward", 4, 12); }
  const int64_t after = trace_now_ns();
  std::vector<json> ev = parse_lines(rec.buffered_text());
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].at("lane"), "compute");
  EXPECT_EQ(ev[0].at("op"), "backward");
  EXPECT_EQ(ev[0].at("unit"), 4);
  EXPECT_EQ(ev[0].at("bytes"), 12);
  EXPECT_GE(ev[0].at("t_start").get<int64_t>(), before);
  EXPECT_LE(ev[0].at("t_end").get<int64_t>(), after);
  EXPECT_LE(ev[0].at("t_start").get<int64_t>(), ev[0].at("t_end").get<int64_t>());
  EXPECT_EQ(ev[0].at("t_wait"), -1);
}
