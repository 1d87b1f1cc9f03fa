// flight.json entries of the ranks mpirun ends with the job (core/comm/flight_file.hpp): each
// survivor says what it was doing, and all of them land in one file, even when they write at
// the same moment. The MPI end-to-end case (a rank killed, the others terminated) is
// tests/mpi/terminate.cmake.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/base/file_io.hpp"
#include "core/comm/comm_common.hpp"
#include "core/comm/flight_file.hpp"
#include "core/comm/flight_recorder.hpp"

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
