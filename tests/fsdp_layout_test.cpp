// core/fsdp: flat layouts, padding and shard ranges for every group size 1..8, the pieces of each
// entry a shard holds, and strategy names.
#include <gtest/gtest.h>

#include <vector>

#include "core/base/error.hpp"
#include "core/fsdp/flat_param.hpp"
#include "core/fsdp/strategy.hpp"

using namespace shardlab;

namespace {

// A block-like unit with C = 5: odd sizes so that most group sizes need padding.
std::vector<FlatEntry> odd_entries() {
  std::vector<FlatEntry> e;
  int64_t off = 0;
  auto add = [&](const char* name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    e.push_back({name, shape, off, n});
    off += n;
  };
  add("ln.weight", {5});
  add("ln.bias", {5});
  add("fc.weight", {5, 20});
  add("fc.bias", {20});
  add("proj.weight", {20, 5});
  add("proj.bias", {5});
  return e;  // 235 elements: 5 * 47, prime 47
}

}  // namespace

TEST(FsdpLayout, PaddingAndShardRangesForGroupSizes1To8) {
  for (int g = 1; g <= 8; ++g) {
    FlatLayout l(odd_entries(), g);
    EXPECT_EQ(l.numel(), 235);
    // Padded: the smallest multiple of g that is >= 235 (closed form, not round_up again).
    int64_t expect_padded = 235;
    while (expect_padded % g) ++expect_padded;
    EXPECT_EQ(l.padded_numel(), expect_padded) << "g=" << g;
    EXPECT_EQ(l.padding(), expect_padded - 235);
    EXPECT_LT(l.padding(), g);
    EXPECT_EQ(l.shard_size() * g, l.padded_numel());
    // Shards tile [0, padded) in rank order without gaps; padding sits at the end.
    int64_t covered = 0, pad = 0, real = 0;
    for (int r = 0; r < g; ++r) {
      ShardRange s = l.shard_range(r);
      EXPECT_EQ(s.offset, covered);
      EXPECT_EQ(s.size, l.shard_size());
      covered = s.end();
      pad += l.shard_padding(r);
      real += l.shard_real_numel(r);
    }
    EXPECT_EQ(covered, l.padded_numel());
    EXPECT_EQ(pad, l.padding());
    EXPECT_EQ(real, 235);
  }
  // Specific values: 235 over 3 ranks is 237 = 3 * 79; over 7 it is 238 = 7 * 34.
  EXPECT_EQ(FlatLayout(odd_entries(), 3).shard_size(), 79);
  EXPECT_EQ(FlatLayout(odd_entries(), 7).shard_size(), 34);
  EXPECT_EQ(FlatLayout(odd_entries(), 7).shard_padding(6), 3);
  EXPECT_EQ(FlatLayout(odd_entries(), 5).padding(), 0);
  EXPECT_EQ(FlatLayout(odd_entries(), 1).padding(), 0);
}

TEST(FsdpLayout, ShardPiecesCoverEveryEntryExactlyOnce) {
  for (int g : {1, 2, 3, 4, 5, 6, 7, 8}) {
    FlatLayout l(odd_entries(), g);
    std::vector<int64_t> seen(l.numel(), 0);
    for (int r = 0; r < g; ++r) {
      int64_t in_shard = 0;
      for (const ShardPiece& p : l.shard_pieces(r)) {
        const FlatEntry& e = l.entries()[p.entry];
        EXPECT_EQ(p.name, e.name);
        ASSERT_GT(p.count, 0);
        ASSERT_LE(p.entry_begin + p.count, e.numel);
        // The piece's flat position agrees from both ends: entry side and shard side.
        EXPECT_EQ(e.offset + p.entry_begin, l.shard_range(r).offset + p.shard_offset);
        for (int64_t i = 0; i < p.count; ++i) ++seen[e.offset + p.entry_begin + i];
        in_shard += p.count;
      }
      EXPECT_EQ(in_shard, l.shard_real_numel(r));
    }
    for (int64_t c : seen) ASSERT_EQ(c, 1) << "g=" << g;
  }
  // With 3 ranks (S = 79): shard 0 holds ln.weight, ln.bias and fc.weight[0, 69).
  FlatLayout l3(odd_entries(), 3);
  auto p0 = l3.shard_pieces(0);
  ASSERT_EQ(p0.size(), 3u);
  EXPECT_EQ(p0[2].name, "fc.weight");
  EXPECT_EQ(p0[2].entry_begin, 0);
  EXPECT_EQ(p0[2].count, 69);
  auto p1 = l3.shard_pieces(1);
  EXPECT_EQ(p1[0].name, "fc.weight");
  EXPECT_EQ(p1[0].entry_begin, 69);
  EXPECT_EQ(p1[0].count, 31);  // fc.weight has 100 elements
}

TEST(FsdpLayout, RejectsOverlapBadShapeAndBadRank) {
  std::vector<FlatEntry> e = odd_entries();
  e[1].offset = 3;
  EXPECT_THROW(FlatLayout(e, 2), InvalidArgument);
  e = odd_entries();
  e[2].numel = 99;
  EXPECT_THROW(FlatLayout(e, 2), InvalidArgument);
  EXPECT_THROW(FlatLayout(odd_entries(), 0), InvalidArgument);
  FlatLayout l(odd_entries(), 4);
  EXPECT_THROW(l.shard_range(4), InvalidArgument);
  EXPECT_THROW(l.shard_range(-1), InvalidArgument);
  EXPECT_EQ(l.find("proj.weight"), 4);
  EXPECT_THROW(l.find("nope"), InvalidArgument);
}

TEST(FsdpStrategy, NamesRoundTripAndGroupSizes) {
  for (Strategy s : {Strategy::no_shard, Strategy::shard_optim, Strategy::shard_grad_op,
                     Strategy::full_shard, Strategy::hybrid_shard})
    EXPECT_EQ(parse_strategy(strategy_name(s)), s);
  EXPECT_EQ(parse_strategy("ddp"), Strategy::no_shard);
  EXPECT_EQ(parse_strategy("zero3"), Strategy::full_shard);
  EXPECT_EQ(parse_strategy("hsdp"), Strategy::hybrid_shard);
  EXPECT_THROW(parse_strategy("zero4"), InvalidArgument);
  EXPECT_EQ(shard_group_size(Strategy::no_shard, 8, 0), 1);
  EXPECT_EQ(shard_group_size(Strategy::shard_optim, 8, 0), 8);
  EXPECT_EQ(shard_group_size(Strategy::hybrid_shard, 8, 4), 4);
  EXPECT_EQ(shard_group_size(Strategy::hybrid_shard, 8, 0), 8);  // 0: one group of all
  EXPECT_THROW(shard_group_size(Strategy::hybrid_shard, 6, 4), InvalidArgument);
}
