// Op classification and nccl-tests bandwidth: bus factors and algbw/busbw against hand values.
#include <gtest/gtest.h>

#include "viewer/model/colors.hpp"
#include "viewer/model/ops.hpp"

namespace shardlab::viewer {

TEST(ViewerOps, ClassifiesKnownNamesAndSuffixes) {
  EXPECT_EQ(classify_op("forward"), OpKind::forward);
  EXPECT_EQ(classify_op("backward"), OpKind::backward);
  EXPECT_EQ(classify_op("optimizer"), OpKind::optimizer);
  EXPECT_EQ(classify_op("all_gather"), OpKind::all_gather);
  EXPECT_EQ(classify_op("reduce_scatter"), OpKind::reduce_scatter);
  EXPECT_EQ(classify_op("all_reduce"), OpKind::all_reduce);
  EXPECT_EQ(classify_op("forward:attn"), OpKind::forward);
  EXPECT_EQ(classify_op("all_gather.prefetch"), OpKind::all_gather);
  EXPECT_EQ(classify_op("broadcast"), OpKind::other);
  EXPECT_EQ(classify_op("forwardx"), OpKind::other);
  EXPECT_EQ(classify_op(""), OpKind::other);
  for (int k = 0; k < kNumOpKinds; ++k)
    EXPECT_EQ(classify_op(op_kind_name(static_cast<OpKind>(k))), static_cast<OpKind>(k));
}

TEST(ViewerOps, BusFactorsAreNcclTests) {
  for (int n : {1, 2, 4, 8}) {
    EXPECT_DOUBLE_EQ(bus_factor(OpKind::all_reduce, n), 2.0 * (n - 1) / n);
    EXPECT_DOUBLE_EQ(bus_factor(OpKind::all_gather, n), (n - 1.0) / n);
    EXPECT_DOUBLE_EQ(bus_factor(OpKind::reduce_scatter, n), (n - 1.0) / n);
  }
  EXPECT_DOUBLE_EQ(bus_factor(OpKind::all_reduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_factor(OpKind::other, 4), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(OpKind::all_gather, 0), 0.0);
}

TEST(ViewerOps, BandwidthOfOneCollective) {
  // 1 GB in 1 ms: algbw 1e12 B/s; all_reduce on 4 ranks moves 1.5x that over the bus.
  Bandwidth b = collective_bandwidth(OpKind::all_reduce, 1000000000, 1000000, 4);
  EXPECT_DOUBLE_EQ(b.algbw, 1e12);
  EXPECT_DOUBLE_EQ(b.busbw, 1.5e12);
  Bandwidth g = collective_bandwidth(OpKind::all_gather, 8 << 20, 2000000, 8);
  EXPECT_DOUBLE_EQ(g.algbw, (8 << 20) / 2e-3);
  EXPECT_DOUBLE_EQ(g.busbw, g.algbw * 7.0 / 8.0);
  Bandwidth z = collective_bandwidth(OpKind::all_gather, 100, 0, 4);
  EXPECT_EQ(z.algbw, 0.0);
  EXPECT_EQ(z.busbw, 0.0);
}

TEST(ViewerColors, TablesAreDistinctAndPackLikeImGui) {
  // Memory colours never reappear as op colours: the screenshot test tells panels apart by them.
  for (int c = 0; c < kNumMemCategories; ++c) {
    for (int k = 0; k < kNumOpKinds; ++k)
      EXPECT_FALSE(category_color(static_cast<MemCategory>(c)) == op_color(static_cast<OpKind>(k)));
    for (int d = c + 1; d < kNumMemCategories; ++d)
      EXPECT_FALSE(category_color(static_cast<MemCategory>(c)) ==
                   category_color(static_cast<MemCategory>(d)));
  }
  Rgba x{0x11, 0x22, 0x33, 0x44};
  EXPECT_EQ(x.packed(), 0x44332211u);  // IM_COL32(R, G, B, A)
}

}  // namespace shardlab::viewer
