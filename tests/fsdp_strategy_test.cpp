// core/fsdp/strategy: the decision table (one row per strategy) against the strategy tables of
// docs/memory.md (what each keeps, by ZeRO stage) and docs/fsdp.md (what each does), and the
// gradient accumulation each strategy, reduce dtype and accumulation mode lead to.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/fsdp/strategy.hpp"

using namespace shardlab;

namespace {

// The cells of the markdown table rows whose first cell names a strategy (`no_shard`, ...), by
// strategy name; the first cell is kept whole (it may carry "(ZeRO-1)").
std::map<std::string, std::vector<std::string>> strategy_rows(const std::string& doc,
                                                              const std::string& header) {
  std::ifstream f(std::string(SHARDLAB_SOURCE_DIR) + "/" + doc);
  EXPECT_TRUE(f.good()) << doc;
  std::map<std::string, std::vector<std::string>> rows;
  std::string line;
  bool in_table = false;
  while (std::getline(f, line)) {
    if (line.rfind(header, 0) == 0) in_table = true;
    if (!in_table) continue;
    if (line.empty() || line[0] != '|') {
      if (!rows.empty()) break;
      continue;
    }
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(1));
    std::string c;
    while (std::getline(ss, c, '|')) {
      const size_t a = c.find_first_not_of(' '), b = c.find_last_not_of(' ');
      cells.push_back(a == std::string::npos ? "" : c.substr(a, b - a + 1));
    }
    const size_t q0 = cells[0].find('`'), q1 = cells[0].find('`', q0 + 1);
    if (q0 == std::string::npos || q1 == std::string::npos) continue;
    rows[cells[0].substr(q0 + 1, q1 - q0 - 1)] = cells;
  }
  return rows;
}

bool contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

const char* placement(Placement p) { return p == Placement::full ? "full" : "shard"; }

}  // namespace

TEST(FsdpStrategyTable, OneRowPerStrategyInEnumOrder) {
  const auto& table = strategy_table();
  std::printf("%-14s %-7s %-6s %-6s %-6s %-26s %-8s %s\n", "strategy", "zero", "params", "grads",
              "optim", "gradient collective", "reshard", "gather_after_step");
  for (int i = 0; i < kNumStrategies; ++i) {
    const StrategySpec& s = table[i];
    std::printf("%-14s %-7s %-6s %-6s %-6s %-26s %-8s %s\n", strategy_name(s.strategy), s.zero,
                placement(s.params), placement(s.grads), placement(s.optim),
                grad_collective_name(s.grad_collective), s.reshard_after_forward ? "yes" : "no",
                s.gather_after_step ? "yes" : "no");
    EXPECT_EQ(static_cast<int>(s.strategy), i);
    EXPECT_EQ(&strategy_spec(s.strategy), &s);
    // ZeRO's stages shard optimizer state, then gradients, then parameters: never a later state
    // without the earlier ones.
    if (s.grads == Placement::shard) {
      EXPECT_EQ(s.optim, Placement::shard);
    }
    if (s.params == Placement::shard) {
      EXPECT_EQ(s.grads, Placement::shard);
    }
    // Sharded parameters are gathered per unit; full ones updated in shards are gathered after.
    EXPECT_EQ(s.reshard_after_forward, s.params == Placement::shard);
    EXPECT_EQ(s.gather_after_step, s.params == Placement::full && s.optim == Placement::shard);
    // Only a replicated gradient is all-reduced whole.
    EXPECT_EQ(s.grad_collective == GradCollective::all_reduce, s.optim == Placement::full);
  }
}

TEST(FsdpStrategyTable, MatchesDocsMemoryStrategyTable) {
  const auto rows = strategy_rows("docs/memory.md", "| strategy | params | grads |");
  ASSERT_EQ(rows.size(), static_cast<size_t>(kNumStrategies));
  for (const StrategySpec& s : strategy_table()) {
    SCOPED_TRACE(strategy_name(s.strategy));
    const std::vector<std::string>& r = rows.at(strategy_name(s.strategy));
    ASSERT_GE(r.size(), 4u);
    // "p Psi" is kept whole; "p Psi/N" or "p Psi/G" is a shard.
    EXPECT_EQ(contains(r[1], "Psi/") ? Placement::shard : Placement::full, s.params) << r[1];
    EXPECT_EQ(contains(r[2], "Psi/") ? Placement::shard : Placement::full, s.grads) << r[2];
    EXPECT_EQ(contains(r[3], "Psi/") ? Placement::shard : Placement::full, s.optim) << r[3];
    if (contains(r[0], "(ZeRO-")) {
      EXPECT_TRUE(contains(r[0], s.zero)) << r[0];
    }
  }
}

TEST(FsdpStrategyTable, MatchesDocsFsdpWhatEachStrategyDoes) {
  const auto rows =
      strategy_rows("docs/fsdp.md", "| strategy | params (persistent) | grads (persistent) |");
  ASSERT_EQ(rows.size(), static_cast<size_t>(kNumStrategies));
  for (const StrategySpec& s : strategy_table()) {
    SCOPED_TRACE(strategy_name(s.strategy));
    const std::vector<std::string>& r = rows.at(strategy_name(s.strategy));
    ASSERT_GE(r.size(), 7u);
    EXPECT_EQ(r[1].rfind("shard", 0) == 0 ? Placement::shard : Placement::full, s.params);
    EXPECT_EQ(r[2].rfind("shard", 0) == 0 ? Placement::shard : Placement::full, s.grads);
    EXPECT_EQ(r[3].rfind("shard", 0) == 0 ? Placement::shard : Placement::full, s.optim);
    EXPECT_EQ(contains(r[4], "all-gather before forward") || contains(r[4], "as full_shard"),
              s.reshard_after_forward)
        << r[4];
    const GradCollective doc = r[5].rfind("all-reduce", 0) == 0 ? GradCollective::all_reduce
                               : contains(r[5], "all-reduce of the shard")
                                   ? GradCollective::reduce_scatter_all_reduce
                                   : GradCollective::reduce_scatter;
    EXPECT_EQ(doc, s.grad_collective) << r[5];
    EXPECT_EQ(contains(r[6], "all-gather params"), s.gather_after_step) << r[6];
  }
}

TEST(FsdpStrategyTable, GradientAccumulationFollowsWhatIsKept) {
  for (const StrategySpec& s : strategy_table()) {
    SCOPED_TRACE(strategy_name(s.strategy));
    for (AccumMode mode : {AccumMode::reduce_each, AccumMode::no_sync}) {
      const GradAccum f32 = grad_accum(s.strategy, DType::f32, mode);
      const GradAccum bf16 = grad_accum(s.strategy, DType::bf16, mode);
      if (s.grads == Placement::full) {
        // Full gradients accumulate locally whatever the mode; fp32 ones take backward directly.
        EXPECT_EQ(f32, GradAccum::direct);
        EXPECT_EQ(bf16, GradAccum::fold);
      } else {
        const GradAccum want =
            mode == AccumMode::no_sync ? GradAccum::no_sync : GradAccum::reduce_each;
        EXPECT_EQ(f32, want) << grad_accum_name(f32);
        EXPECT_EQ(bf16, want) << grad_accum_name(bf16);
      }
    }
  }
}
