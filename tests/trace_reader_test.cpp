// core/trace/run_reader: following a run live (files appearing, growing in pieces, a truncated last
// line, a malformed line, the directory vanishing) without throwing, and read_run's errors.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

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

void append(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::app);
  f << text;
}

std::string mem_line(int rank, int64_t t, int64_t bytes, int64_t total) {
  return "{\"t\":" + std::to_string(t) + ",\"rank\":" + std::to_string(rank) +
         ",\"kind\":\"mem\",\"category\":\"params\",\"bytes\":" + std::to_string(bytes) +
         ",\"cat_total\":" + std::to_string(total) + ",\"total\":" + std::to_string(total) + "}\n";
}

std::string step_line(int rank, int64_t t, int step) {
  return "{\"t\":" + std::to_string(t) + ",\"rank\":" + std::to_string(rank) +
         ",\"kind\":\"step\",\"step\":" + std::to_string(step) +
         ",\"loss\":1.5,\"tokens\":64,\"step_time\":0.01}\n";
}

}  // namespace

TEST(TraceReader, MissingDirectoryThrowsUnlessWaiting) {
  const fs::path dir = fresh_dir("reader_missing");
  try {
    RunReader r(dir.string());
    FAIL() << "no throw";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.string()), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(RunReader(dir.string(), true));
}

TEST(TraceReader, FollowsARunFromBeforeItStarts) {
  const fs::path dir = fresh_dir("reader_follow");
  RunReader reader(dir.string(), /*wait_for_start=*/true);
  EXPECT_FALSE(reader.poll());
  EXPECT_NE(reader.status().find("waiting for run directory"), std::string::npos)
      << reader.status();

  fs::create_directories(dir);
  EXPECT_FALSE(reader.poll());
  EXPECT_EQ(reader.status(), "waiting for meta.json");
  EXPECT_TRUE(reader.data().meta.empty());

  std::ofstream(dir / "meta.json") << R"({"strategy":"full_shard","world_size":2})";
  EXPECT_TRUE(reader.poll());
  EXPECT_EQ(reader.status(), "");
  EXPECT_EQ(reader.data().meta.at("strategy"), "full_shard");
  ASSERT_EQ(reader.data().ranks.size(), 2u);  // from world_size, before any rank file exists
  EXPECT_FALSE(reader.data().finished());

  // rank0 writes one line and half of the next: only the complete line is read.
  const std::string second = mem_line(0, 20, 50, 150);
  append(dir / "rank0.jsonl", mem_line(0, 10, 100, 100) + second.substr(0, 17));
  EXPECT_TRUE(reader.poll());
  EXPECT_EQ(reader.data().ranks[0].mem.size(), 1u);
  EXPECT_EQ(reader.data().ranks[0].t_last, 10);
  EXPECT_FALSE(reader.poll());  // nothing new

  // The rest of the line arrives, in two more pieces, with a step after it.
  append(dir / "rank0.jsonl", second.substr(17, 20));
  reader.poll();
  EXPECT_EQ(reader.data().ranks[0].mem.size(), 1u);
  append(dir / "rank0.jsonl", second.substr(37) + step_line(0, 30, 0));
  EXPECT_TRUE(reader.poll());
  ASSERT_EQ(reader.data().ranks[0].mem.size(), 2u);
  EXPECT_EQ(reader.data().ranks[0].mem[1].bytes, 50);
  EXPECT_EQ(reader.data().ranks[0].mem[1].cat_total, 150);
  ASSERT_EQ(reader.data().ranks[0].steps.size(), 1u);
  EXPECT_EQ(reader.data().ranks[0].t_last, 30);
  EXPECT_EQ(reader.status(), "");

  // A file that appears later (rank 1 started late) and a rank beyond world_size.
  append(dir / "rank1.jsonl", step_line(1, 5, 0));
  append(dir / "rank3.jsonl", step_line(3, 6, 0));
  EXPECT_TRUE(reader.poll());
  ASSERT_EQ(reader.data().ranks.size(), 4u);
  EXPECT_EQ(reader.data().ranks[1].steps.size(), 1u);
  EXPECT_EQ(reader.data().ranks[3].steps.size(), 1u);

  // The run finishes: summary.json appears.
  std::ofstream(dir / "summary.json") << R"({"world_size":2})";
  EXPECT_TRUE(reader.poll());
  EXPECT_TRUE(reader.data().finished());

  // The directory is deleted: no throw, a status, and the data stays.
  fs::remove_all(dir);
  EXPECT_FALSE(reader.poll());
  EXPECT_NE(reader.status().find("run directory removed"), std::string::npos) << reader.status();
  EXPECT_EQ(reader.data().ranks[0].mem.size(), 2u);
  EXPECT_TRUE(reader.data().finished());
}

TEST(TraceReader, MalformedLinesAreSkippedAndNamed) {
  const fs::path dir = fresh_dir("reader_malformed");
  fs::create_directories(dir);
  std::ofstream(dir / "meta.json") << R"({"world_size":1})";
  append(dir / "rank0.jsonl", mem_line(0, 1, 8, 8) + step_line(0, 2, 0) + "this is not json\n" +
                                  mem_line(1, 3, 8, 16) +  // another rank's event in rank0's file
                                  "{\"t\":4,\"rank\":0,\"kind\":\"mem\"}\n" +  // fields missing
                                  "{\"t\":5,\"rank\":0,\"kind\":\"future_kind\"}\n" +  // named
                                  "\n" + step_line(0, 6, 1));
  RunReader reader(dir.string());
  EXPECT_TRUE(reader.poll());
  EXPECT_EQ(reader.status(), "rank0.jsonl:6: skipped malformed line");
  EXPECT_EQ(reader.data().ranks[0].mem.size(), 1u);
  EXPECT_EQ(reader.data().ranks[0].steps.size(), 2u);
  EXPECT_EQ(reader.data().ranks[0].t_last, 6);

  // read_run is strict about a complete malformed line, and names the file and line.
  try {
    read_run(dir.string());
    FAIL() << "no throw";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("rank0.jsonl:3: malformed event line"), std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

TEST(TraceReader, ReadRunNeedsMetaAndToleratesATruncatedLastLine) {
  const fs::path dir = fresh_dir("reader_read_run");
  fs::create_directories(dir);
  append(dir / "rank0.jsonl", mem_line(0, 1, 8, 8));
  try {
    read_run(dir.string());
    FAIL() << "no throw";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "meta.json").string()), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(read_run((dir / "absent").string()), IoError);

  std::ofstream(dir / "meta.json") << R"({"world_size":1})";
  append(dir / "rank0.jsonl", mem_line(0, 2, 8, 16).substr(0, 30));  // killed mid-write
  const RunData run = read_run(dir.string());
  ASSERT_EQ(run.ranks.size(), 1u);
  EXPECT_EQ(run.ranks[0].mem.size(), 1u);

  std::ofstream(dir / "meta.json", std::ios::trunc) << "{not json";
  EXPECT_THROW(read_run(dir.string()), IoError);
  fs::remove_all(dir);
}

TEST(TraceReader, ReplacedFileIsReadAgain) {
  const fs::path dir = fresh_dir("reader_replaced");
  fs::create_directories(dir);
  std::ofstream(dir / "meta.json") << "{}";
  append(dir / "rank0.jsonl", mem_line(0, 1, 8, 8) + mem_line(0, 2, 8, 16));
  RunReader reader(dir.string());
  reader.poll();
  EXPECT_EQ(reader.data().ranks[0].mem.size(), 2u);
  std::ofstream(dir / "rank0.jsonl", std::ios::trunc) << mem_line(0, 1, 4, 4);
  EXPECT_TRUE(reader.poll());
  EXPECT_EQ(reader.data().ranks[0].mem.size(), 1u);
  EXPECT_EQ(reader.data().ranks[0].mem[0].bytes, 4);
  fs::remove_all(dir);
}

// A live reader polling while two ranks record and flush ends with exactly what read_run reads.
TEST(TraceReader, LiveReaderAgreesWithReadRun) {
  const fs::path dir = fresh_dir("reader_live");
  const RunDir rd = RunDir::create({{"world_size", 2}}, {dir.string()});
  RunReader reader(dir.string());
  std::atomic<bool> done{false};
  std::thread poller([&] {
    while (!done) {
      reader.poll();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      MemoryTracker tracker(r);
      auto rec = rd.make_recorder(r);
      rec->attach(tracker);
      for (int s = 0; s < 50; ++s) {
        tracker.allocate(MemCategory::activations, 100 + s);
        rec->span(Lane::comm, "all_reduce", -1, 1000 + s, DType::f32, s, s, s + 1);
        tracker.release(MemCategory::activations, 100 + s);
        rec->step(s, 1.0, 10, 0.001);
      }
    });
  for (auto& t : ranks) t.join();
  done = true;
  poller.join();
  reader.poll();
  EXPECT_EQ(reader.status(), "");
  const RunData full = read_run(dir.string());
  ASSERT_EQ(reader.data().ranks.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(reader.data().ranks[r].mem.size(), 100u);
    EXPECT_EQ(reader.data().ranks[r].spans.size(), full.ranks[r].spans.size());
    EXPECT_EQ(reader.data().ranks[r].steps.size(), 50u);
    EXPECT_EQ(reader.data().ranks[r].t_last, full.ranks[r].t_last);
  }
  EXPECT_EQ(summary_to_json(compute_summary(reader.data())),
            summary_to_json(compute_summary(full)));
  fs::remove_all(dir);
}

// ---- hostile run directories
// ----------------------------------------------------------------------

namespace {

// read_run's IoError text, or "" when it did not throw an IoError.
std::string read_run_error(const fs::path& dir) {
  try {
    read_run(dir.string());
  } catch (const IoError& e) {
    return e.what();
  }
  return "";
}

fs::path two_rank_run(const std::string& name, const std::string& meta) {
  const fs::path dir = fresh_dir(name);
  fs::create_directories(dir);
  std::ofstream(dir / "meta.json") << meta;
  append(dir / "rank0.jsonl", mem_line(0, 1, 8, 8) + step_line(0, 2, 0));
  append(dir / "rank1.jsonl", mem_line(1, 1, 8, 8) + step_line(1, 2, 0));
  return dir;
}

}  // namespace

// A world_size of two billion or a stray rank999999.jsonl used to size tables for that many ranks
// (std::bad_alloc, or a 338 MB summary); the counts now come from the rank files present.
TEST(TraceReader, RankCountsComeFromTheFilesPresent) {
  const fs::path dir = two_rank_run("reader_hostile_ranks", R"({"world_size":2000000000})");
  std::string err = read_run_error(dir);
  EXPECT_NE(err.find("meta.json: field 'world_size' = 2000000000 is out of range"),
            std::string::npos)
      << err;
  RunReader live(dir.string());
  live.poll();
  EXPECT_EQ(live.data().ranks.size(), 2u);
  EXPECT_NE(live.status().find("world_size"), std::string::npos) << live.status();

  // An empty rank file holds nothing: ignored, by read_run and the live reader.
  std::ofstream(dir / "meta.json", std::ios::trunc) << R"({"world_size":2})";
  std::ofstream(dir / "rank999999.jsonl");
  EXPECT_EQ(read_run(dir.string()).ranks.size(), 2u);
  RunReader live2(dir.string());
  live2.poll();
  EXPECT_EQ(live2.data().ranks.size(), 2u);
  EXPECT_EQ(live2.status(), "");

  // A non-empty one beyond world_size: read_run names it, the live reader skips it and says so.
  append(dir / "rank999999.jsonl", mem_line(999999, 1, 8, 8));
  err = read_run_error(dir);
  EXPECT_NE(err.find("rank999999.jsonl: rank 999999 is outside meta.json's world_size 2"),
            std::string::npos)
      << err;
  RunReader live3(dir.string());
  live3.poll();
  EXPECT_EQ(live3.data().ranks.size(), 2u);
  EXPECT_NE(live3.status().find("rank999999.jsonl: rank 999999 is beyond"), std::string::npos)
      << live3.status();
  fs::remove(dir / "rank999999.jsonl");

  // world_size must be matched by the rank files; without it, they must be rank0 .. rank<K-1>.
  std::ofstream(dir / "meta.json", std::ios::trunc) << R"({"world_size":5})";
  err = read_run_error(dir);
  EXPECT_NE(err.find("world_size 5, but the directory holds 2 non-empty rank files"),
            std::string::npos)
      << err;
  std::ofstream(dir / "meta.json", std::ios::trunc) << R"({"world_size":1.5})";
  err = read_run_error(dir);
  EXPECT_NE(err.find("field 'world_size' must be an integer, not 1.5"), std::string::npos) << err;
  std::ofstream(dir / "meta.json", std::ios::trunc) << "{}";
  append(dir / "rank7.jsonl", mem_line(7, 1, 8, 8));
  err = read_run_error(dir);
  EXPECT_NE(err.find("rank7.jsonl: rank 7, but the directory holds only 3"), std::string::npos)
      << err;
  fs::remove_all(dir);
}

// A directory where meta.json or a rank file belongs used to throw libstdc++'s
// "basic_filebuf::underflow ... Is a directory", which names no file.
TEST(TraceReader, DirectoryWhereAFileBelongsIsNamed) {
  const fs::path dir = two_rank_run("reader_hostile_dirs", R"({"world_size":2})");
  fs::remove(dir / "rank1.jsonl");
  fs::create_directories(dir / "rank1.jsonl");
  std::string err = read_run_error(dir);
  EXPECT_NE(err.find((dir / "rank1.jsonl").string() + ": is not a regular file"), std::string::npos)
      << err;
  RunReader live(dir.string());
  EXPECT_NO_THROW(live.poll());
  EXPECT_NE(live.status().find("rank1.jsonl: is not a regular file"), std::string::npos)
      << live.status();

  fs::remove(dir / "meta.json");
  fs::create_directories(dir / "meta.json");
  err = read_run_error(dir);
  EXPECT_NE(err.find((dir / "meta.json").string() + ": is a directory"), std::string::npos) << err;
  RunReader live2(dir.string());
  live2.poll();
  EXPECT_NE(live2.status().find("meta.json: is a directory"), std::string::npos) << live2.status();
  fs::remove_all(dir);
}

// Fractional or oversized integers in event lines used to be truncated (step 1.5 read as 1,
// bytes 1e30 as an undefined conversion); they are malformed lines that name the field.
TEST(TraceReader, IntegerFieldsAreStrict) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"t":3,"rank":0,"kind":"step","step":1.5,"loss":1,"tokens":64,"step_time":0.01})",
       "field 'step' must be an integer, not 1.5"},
      {R"({"t":3,"rank":0,"kind":"mem","category":"params","bytes":1e30,"cat_total":8,"total":8})",
       "field 'bytes' must be an integer"},
      {R"({"t":3,"rank":0,"kind":"mem","category":"params","bytes":9223372036854775807,"cat_total":8,"total":8})",
       "field 'bytes' = 9223372036854775807 is out of range"},
      {R"({"t":3,"rank":0,"kind":"step","step":4294967297,"loss":1,"tokens":64,"step_time":0.01})",
       "field 'step' = 4294967297 is out of range"},
      {R"({"t":3.25,"rank":0,"kind":"unit","unit":0,"state":"sharded"})",
       "field 't' must be an integer, not 3.25"},
  };
  for (const auto& [line, want] : cases) {
    const fs::path dir = fresh_dir("reader_strict_ints");
    fs::create_directories(dir);
    std::ofstream(dir / "meta.json") << R"({"world_size":1})";
    append(dir / "rank0.jsonl", mem_line(0, 1, 8, 8) + line + "\n");
    const std::string err = read_run_error(dir);
    EXPECT_NE(err.find("rank0.jsonl:2: " + want), std::string::npos) << line << "\n" << err;
    RunReader live(dir.string());
    live.poll();
    EXPECT_EQ(live.status(), "rank0.jsonl:2: skipped malformed line") << line;
    EXPECT_EQ(live.data().ranks[0].steps.size() + live.data().ranks[0].units.size(), 0u) << line;
    fs::remove_all(dir);
  }
}
