// flight.json entries of the ranks mpirun ends with the job (core/comm/flight_file.hpp): each
// survivor says what it was doing, and all of them land in one file, even when they write at
// the same moment. The MPI end-to-end case (a rank killed, the others terminated) is
// tests/mpi/terminate.cmake. And what `shardlab summary` reads back from either kind of file.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/base/error.hpp"
#include "core/base/file_io.hpp"
#include "core/comm/comm_common.hpp"
#include "core/comm/flight_file.hpp"
#include "core/comm/flight_recorder.hpp"
#include "core/trace/flight_report.hpp"

using namespace shardlab;

TEST(FlightFile, SaysWhatTheRankWasDoing) {
  FlightRecorder f(2);
  EXPECT_EQ(what_the_rank_was_doing(f), "busy before its first collective");
  f.set_step(3);
  CallInfo info;
  info.unit = 1;
  const int64_t a = f.issued(CommOp::all_gather, info, 1024, DType::f32, 4);
  f.ended(a, true, 10);
  EXPECT_EQ(what_the_rank_was_doing(f),
            "busy outside collectives since #1 all_gather unit 1 step 3 (1024 x f32, 4 ranks)");
  f.issued(CommOp::reduce_scatter, info, 256, DType::f32, 4);
  EXPECT_EQ(what_the_rank_was_doing(f),
            "waiting in #2 reduce_scatter unit 1 step 3 (256 x f32, 4 ranks)");
  // A prefetched all-gather issued behind it: the rank still waits on the oldest.
  info.unit = 0;
  f.issued(CommOp::all_gather, info, 512, DType::f32, 4);
  EXPECT_EQ(what_the_rank_was_doing(f),
            "waiting in #2 reduce_scatter unit 1 step 3 (256 x f32, 4 ranks)");
}

// What `shardlab summary` makes of the files the two writers leave (core/trace/flight_report.hpp):
// the watchdog's (every rank's records) and the survivors' of a killed rank (what each was doing).
TEST(FlightReport, ReadsWhatBothWritersLeave) {
  const std::string dir = std::string(SHARDLAB_BINARY_DIR) + "/test_scratch/flight_report";
  remove_all(dir);
  make_dirs(dir);
  const std::string path = dir + "/flight.json";
  CallInfo info;
  info.unit = 2;
  FlightRecorder r0(0), r1(1);
  r0.set_step(4);
  r1.set_step(4);
  r0.ended(r0.issued(CommOp::all_reduce, info, 8, DType::f32, 3), true, 5);
  r1.ended(r1.issued(CommOp::all_reduce, info, 8, DType::f32, 3), true, 5);
  r0.issued(CommOp::all_gather, info, 96, DType::bf16, 3);
  r0.issued(CommOp::all_gather, info, 64, DType::bf16, 3);
  ASSERT_TRUE(write_flight_file(path, "collective watchdog: #2 all_gather ...\nmore", "local", 1.0,
                                {r1.to_json(), r0.to_json()}));
  std::optional<FlightReport> f = read_flight_report(dir);
  ASSERT_TRUE(f.has_value());
  std::ostringstream os;
  print_flight_report(*f, 3, os);
  EXPECT_EQ(os.str(), "how the run ended (" + path +
                          "): collective watchdog: #2 all_gather ...\n"
                          "  rank 0: (step 4) waiting in #2 all_gather unit 2 step 4 (96 x bf16, 3 "
                          "ranks)\n"
                          "  rank 1: (step 4) busy outside collectives since #1 all_reduce unit 2 "
                          "step 4 (8 x f32, 3 ranks)\n"
                          "  rank 2: not in the file (the rank that ended first, or one killed "
                          "before it could write)\n");

  remove_all(path);
  ASSERT_TRUE(add_terminated_rank_to_flight_file(path, SIGTERM, r0));
  f = read_flight_report(dir);
  ASSERT_TRUE(f.has_value());
  ASSERT_EQ(f->ranks.size(), 1u);
  EXPECT_EQ(f->ranks[0].ended_by, "SIGTERM");
  EXPECT_EQ(f->ranks[0].doing, what_the_rank_was_doing(r0));

  remove_all(path);
  EXPECT_FALSE(read_flight_report(dir).has_value());  // no file: the run ended by itself
}

TEST(FlightReport, RefusesWhatCannotBeNamingTheFileAndField) {
  const std::string dir = std::string(SHARDLAB_BINARY_DIR) + "/test_scratch/flight_report_bad";
  remove_all(dir);
  make_dirs(dir);
  const std::string path = dir + "/flight.json";
  auto error_of = [&](const std::string& text) {
    write_file_atomic(path, text);
    try {
      read_flight_report(dir);
    } catch (const IoError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of(R"({"ranks": []})").find(path + ": field 'reason' is missing"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"reason": "x", "ranks": [{"rank": 1, "step": 2, "doing": "d"},)"
                     R"( {"rank": 1, "step": 2, "doing": "d"}]})")
                .find(path + ": ranks[1]: rank 1 is listed twice"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"reason": "x", "ranks": [{"rank": -3, "step": 2}]})")
                .find(path + ": ranks[0]: field 'rank' = -3 is out of range"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"reason": "x", "ranks": [{"rank": 0, "step": 34359738368}]})")
                .find("field 'step' = 34359738368 is out of range"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"reason": "x", "ranks": [{"rank": 0, "step": 2, "collectives": 7}]})")
                .find("field 'collectives' must be an array"),
            std::string::npos);
  EXPECT_NE(error_of("{\"reason\": \"x\", \"ranks\": [").find(path), std::string::npos);
  remove_all(path);
  make_dirs(path);  // a directory where the file belongs
  EXPECT_THROW(read_flight_report(dir), IoError);
}

TEST(FlightFile, EverySurvivorLandsInOneFile) {
  const std::string dir = std::string(SHARDLAB_BINARY_DIR) + "/test_scratch/flight_file";
  remove_all(dir);
  make_dirs(dir);
  const std::string path = dir + "/flight.json";
  constexpr int kRanks = 8;
  std::vector<std::unique_ptr<FlightRecorder>> flights;
  for (int r = 0; r < kRanks; ++r) flights.push_back(std::make_unique<FlightRecorder>(r));
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r)
    if (r != 5)  // rank 5 is the one that died
      threads.emplace_back(
          [&, r] { EXPECT_TRUE(add_terminated_rank_to_flight_file(path, SIGTERM, *flights[r])); });
  for (std::thread& t : threads) t.join();
  const nlohmann::json j = nlohmann::json::parse(read_text_file(path));
  EXPECT_NE(j.at("reason").get<std::string>().find("torn down (SIGTERM)"), std::string::npos);
  EXPECT_EQ(j.at("backend"), "mpi");
  std::vector<int> ranks;
  for (const nlohmann::json& r : j.at("ranks")) {
    ranks.push_back(r.at("rank").get<int>());
    EXPECT_EQ(r.at("terminated_by"), "SIGTERM");
    EXPECT_EQ(r.at("doing"), "busy before its first collective");
  }
  std::sort(ranks.begin(), ranks.end());
  EXPECT_EQ(ranks, (std::vector<int>{0, 1, 2, 3, 4, 6, 7}));
  // A rank already in the file (a watchdog's record) is left as it is.
  EXPECT_TRUE(add_terminated_rank_to_flight_file(path, SIGTERM, *flights[0]));
  EXPECT_EQ(nlohmann::json::parse(read_text_file(path)).at("ranks").size(), 7u);
  // Nowhere to write: false, no throw.
  EXPECT_FALSE(
      add_terminated_rank_to_flight_file(dir + "/no/such/flight.json", SIGTERM, *flights[1]));
}
