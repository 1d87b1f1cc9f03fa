// How the local backend and the launcher fail: a rank that throws ends launch() with RankFailure
// naming it while the others are released from their collectives; mismatched calls raise
// CommError naming the ranks and values; bad arguments and options are named clearly.
#include <gtest/gtest.h>

#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/base/virtual_clock.hpp"
#include "core/comm/comm_common.hpp"
#include "core/comm/flight_recorder.hpp"
#include "core/comm/launcher.hpp"
#include "core/comm/sim_comm.hpp"
#include "core/device/cluster_spec.hpp"

using namespace shardlab;

namespace {

LaunchOptions ranks(int n) {
  LaunchOptions o;
  o.ranks = n;
  return o;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Runs launch() and returns the RankFailure it throws (fails the test when it throws none).
template <typename F>
RankFailure expect_rank_failure(const LaunchOptions& o, F fn) {
  try {
    launch(o, fn);
  } catch (const RankFailure& e) {
    return e;
  }
  ADD_FAILURE() << "launch() returned without RankFailure";
  return RankFailure(-1, "");
}

TEST(CommFailure, RankThrowingMidCollectiveEndsLaunchWithRankFailureNamingIt) {
  const int n = 4;
  std::mutex mu;
  std::vector<std::string> secondary;
  RankFailure f = expect_rank_failure(ranks(n), [&](RankContext& ctx) {
    std::vector<float> a(1000, 1.0f), b(1000 * n);
    ctx.comm->all_reduce(a.data(), a.data(), 1000, DType::f32);  // everyone, once
    // Rank 2 fails; the others block in an async all_gather, a blocking all_reduce and a
    // subgroup's collective.
    if (ctx.rank == 2) throw std::runtime_error("boom in step 3");
    std::unique_ptr<Communicator> sub;
    try {
      Work w = ctx.comm->all_gather(a.data(), b.data(), 1000, DType::f32, true);
      ctx.comm->all_reduce(a.data(), a.data(), 1000, DType::f32);
      w.wait();
    } catch (const CommError& e) {
      std::lock_guard<std::mutex> lk(mu);
      secondary.push_back(e.what());
    }
    // A collective entered after the abort fails at once as well.
    try {
      ctx.comm->barrier();
    } catch (const CommError& e) {
      std::lock_guard<std::mutex> lk(mu);
      secondary.push_back(e.what());
      throw;
    }
  });
  EXPECT_EQ(f.rank(), 2);
  EXPECT_TRUE(contains(f.what(), "rank 2: boom in step 3")) << f.what();
  ASSERT_EQ(secondary.size(), size_t(2 * (n - 1)));
  for (const std::string& m : secondary) {
    // Names the rank it was raised on, then the failed rank.
    EXPECT_TRUE(m.rfind("rank 0: aborted: rank 2 failed: boom in step 3", 0) == 0 ||
                m.rfind("rank 1: aborted: rank 2 failed: boom in step 3", 0) == 0 ||
                m.rfind("rank 3: aborted: rank 2 failed: boom in step 3", 0) == 0)
        << m;
  }
}

TEST(CommFailure, RankFailingInsideSubgroupCollectiveReleasesEveryGroup) {
  const int n = 4;
  RankFailure f = expect_rank_failure(ranks(n), [&](RankContext& ctx) {
    std::unique_ptr<Communicator> pair = ctx.comm->split(ctx.rank / 2, 0);
    float x = 1;
    if (ctx.rank == 3) SL_THROW(InvalidArgument, "bad batch size 0");
    pair->all_reduce(&x, &x, 1, DType::f32);  // rank 2 waits for rank 3 here
    ctx.comm->all_reduce(&x, &x, 1, DType::f32);
  });
  EXPECT_EQ(f.rank(), 3);
  EXPECT_TRUE(contains(f.what(), "rank 3: bad batch size 0")) << f.what();
  EXPECT_FALSE(contains(f.what(), "rank 3: rank 3:")) << f.what();
}

TEST(CommFailure, MismatchedCountNamesRanksAndValues) {
  const int n = 3;
  std::mutex mu;
  std::vector<std::string> messages;
  launch(ranks(n), [&](RankContext& ctx) {
    std::vector<float> a(64, 1.0f);
    const int64_t count = ctx.rank == 1 ? 12 : 10;
    try {
      ctx.comm->all_reduce(a.data(), a.data(), count, DType::f32);
      ADD_FAILURE() << "rank " << ctx.rank << ": mismatched all_reduce did not throw";
    } catch (const CommError& e) {
      std::lock_guard<std::mutex> lk(mu);
      messages.push_back(e.what());
    }
    // The communicator stays usable: the next matching call works.
    float x = float(ctx.rank);
    ctx.comm->all_reduce(&x, &x, 1, DType::f32);
    EXPECT_EQ(x, 3.0f);
  });
  ASSERT_EQ(messages.size(), size_t(n));
  for (const std::string& m : messages)
    EXPECT_TRUE(contains(m,
                         "all_reduce: ranks disagree on count: rank 0 has 10, rank 1 has 12, "
                         "rank 2 has 10"))
        << m;
}

TEST(CommFailure, MismatchedDtypeOpAndRootAreNamed) {
  const int n = 2;
  std::mutex mu;
  std::vector<std::string> messages;
  launch(ranks(n), [&](RankContext& ctx) {
    std::vector<float> a(64, 1.0f), b(128);
    auto expect_comm_error = [&](auto call) {
      try {
        call();
        ADD_FAILURE() << "no CommError";
      } catch (const CommError& e) {
        if (ctx.rank == 0) {
          std::lock_guard<std::mutex> lk(mu);
          messages.push_back(e.what());
        }
      }
    };
    const bool r1 = ctx.rank == 1;
    expect_comm_error(
        [&] { ctx.comm->all_gather(a.data(), b.data(), 8, r1 ? DType::bf16 : DType::f32); });
    expect_comm_error([&] {
      if (r1)
        ctx.comm->all_gather(a.data(), b.data(), 8, DType::f32);
      else
        ctx.comm->all_reduce(a.data(), b.data(), 8, DType::f32);
    });
    expect_comm_error([&] { ctx.comm->broadcast(a.data(), 8, DType::f32, r1 ? 1 : 0); });
    expect_comm_error([&] {
      ctx.comm->reduce_scatter(a.data(), b.data(), 8, DType::f32,
                               r1 ? ReduceOp::avg : ReduceOp::sum);
    });
  });
  ASSERT_EQ(messages.size(), 4u);
  EXPECT_TRUE(contains(messages[0], "ranks disagree on dtype: rank 0 has f32, rank 1 has bf16"))
      << messages[0];
  EXPECT_TRUE(contains(messages[1],
                       "ranks disagree on the collective: rank 0 has all_reduce, rank 1 has "
                       "all_gather"))
      << messages[1];
  EXPECT_TRUE(contains(messages[2], "ranks disagree on root: rank 0 has 0, rank 1 has 1"))
      << messages[2];
  EXPECT_TRUE(contains(messages[3],
                       "ranks disagree on the reduce op: rank 0 has sum, rank 1 "
                       "has avg"))
      << messages[3];
}

TEST(CommFailure, UncaughtMismatchBecomesRankFailure) {
  RankFailure f = expect_rank_failure(ranks(2), [&](RankContext& ctx) {
    float a[4] = {}, b[4];
    ctx.comm->all_reduce(a, b, ctx.rank == 0 ? 4 : 3, DType::f32);
  });
  EXPECT_TRUE(f.rank() == 0 || f.rank() == 1);
  EXPECT_TRUE(contains(f.what(), "ranks disagree on count: rank 0 has 4, rank 1 has 3"))
      << f.what();
}

TEST(CommFailure, RankReturningEarlyReleasesTheOthers) {
  RankFailure f = expect_rank_failure(ranks(3), [&](RankContext& ctx) {
    if (ctx.rank == 1) return;  // skips the collective below
    float x = 1;
    ctx.comm->all_reduce(&x, &x, 1, DType::f32);
  });
  EXPECT_NE(f.rank(), 1);
  EXPECT_TRUE(contains(f.what(), "rank 1 left the communicator without calling all_reduce"))
      << f.what();
}

// The local collectives take no memory beyond the caller's buffers: a rank whose device is full
// to the byte still reduces (before, each reduction took a staging buffer and failed here with
// "out of memory: comm_buffers requested").
TEST(CommFailure, CollectivesRunOnADeviceFullToTheByte) {
  LaunchOptions o = ranks(2);
  o.mem_limit = 64 * 1024;
  launch(o, [&](RankContext& ctx) {
    Buffer b = ctx.device->alloc(40 * 1024, MemCategory::params);
    Buffer c = ctx.device->alloc_zeros(24 * 1024, MemCategory::workspace);
    for (int64_t i = 0; i < 10240; ++i) b.f32()[i] = float(i % 7 + ctx.rank);
    ctx.comm->all_reduce(b.data(), b.data(), 10240, DType::f32);
    ctx.comm->reduce_scatter(b.data(), c.data(), 5120, DType::f32, ReduceOp::avg);
    EXPECT_EQ(ctx.tracker->peak_total(), 64 * 1024);  // nothing else was ever taken
    for (int64_t i = 0; i < 10240; ++i) ASSERT_EQ(b.f32()[i], float(2 * (i % 7) + 1)) << i;
    for (int64_t i = 0; i < 5120; ++i)
      ASSERT_EQ(c.f32()[i], b.f32()[ctx.rank * 5120 + i]) << i;  // the average of equal halves
  });
}

TEST(CommFailure, BadArgumentsAreNamedOnTheCallingRank) {
  launch(ranks(2), [&](RankContext& ctx) {
    float a[4] = {};
    try {
      ctx.comm->all_gather(a, a, -1, DType::f32);
      ADD_FAILURE() << "negative count accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_TRUE(contains(e.what(), "rank " + std::to_string(ctx.rank) +
                                         ": local all_gather: count -1 is negative"))
          << e.what();
    }
    EXPECT_THROW(ctx.comm->broadcast(a, 4, DType::f32, 2), InvalidArgument);
    EXPECT_THROW(ctx.comm->all_reduce(nullptr, a, 4, DType::f32), InvalidArgument);
    EXPECT_THROW(ctx.comm->split(-1, 0), InvalidArgument);
    ctx.comm->barrier();  // nothing was half-issued: the ranks still agree
  });
}

// Communicator's public calls do the bookkeeping once for every backend: a refused call is neither
// counted nor entered in the flight recorder; an accepted one is counted once and ends done, and a
// split is in the flight recorder too. The same on the local backend and on the simulator's.
void expect_bookkeeping_once(Communicator& c) {
  const std::string who = c.backend();
  float a[8] = {};
  EXPECT_THROW(c.all_gather(a, a, -1, DType::f32), InvalidArgument) << who;
  EXPECT_THROW(c.broadcast(a, 4, DType::f32, c.size()), InvalidArgument) << who;
  EXPECT_THROW(c.split(-1, 0), InvalidArgument) << who;
  EXPECT_EQ(c.traffic().total(), 0) << who;
  EXPECT_EQ(c.traffic().buffer, 0) << who;
  EXPECT_TRUE(c.flight().records().empty()) << who;
  c.all_reduce(a, a, 4, DType::f32);
  EXPECT_EQ(c.traffic().all_reduce, 2 * 16 * (c.size() - 1) / c.size()) << who;
  EXPECT_EQ(c.traffic().buffer, 16) << who;
  std::vector<CollectiveRecord> r = c.flight().records();
  ASSERT_EQ(r.size(), 1u) << who;
  EXPECT_EQ(r[0].op, CommOp::all_reduce) << who;
  EXPECT_EQ(r[0].count, 4) << who;
  EXPECT_EQ(r[0].state, CollectiveRecord::State::done) << who;
  std::vector<int> everyone(static_cast<size_t>(c.size()));
  for (int i = 0; i < c.size(); ++i) everyone[static_cast<size_t>(i)] = i;
  auto sub = c.split_group(0, c.rank(), everyone);
  ASSERT_NE(sub, nullptr) << who;
  EXPECT_EQ(sub->size(), c.size()) << who;
  r = c.flight().records();
  ASSERT_EQ(r.size(), 2u) << who;
  EXPECT_EQ(r[1].op, CommOp::split) << who;
  EXPECT_EQ(r[1].state, CollectiveRecord::State::done) << who;
}

TEST(CommBookkeeping, EveryBackendChecksCountsAndRecordsACallOnce) {
  launch(ranks(2), [&](RankContext& ctx) { expect_bookkeeping_once(*ctx.comm); });
  VirtualClock clock;
  auto spec = std::make_shared<const ClusterSpec>(load_cluster_spec("h100-sxm"));
  expect_bookkeeping_once(*make_sim_communicator(spec, 8, 3, clock));
}

TEST(CommFailure, LaunchOptionsAreChecked) {
  auto fn = [](RankContext&) {};
  LaunchOptions o;
  o.backend = "gloo";
  try {
    launch(o, fn);
    ADD_FAILURE() << "unknown backend accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "unknown backend 'gloo' (expected local, mpi, nccl or sim)"));
  }
  o.backend = "nccl";
  EXPECT_THROW(launch(o, fn), InvalidArgument);
  o = ranks(0);
  EXPECT_THROW(launch(o, fn), InvalidArgument);
  o = ranks(2);
  o.device = "tpu";
  RankFailure f = expect_rank_failure(o, fn);
  EXPECT_TRUE(contains(f.what(), "unknown device 'tpu'")) << f.what();
  o.device = "cuda";  // this CPU build has no CUDA; a CUDA build refuses local + cuda
  f = expect_rank_failure(o, fn);
  EXPECT_TRUE(contains(f.what(), "CUDA") || contains(f.what(), "nccl")) << f.what();
}

}  // namespace
