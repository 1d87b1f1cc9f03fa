// core/fsdp engine and the trace: unit state events follow the lifecycle (gathering, unsharded,
// resharded), prefetch issues the next unit's all-gather before the current one is consumed, and
// collectives carry their unit and dtype.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "core/trace/recorder.hpp"
#include "tests/fsdp_test_util.hpp"

using namespace shardlab;
using namespace shardlab::fsdp_test;

namespace {

// Rank 0's events of one step on 2 ranks, parsed; `stats` (when given) gets rank 0's StepStats.
std::vector<nlohmann::json> events_of_one_step(const EngineConfig& ec, StepStats* stats = nullptr) {
  const GPTConfig model = tiny_model();
  std::vector<nlohmann::json> out;
  LaunchOptions lo;
  lo.ranks = 2;
  lo.make_recorder = [](int rank) { return std::make_unique<Recorder>(rank, ""); };
  launch(lo, [&](RankContext& ctx) {
    Engine eng(*ctx.device, *ctx.comm, ctx.recorder, model, ec);
    GlobalBatch gb = make_batch(model, 4, 16, 0);
    const StepStats st =
        eng.step({gb.tokens.data() + ctx.rank * 32}, {gb.targets.data() + ctx.rank * 32}, 2, 16);
    if (ctx.rank != 0) return;
    if (stats) *stats = st;
    std::istringstream in(ctx.recorder->buffered_text());
    std::string line;
    while (std::getline(in, line))
      if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  });
  return out;
}

// "g3" gathering, "u3" unsharded, "r3" resharded, in order.
std::vector<std::string> unit_sequence(const std::vector<nlohmann::json>& ev) {
  std::vector<std::string> s;
  for (const auto& e : ev) {
    if (e["kind"] != "unit") continue;
    const std::string st = e["state"];
    if (st == "sharded") continue;
    s.push_back(std::string(1, st[0]) + std::to_string(e["unit"].get<int>()));
  }
  return s;
}

}  // namespace

TEST(FsdpTrace, UnitLifecycleWithPrefetch0To2) {
  EngineConfig ec = test_config(Strategy::full_shard);
  ec.prefetch = 0;
  const std::vector<std::string> off = unit_sequence(events_of_one_step(ec));
  // Units: 0 = root, 1 and 2 = blocks. Forward 0, 1, 2 (root held until the loss), backward
  // 0 (head), 2, 1, 0 (embedding). Without prefetch each gather waits for the previous reshard.
  const std::vector<std::string> expect_off = {
      "g0", "u0", "g1", "u1", "r1", "g2", "u2", "r2", "r0",   // forward
      "g0", "u0", "g2", "u2", "r2", "g1", "u1", "r1", "r0"};  // backward
  EXPECT_EQ(off, expect_off);
  ec.prefetch = 1;
  const std::vector<std::string> on = unit_sequence(events_of_one_step(ec));
  // With prefetch 1 the next unit's all-gather is issued before the current one is waited for.
  const std::vector<std::string> expect_on = {"g0", "g1", "u0", "g2", "u1", "r1", "u2", "r2", "r0",
                                              "g0", "g2", "u0", "g1", "u2", "r2", "u1", "r1", "r0"};
  EXPECT_EQ(on, expect_on);
  ec.prefetch = 2;
  // With prefetch 2 the first unit of each pass issues the all-gathers of the next two: here all
  // three units are gathered before the first is used.
  const std::vector<std::string> expect_two = {"g0", "g1", "g2", "u0", "u1", "r1",
                                               "u2", "r2", "r0", "g0", "g2", "g1",
                                               "u0", "u2", "r2", "u1", "r1", "r0"};
  EXPECT_EQ(unit_sequence(events_of_one_step(ec)), expect_two);
  // At most 2 all-gathers in flight, the one about to be used included: prefetch 1 again.
  ec.max_inflight_gathers = 2;
  EXPECT_EQ(unit_sequence(events_of_one_step(ec)), expect_on);
}

// --keep-root: the root is not resharded after the loss nor gathered again for the head's
// backward, and the backward's first prefetch (the last block) is still issued before the head
// computes.
TEST(FsdpTrace, KeepRootHoldsTheRootIntoTheBackward) {
  EngineConfig ec = test_config(Strategy::full_shard);
  ec.keep_root = true;
  ec.prefetch = 0;
  const std::vector<std::string> off = {"g0", "u0", "g1", "u1", "r1", "g2", "u2", "r2",  // forward
                                        "g2", "u2", "r2", "g1", "u1", "r1", "r0"};       // backward
  EXPECT_EQ(unit_sequence(events_of_one_step(ec)), off);
  ec.prefetch = 1;
  const std::vector<std::string> on = {"g0", "g1", "u0", "g2", "u1", "r1", "u2", "r2",
                                       "g2", "g1", "u2", "r2", "u1", "r1", "r0"};
  const std::vector<nlohmann::json> ev = events_of_one_step(ec);
  EXPECT_EQ(unit_sequence(ev), on);
  // The last block's gather is issued before the head's backward span starts.
  int64_t gather2 = -1, head_backward = -1;
  bool in_backward = false;
  for (const auto& e : ev) {
    if (e["kind"] == "unit" && e["unit"] == 2 && e["state"] == "gathering" && in_backward)
      gather2 = e["t"].get<int64_t>();
    if (e["kind"] == "unit" && e["unit"] == 2 && e["state"] == "resharded") in_backward = true;
    if (e["kind"] == "span" && e["op"] == "backward" && head_backward < 0)
      head_backward = e["t_start"].get<int64_t>();
  }
  ASSERT_GE(gather2, 0);
  ASSERT_GE(head_backward, 0);
  EXPECT_LT(gather2, head_backward);
}

TEST(FsdpTrace, CollectivesCarryUnitAndDtype) {
  EngineConfig ec = test_config(Strategy::full_shard);
  ec.param_dtype = DType::bf16;
  ec.reduce_dtype = DType::f32;
  int gathers = 0, scatters = 0, forward = 0, backward = 0;
  for (const auto& e : events_of_one_step(ec)) {
    if (e["kind"] != "span") continue;
    const std::string op = e["op"];
    if (op == "all_gather") {
      ++gathers;
      EXPECT_EQ(e["dtype"], "bf16");
      EXPECT_EQ(e["lane"], "comm");
      EXPECT_GE(e["unit"].get<int>(), 0);
    } else if (op == "reduce_scatter") {
      ++scatters;
      EXPECT_EQ(e["dtype"], "f32");
    } else if (op == "forward") {
      ++forward;
    } else if (op == "backward") {
      ++backward;
    }
  }
  EXPECT_EQ(gathers, 6);   // 3 units, forward and backward
  EXPECT_EQ(scatters, 3);  // one per unit
  EXPECT_EQ(forward, 4);   // embedding, 2 blocks, head
  EXPECT_EQ(backward, 4);
}

// Each collective's span says what this rank sent (ring traffic) beside the collective's buffer
// size, and the spans' sum is the step's traffic the engine reports (StepStats, the figure the
// demo prints): the trace, `shardlab summary` and the viewer count sent bytes the same way.
TEST(FsdpTrace, CommSpansCarryTheBytesEachRankSent) {
  for (Strategy s : {Strategy::no_shard, Strategy::full_shard}) {
    EngineConfig ec = test_config(s);
    ec.param_dtype = DType::bf16;
    StepStats stats;
    const std::vector<nlohmann::json> events = events_of_one_step(ec, &stats);
    int64_t sent = 0;
    int spans = 0;
    for (const auto& e : events) {
      if (e["kind"] != "span" || e["lane"] != "comm") continue;
      ++spans;
      ASSERT_TRUE(e.contains("sent")) << e.dump();
      const int64_t bytes = e["bytes"], b = e["sent"];
      const std::string op = e["op"];
      // Two ranks: an all-gather or reduce-scatter sends half its buffer, an all-reduce all of it.
      EXPECT_EQ(b, op == "all_reduce" ? bytes : bytes / 2) << e.dump();
      if (e["unit"].get<int>() >= 0) sent += b;  // the engine's collectives (not the loss mean)
    }
    EXPECT_GT(spans, 0) << strategy_name(s);
    EXPECT_EQ(sent, stats.comm_total()) << strategy_name(s);
  }
}
