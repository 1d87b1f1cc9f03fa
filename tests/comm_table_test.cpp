// The collective table on the local backend: every collective, dtype, reduce op, in place and out
// of place, blocking and async, over world sizes 1..8 and on subgroups from split, each result
// checked against its closed form (core/comm/collective_table.cpp).
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "core/comm/collective_table.hpp"
#include "core/comm/launcher.hpp"

using namespace shardlab;

namespace {

// Counts that divide evenly by 2, 4, 8 (8, 1024) and that do not (1, 5, 4099), zero, and one past
// two reduction blocks (16387) so the blocked loop's tail is exercised.
const std::vector<int64_t> kCounts = {0, 1, 5, 8, 1024, 4099, 16387};

// Calls per rank the table makes with kCounts: per dtype and count, all_gather 4 (in place or
// not x async or not), reduce_scatter and all_reduce 8 (x sum/avg), broadcast 2.
int64_t expected_calls() { return 3 * static_cast<int64_t>(kCounts.size()) * (4 + 8 + 8 + 2); }

struct Collected {
  std::mutex mu;
  std::vector<std::string> failures;
  std::atomic<int64_t> calls{0};
  void add(const TableCheck& c) {
    calls += c.calls;
    std::lock_guard<std::mutex> lk(mu);
    failures.insert(failures.end(), c.failures.begin(), c.failures.end());
  }
  void expect_clean(int64_t want_calls) {
    EXPECT_EQ(calls.load(), want_calls);
    for (size_t i = 0; i < failures.size() && i < 20; ++i) ADD_FAILURE() << failures[i];
    EXPECT_TRUE(failures.empty()) << failures.size() << " wrong results";
  }
};

class CommTable : public ::testing::TestWithParam<int> {};

TEST_P(CommTable, EveryRowMatchesItsClosedForm) {
  const int n = GetParam();
  Collected got;
  LaunchOptions o;
  o.ranks = n;
  launch(o, [&](RankContext& ctx) {
    EXPECT_EQ(ctx.comm->size(), n);
    EXPECT_EQ(ctx.comm->rank(), ctx.rank);
    EXPECT_STREQ(ctx.comm->backend(), "local");
    got.add(check_collective_table(*ctx.comm, *ctx.device, kCounts));
  });
  got.expect_clean(n * expected_calls());
}

INSTANTIATE_TEST_SUITE_P(CommLocal, CommTable, ::testing::Values(1, 2, 3, 4, 5, 8),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return "n" + std::to_string(p.param);
                         });

// Hybrid sharding's mesh on 8 ranks: shard groups of 4 (color r/4) and replicate groups of 2
// (color r%4), both running the table at once from two threads of each rank.
TEST(CommTableSplit, ShardAndReplicateGroupsRunConcurrently) {
  Collected shard, replicate;
  LaunchOptions o;
  o.ranks = 8;
  launch(o, [&](RankContext& ctx) {
    const int r = ctx.rank;
    // Reversed key within shard groups: rank order inside the group is by key, then old rank.
    std::unique_ptr<Communicator> sg = ctx.comm->split(r / 4, -r);
    std::unique_ptr<Communicator> rg = ctx.comm->split(r % 4, 0);
    EXPECT_EQ(sg->size(), 4);
    EXPECT_EQ(sg->rank(), 3 - r % 4);
    EXPECT_EQ(rg->size(), 2);
    EXPECT_EQ(rg->rank(), r / 4);
    const std::vector<int64_t> counts = {3, 1024};
    std::thread other([&] {
      set_thread_rank(r);
      replicate.add(check_collective_table(*rg, *ctx.device, counts));
    });
    shard.add(check_collective_table(*sg, *ctx.device, counts));
    other.join();
  });
  const int64_t per_rank = 3 * 2 * (4 + 8 + 8 + 2);
  shard.expect_clean(8 * per_rank);
  replicate.expect_clean(8 * per_rank);
}

}  // namespace
