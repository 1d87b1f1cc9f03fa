// Interval unions and exposed communication, on hand-made spans and against a per-nanosecond
// brute force on random ones.
#include <gtest/gtest.h>

#include <random>

#include "viewer/model/intervals.hpp"

namespace shardlab::viewer {

namespace {
SpanEvent span(Lane lane, const char* op, int64_t t0, int64_t t1) {
  return {lane, op, 0, 0, DType::f32, t0, t0, t1, -1};
}
}  // namespace

TEST(ViewerIntervals, UnionSubtractClip) {
  auto u = union_of({{5, 10}, {0, 3}, {2, 4}, {10, 12}, {20, 20}});
  ASSERT_EQ(u.size(), 2u);
  EXPECT_EQ(u[0], (Interval{0, 4}));
  EXPECT_EQ(u[1], (Interval{5, 12}));
  auto d = subtract({{0, 100}}, {{10, 20}, {30, 40}, {90, 120}});
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0], (Interval{0, 10}));
  EXPECT_EQ(d[1], (Interval{20, 30}));
  EXPECT_EQ(d[2], (Interval{40, 90}));
  EXPECT_EQ(total_length(d), 70);
  auto c = clip(u, 3, 6);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0], (Interval{3, 4}));
  EXPECT_EQ(c[1], (Interval{5, 6}));
}

TEST(ViewerExposedComm, HandMadeSpans) {
  // Compute [0,10) and [20,30); an all-gather [5,25) is hidden except for [10,20).
  std::vector<SpanEvent> s = {span(Lane::compute, "forward", 0, 10),
                              span(Lane::compute, "forward", 20, 30),
                              span(Lane::comm, "all_gather", 5, 25)};
  ExposedComm e = exposed_comm(s);
  EXPECT_EQ(e.comm_ns, 20);
  EXPECT_EQ(e.exposed_ns, 10);
  ASSERT_EQ(e.exposed.size(), 1u);
  EXPECT_EQ(e.exposed[0], (Interval{10, 20}));
  EXPECT_DOUBLE_EQ(e.overlap(), 0.5);
  // Restricted to [0, 15): comm [5,15), exposed [10,15).
  ExposedComm w = exposed_comm_in(e, 0, 15);
  EXPECT_EQ(w.comm_ns, 10);
  EXPECT_EQ(w.exposed_ns, 5);

  // Fully hidden, fully exposed, and no comm at all.
  EXPECT_EQ(exposed_comm({span(Lane::compute, "backward", 0, 100),
                          span(Lane::comm, "reduce_scatter", 10, 90)})
                .exposed_ns,
            0);
  EXPECT_EQ(exposed_comm({span(Lane::comm, "all_reduce", 10, 90)}).exposed_ns, 80);
  EXPECT_DOUBLE_EQ(exposed_comm({span(Lane::compute, "forward", 0, 5)}).overlap(), 1.0);
  // Two overlapping collectives count their union once.
  ExposedComm two =
      exposed_comm({span(Lane::comm, "all_gather", 0, 10), span(Lane::comm, "all_gather", 5, 15)});
  EXPECT_EQ(two.comm_ns, 15);
  EXPECT_EQ(two.exposed_ns, 15);
}

TEST(ViewerExposedComm, MatchesBruteForceOnRandomSpans) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> t(0, 200), len(0, 40), n(0, 8);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<SpanEvent> s;
    int nc = n(rng), nm = n(rng);
    for (int i = 0; i < nc + nm; ++i) {
      int a = t(rng);
      s.push_back(span(i < nc ? Lane::compute : Lane::comm, "x", a, a + len(rng)));
    }
    int64_t comm = 0, exposed = 0;
    for (int64_t x = 0; x < 260; ++x) {
      bool in_comm = false, in_compute = false;
      for (const SpanEvent& e : s) {
        bool in = e.t_start <= x && x < e.t_end;
        (e.lane == Lane::comm ? in_comm : in_compute) |= in;
      }
      comm += in_comm;
      exposed += in_comm && !in_compute;
    }
    ExposedComm e = exposed_comm(s);
    EXPECT_EQ(e.comm_ns, comm) << "trial " << trial;
    EXPECT_EQ(e.exposed_ns, exposed) << "trial " << trial;
  }
}

}  // namespace shardlab::viewer
