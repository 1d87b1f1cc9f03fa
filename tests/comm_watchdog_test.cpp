// The collective watchdog, the flight recorder and straggler timing on the local backend: a rank
// that sleeps past the timeout or skips a collective is named, nobody hangs, flight.json holds
// every rank's last collectives, and the recorded wait matches an injected delay.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/comm/comm_common.hpp"
#include "core/comm/flight_recorder.hpp"
#include "core/comm/launcher.hpp"

namespace shardlab {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Runs fn on `ranks` local ranks with the given timeout; returns the failure text ("" if none).
std::string run_ranks(int ranks, double timeout_s, const std::function<void(RankContext&)>& fn) {
  LaunchOptions o;
  o.ranks = ranks;
  o.collective_timeout_s = timeout_s;
  try {
    launch(o, fn);
  } catch (const RankFailure& e) {
    return e.what();
  }
  return "";
}

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

TEST(Watchdog, RankThatSleepsPastTheTimeoutIsNamed) {
  const std::string flight =
      (std::filesystem::temp_directory_path() / "shardlab_watchdog_flight.json").string();
  std::filesystem::remove(flight);
  const auto t0 = Clock::now();
  const std::string err = run_ranks(3, 0.5, [&](RankContext& ctx) {
    ctx.flight()->set_dump_path(flight);
    ctx.flight()->set_step(7);
    std::vector<float> x(8, 1.0f);
    ctx.comm->all_reduce(x.data(), x.data(), 8, DType::f32, ReduceOp::sum, false, {3});
    if (ctx.rank == 2) sleep_s(2.5);  // past the timeout, outside any collective
    ctx.comm->all_gather(x.data(), x.data(), 2, DType::f32, false, {4});
  });
  const double took = seconds_since(t0);
  EXPECT_NE(err.find("collective watchdog"), std::string::npos) << err;
  EXPECT_NE(err.find("all_gather unit 4 step 7"), std::string::npos) << err;
  EXPECT_NE(err.find("rank 2 did not arrive"), std::string::npos) << err;
  EXPECT_EQ(err.find("rank 1 did not arrive"), std::string::npos) << err;
  EXPECT_NE(err.find("rank 2: #1 all_reduce unit 3 step 7"), std::string::npos) << err;
  EXPECT_LT(took, 2.5 + 1.0);  // the sleeper returns as soon as it wakes: no hang

  std::ifstream f(flight);
  ASSERT_TRUE(f.good()) << "no flight.json at " << flight;
  const nlohmann::json j = nlohmann::json::parse(f);
  EXPECT_EQ(j.at("backend"), "local");
  ASSERT_EQ(j.at("ranks").size(), 3u);
  // Ranks 0 and 1 issued the all_gather; rank 2 had completed only the all_reduce.
  const nlohmann::json& r0 = j.at("ranks")[0].at("collectives");
  ASSERT_EQ(r0.size(), 2u);
  EXPECT_EQ(r0[1].at("op"), "all_gather");
  EXPECT_EQ(r0[1].at("state"), "issued");
  EXPECT_EQ(j.at("ranks")[2].at("collectives").size(), 1u);
  std::filesystem::remove(flight);
}

TEST(Watchdog, FiresWithinTheTimeoutNotAtTheSleepersReturn) {
  // The waiting rank fails at the timeout; its failure time is what the test measures.
  std::atomic<double> failed_at{-1};
  const auto t0 = Clock::now();
  const std::string err = run_ranks(2, 0.3, [&](RankContext& ctx) {
    std::vector<float> x(4, 1.0f);
    if (ctx.rank == 1) sleep_s(1.5);
    try {
      ctx.comm->all_reduce(x.data(), x.data(), 4, DType::f32);
    } catch (const CommError&) {
      if (ctx.rank == 0) failed_at = seconds_since(t0);
      throw;
    }
  });
  EXPECT_NE(err.find("rank 1 did not arrive"), std::string::npos) << err;
  EXPECT_GE(failed_at.load(), 0.3);
  EXPECT_LT(failed_at.load(), 1.0);
}

TEST(Watchdog, RankThatSkipsACollectiveIsNamed) {
  // Rank 1 skips unit 1's all-gather: its next one (unit 2) meets rank 0's unit-1 call.
  const std::string err = run_ranks(2, 30, [&](RankContext& ctx) {
    std::vector<float> x(8, 1.0f);
    if (ctx.rank == 0) ctx.comm->all_gather(x.data(), x.data(), 4, DType::f32, false, {1});
    ctx.comm->all_gather(x.data(), x.data(), 4, DType::f32, false, {2});
  });
  EXPECT_NE(err.find("ranks disagree on the unit: rank 0 has 1, rank 1 has 2"), std::string::npos)
      << err;
}

TEST(Watchdog, RankThatSkipsAndStaysAwayIsNamed) {
  // Rank 1 skips the all-reduce and goes on computing: the watchdog names it, not a hang.
  const std::string err = run_ranks(2, 0.3, [&](RankContext& ctx) {
    std::vector<float> x(4, 1.0f);
    if (ctx.rank == 0) ctx.comm->all_reduce(x.data(), x.data(), 4, DType::f32);
    if (ctx.rank == 1) sleep_s(1.0);
  });
  EXPECT_NE(err.find("rank 1 did not arrive (busy outside collectives"), std::string::npos) << err;
}

TEST(Watchdog, RankThatIssuesAnotherCollectiveIsNamed) {
  const std::string err = run_ranks(2, 30, [&](RankContext& ctx) {
    std::vector<float> x(8, 1.0f);
    if (ctx.rank == 0)
      ctx.comm->all_reduce(x.data(), x.data(), 4, DType::f32);
    else
      ctx.comm->reduce_scatter(x.data(), x.data(), 4, DType::f32);
  });
  EXPECT_NE(err.find("ranks disagree on the collective: rank 0 has all_reduce, rank 1 has "
                     "reduce_scatter"),
            std::string::npos)
      << err;
}

TEST(Stragglers, WaitMatchesAnInjectedDelay) {
  // Rank 1 sleeps 30 ms before each of 8 all-reduces: rank 0 waits about that long each time,
  // rank 1 hardly at all, and rank 1 arrives last every time.
  constexpr int kCalls = 8;
  constexpr double kDelay = 0.030;
  std::vector<std::vector<CollectiveRecord>> recs(2);
  const std::string err = run_ranks(2, 30, [&](RankContext& ctx) {
    std::vector<float> x(1024, 1.0f);
    for (int i = 0; i < kCalls; ++i) {
      if (ctx.rank == 1) sleep_s(kDelay);
      ctx.comm->all_reduce(x.data(), x.data(), 1024, DType::f32);
    }
    recs[ctx.rank] = ctx.flight()->records();
  });
  ASSERT_EQ(err, "");
  double waited[2] = {0, 0};
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(recs[r].size(), static_cast<size_t>(kCalls));
    for (const CollectiveRecord& c : recs[r]) {
      EXPECT_EQ(c.state, CollectiveRecord::State::done);
      waited[r] += c.wait_ns * 1e-9;
    }
  }
  EXPECT_NEAR(waited[0], kCalls * kDelay, 0.2 * kCalls * kDelay);
  EXPECT_LT(waited[1], 0.2 * kCalls * kDelay);
}

TEST(FlightRecorder, KeepsTheLast64) {
  FlightRecorder f(0);
  for (int i = 0; i < 100; ++i) {
    f.set_step(i / 10);
    const int64_t s = f.issued(CommOp::all_gather, {i}, 16, DType::bf16, 4);
    if (i < 99) f.ended(s, true, 5);
  }
  const std::vector<CollectiveRecord> r = f.records();
  ASSERT_EQ(r.size(), 64u);
  EXPECT_EQ(r.front().seq, 37);
  EXPECT_EQ(r.back().seq, 100);
  EXPECT_EQ(r.back().state, CollectiveRecord::State::issued);
  EXPECT_EQ(f.last_completed().seq, 99);
  EXPECT_EQ(describe(f.last_completed()), "#99 all_gather unit 98 step 9 (16 x bf16, 4 ranks)");
  EXPECT_EQ(f.find(10).seq, 0);  // overwritten
}

}  // namespace
}  // namespace shardlab
