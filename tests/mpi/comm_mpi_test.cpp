// The MPI backend under mpirun (ctest runs this binary with -np 2 and -np 4): the collective
// table on the world and on subgroups from split, async collectives in issue order overlapping
// compute, reduce_scatter's ring: its staging charged as comm_buffers and calls in flight together,
// traffic, and bf16 sums of random data within a stated tolerance of the f32 reference. Owns
// main(): MPI init/finalize.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "core/comm/collective_table.hpp"
#include "core/comm/launcher.hpp"

using namespace shardlab;

namespace {

LaunchOptions mpi_options() {
  LaunchOptions o;
  o.backend = "mpi";
  return o;
}

void expect_clean(const TableCheck& c, int64_t want_calls) {
  EXPECT_EQ(c.calls, want_calls);
  for (size_t i = 0; i < c.failures.size() && i < 20; ++i) ADD_FAILURE() << c.failures[i];
}

TEST(CommMpi, WorldIsTheMpirunWorld) {
  launch(mpi_options(), [&](RankContext& ctx) {
    int rank = -1, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    EXPECT_EQ(ctx.rank, rank);
    EXPECT_EQ(ctx.world, size);
    EXPECT_EQ(ctx.comm->rank(), rank);
    EXPECT_EQ(ctx.comm->size(), size);
    EXPECT_STREQ(ctx.comm->backend(), "mpi");
    EXPECT_TRUE(under_mpirun());
  });
}

TEST(CommMpi, TableMatchesClosedForms) {
  const std::vector<int64_t> counts = {0, 1, 5, 8, 1024, 4099, 16387};
  launch(mpi_options(), [&](RankContext& ctx) {
    TableCheck c = check_collective_table(*ctx.comm, *ctx.device, counts);
    expect_clean(c, 3 * int64_t(counts.size()) * (4 + 8 + 8 + 2));
  });
}

TEST(CommMpi, TableOnSubgroupsFromSplit) {
  launch(mpi_options(), [&](RankContext& ctx) {
    const int n = ctx.world, r = ctx.rank;
    // Halves (or the whole world at n = 2... then pairs) with a reversed key inside each.
    const int g = n >= 4 ? 2 : 1;
    std::unique_ptr<Communicator> sub = ctx.comm->split(r % g, -r);
    EXPECT_EQ(sub->size(), n / g);
    EXPECT_EQ(sub->rank(), (n / g - 1) - r / g);
    TableCheck c = check_collective_table(*sub, *ctx.device, {3, 1024});
    expect_clean(c, 3 * 2 * (4 + 8 + 8 + 2));
  });
}

TEST(CommMpi, AsyncCollectivesOverlapComputeAndKeepIssueOrder) {
  launch(mpi_options(), [&](RankContext& ctx) {
    const int n = ctx.world;
    const int64_t count = 20000;
    std::vector<float> a(count), g(n * count);
    for (int64_t i = 0; i < count; ++i) a[i] = float((i + ctx.rank) % 10);
    Work w1 = ctx.comm->all_reduce(a.data(), a.data(), count, DType::f32, ReduceOp::sum, true);
    std::vector<float> A(64 * 64, 1.0f), B(64 * 64, 3.0f), C(64 * 64);
    for (int rep = 0; rep < 10; ++rep)
      ctx.device->gemm(false, false, 64, 64, 64, 1.0f, A.data(), 64, B.data(), 64, 0.0f, C.data(),
                       64);
    w1.wait();
    Work w2 = ctx.comm->all_gather(a.data(), g.data(), count, DType::f32, true);
    w2.wait();
    w2.wait();
    for (float c : C) ASSERT_EQ(c, 192.0f);
    for (int64_t i = 0; i < count; ++i) {
      float s = 0;
      for (int r = 0; r < n; ++r) s += float((i + r) % 10);
      ASSERT_EQ(a[i], s);
      for (int r = 0; r < n; ++r) ASSERT_EQ(g[r * count + i], s);
    }
  });
}

// The ring's blocks in flight (mpi_comm.cpp, Ring::inbox): in place, this rank's own block stays
// in recv until the last sum, so one staging block at N = 2 and two beyond; out of place the last
// step receives into recv, so none at N = 2 and one beyond.
TEST(CommMpi, ReduceScatterStagesItsBlocksInFlightInCommBuffers) {
  launch(mpi_options(), [&](RankContext& ctx) {
    const int n = ctx.world;
    const int64_t count = 1000;
    Buffer b = ctx.device->alloc(n * count * 4, MemCategory::workspace);
    Buffer out = ctx.device->alloc(count * 4, MemCategory::workspace);
    for (int64_t i = 0; i < n * count; ++i) b.f32()[i] = 1.0f;
    float* mine = b.f32() + ctx.rank * count;
    Work w = ctx.comm->reduce_scatter(b.data(), out.data(), count, DType::f32, ReduceOp::sum, true);
    EXPECT_EQ(ctx.tracker->current(MemCategory::comm_buffers), (n > 2 ? 1 : 0) * count * 4);
    w.wait();
    EXPECT_EQ(ctx.tracker->current(MemCategory::comm_buffers), 0);
    for (int64_t i = 0; i < count; ++i) ASSERT_EQ(out.f32()[i], float(n));
    w = ctx.comm->reduce_scatter(b.data(), mine, count, DType::f32, ReduceOp::avg, true);
    EXPECT_EQ(ctx.tracker->current(MemCategory::comm_buffers), (n > 2 ? 2 : 1) * count * 4);
    w.wait();
    EXPECT_EQ(ctx.tracker->current(MemCategory::comm_buffers), 0);
    for (int64_t i = 0; i < count; ++i) ASSERT_EQ(mine[i], 1.0f);
    Communicator::Traffic t = ctx.comm->traffic();
    EXPECT_EQ(t.reduce_scatter, 2 * count * 4 * (n - 1));
  });
}

// Two reduce_scatters in flight on one communicator, waited for in the opposite order, with an
// all_gather between them: each ring takes only its own messages (a tag per call). Every element
// differs by rank, block and call, so a message taken by the wrong call shows.
TEST(CommMpi, ReduceScattersInFlightTogetherKeepTheirOwnMessages) {
  launch(mpi_options(), [&](RankContext& ctx) {
    const int n = ctx.world;
    const int64_t count = 3001;
    auto value = [](int call, int rank, int64_t i) {
      return float(call * 1000 + rank * 10 + i % 7);
    };
    std::vector<float> in1(n * count), in2(n * count), out1(count), out2(count), g(n * 4);
    for (int64_t i = 0; i < n * count; ++i) {
      in1[i] = value(1, ctx.rank, i);
      in2[i] = value(2, ctx.rank, i);
    }
    std::vector<float> mine(4, float(ctx.rank));
    Work w1 =
        ctx.comm->reduce_scatter(in1.data(), out1.data(), count, DType::f32, ReduceOp::sum, true);
    Work wg = ctx.comm->all_gather(mine.data(), g.data(), 4, DType::f32, true);
    Work w2 =
        ctx.comm->reduce_scatter(in2.data(), out2.data(), count, DType::f32, ReduceOp::sum, true);
    w2.wait();
    wg.wait();
    w1.wait();
    for (int64_t i = 0; i < count; ++i) {
      const int64_t at = ctx.rank * count + i;  // this rank's block of every input
      float s1 = 0, s2 = 0;
      for (int r = 0; r < n; ++r) {
        s1 += value(1, r, at);
        s2 += value(2, r, at);
      }
      ASSERT_EQ(out1[i], s1) << "element " << i;
      ASSERT_EQ(out2[i], s2) << "element " << i;
    }
    for (int r = 0; r < n; ++r) ASSERT_EQ(g[r * 4], float(r));
  });
}

// MPI may combine partial sums in any order and the bf16 op rounds at each step, so the result is
// within a few bf16 ulps of the exact sum (here: n - 1 roundings of at most half an ulp of the
// running sum, bounded by the sum of magnitudes).
TEST(CommMpi, Bf16SumOfRandomDataIsWithinRoundingOfTheF32Reference) {
  launch(mpi_options(), [&](RankContext& ctx) {
    const int n = ctx.world;
    const int64_t count = 4096;
    // Every rank makes every rank's input, from the rank's seed.
    std::vector<std::vector<float>> in(n, std::vector<float>(count));
    for (int r = 0; r < n; ++r) {
      std::mt19937 gen(uint32_t(77 + r));
      std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
      for (float& x : in[r]) x = round_to(DType::bf16, dist(gen));
    }
    auto input = [&](int r, int64_t i) { return in[r][i]; };
    std::vector<uint16_t> buf(count);
    for (int64_t i = 0; i < count; ++i) buf[i] = f32_to_bf16_bits(input(ctx.rank, i));
    ctx.comm->all_reduce(buf.data(), buf.data(), count, DType::bf16);
    for (int64_t i = 0; i < count; ++i) {
      double exact = 0, mag = 0;
      for (int r = 0; r < n; ++r) {
        exact += input(r, i);
        mag += std::fabs(input(r, i));
      }
      const double tol = (n - 1) * mag * std::ldexp(1.0, -8);  // bf16: 8 significant bits
      ASSERT_NEAR(bf16_bits_to_f32(buf[i]), exact, tol) << "element " << i;
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // Ranks other than 0 print their failures only (set before InitGoogleTest, which reads it).
  if (rank != 0) GTEST_FLAG_SET(brief, true);
  ::testing::InitGoogleTest(&argc, argv);
  // Every rank's result decides the exit status.
  int failed = RUN_ALL_TESTS() != 0;
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any_failed && !failed)
    std::fprintf(stderr, "comm_mpi_test: another rank failed (see its output above)\n");
  MPI_Finalize();
  return any_failed;
}
