// The local backend's promises beyond single results: rank-order determinism (all_reduce is
// bit-identical to reduce_scatter + all_gather and to a sequential reference), async collectives
// overlapping compute in issue order, no memory of their own, traffic counts, split
// ordering, barrier, and one trace span per collective.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/cpu_affinity.hpp"
#include "core/base/cpu_simd.hpp"
#include "core/comm/comm_common.hpp"
#include "core/comm/launcher.hpp"
#include "core/comm/reduce.hpp"
#include "core/comm/traffic.hpp"
#include "core/trace/recorder.hpp"

using namespace shardlab;

namespace {

LaunchOptions ranks(int n) {
  LaunchOptions o;
  o.ranks = n;
  return o;
}

// Rank r's random input: values of mixed magnitude, and on every 4th element a cancellation
// (rank 0 holds +2^15 + d, rank 1 its negation), so the order of summation shows in the bits
// even after rounding to bf16 or f16.
std::vector<float> random_input(int rank, int64_t count) {
  std::mt19937 gen(1234 + rank);
  std::uniform_real_distribution<float> mag(-8.0f, 6.0f);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::vector<float> v(count);
  for (int64_t i = 0; i < count; ++i) {
    v[i] = mant(gen) * std::exp2(std::round(mag(gen)));
    const float big = 32768.0f + 64.0f * float(i % 16);
    if (i % 4 == 0 && rank == 0) v[i] = big;
    if (i % 4 == 0 && rank == 1) v[i] = -big;
  }
  return v;
}

Buffer to_dtype(Device& dev, const std::vector<float>& v, DType t) {
  Buffer b = dev.alloc(static_cast<int64_t>(v.size() * dtype_size(t)), MemCategory::workspace);
  for (size_t i = 0; i < v.size(); ++i) store_from_f32(b.data(), i, t, v[i]);
  return b;
}

// The contract written out: element i summed in rank order in f32, rounded once to t.
std::vector<uint16_t> reference_bits(int n, int64_t count, DType t, ReduceOp op, bool reversed,
                                     std::vector<float>* f32_out) {
  std::vector<std::vector<float>> in;
  for (int r = 0; r < n; ++r) {
    std::vector<float> v = random_input(r, count);
    for (float& x : v) x = round_to(t, x);  // what the rank's buffer holds
    in.push_back(std::move(v));
  }
  std::vector<uint16_t> bits(count);
  if (f32_out) f32_out->assign(count, 0.0f);
  for (int64_t i = 0; i < count; ++i) {
    float acc = in[reversed ? n - 1 : 0][i];
    for (int k = 1; k < n; ++k) acc = acc + in[reversed ? n - 1 - k : k][i];
    if (op == ReduceOp::avg) acc = acc / static_cast<float>(n);
    if (f32_out) (*f32_out)[i] = acc;
    bits[i] = t == DType::bf16 ? f32_to_bf16_bits(acc) : f32_to_f16_bits(acc);
  }
  return bits;
}

TEST(CommLocal, AllReduceIsBitIdenticalToReduceScatterPlusAllGatherAndToRankOrder) {
  const int n = 5;
  const int64_t per_rank = 3001;  // not a multiple of the reduce block or of n's chunks
  const int64_t count = n * per_rank;
  std::mutex mu;
  int compared = 0;
  launch(ranks(n), [&](RankContext& ctx) {
    Device& dev = *ctx.device;
    for (DType t : {DType::f32, DType::bf16, DType::f16}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
        const int64_t bytes = count * int64_t(dtype_size(t));
        Buffer in = to_dtype(dev, random_input(ctx.rank, count), t);
        Buffer ar = dev.alloc(bytes, MemCategory::workspace);
        Buffer shard = dev.alloc(per_rank * int64_t(dtype_size(t)), MemCategory::workspace);
        Buffer rsag = dev.alloc(bytes, MemCategory::workspace);
        ctx.comm->all_reduce(in.data(), ar.data(), count, t, op);
        ctx.comm->reduce_scatter(in.data(), shard.data(), per_rank, t, op);
        ctx.comm->all_gather(shard.data(), rsag.data(), per_rank, t);
        EXPECT_EQ(std::memcmp(ar.data(), rsag.data(), size_t(bytes)), 0)
            << dtype_name(t) << " " << reduce_op_name(op);

        // Against the sequential reference, bit for bit; and the reversed order differs, so the
        // comparison can tell orders apart.
        std::vector<float> ref32, rev32;
        std::vector<uint16_t> ref = reference_bits(n, count, t, op, false, &ref32);
        std::vector<uint16_t> rev = reference_bits(n, count, t, op, true, &rev32);
        if (t == DType::f32) {
          EXPECT_EQ(std::memcmp(ar.data(), ref32.data(), size_t(bytes)), 0) << reduce_op_name(op);
          EXPECT_NE(std::memcmp(rev32.data(), ref32.data(), size_t(bytes)), 0);
        } else {
          EXPECT_EQ(std::memcmp(ar.data(), ref.data(), size_t(bytes)), 0)
              << dtype_name(t) << " " << reduce_op_name(op);
          EXPECT_NE(ref, rev);
        }
        std::lock_guard<std::mutex> lk(mu);
        ++compared;
      }
    }
  });
  EXPECT_EQ(compared, n * 6);
}

// Large calls take the other paths of the local backend: the data movement cut into 256 KiB
// pieces that any rank may claim (with a partial last piece), f32 results of 8 MiB or more per
// rank written with non-temporal stores from a destination that is not 16-byte aligned, and bf16
// over several pieces. Still the rank-order reference, bit for bit.
TEST(CommLocal, LargeCallsInPiecesAndStreamedStoresKeepTheRankOrderBits) {
  const int n = 3;
  const int64_t per_rank = (int64_t{1} << 21) + 5;  // 8 MiB + 20 bytes of f32 per rank
  const int64_t count = n * per_rank;
  std::vector<float> ref32;
  reference_bits(n, count, DType::f32, ReduceOp::sum, false, &ref32);
  const int64_t half_count = 3 * 100003;
  const std::vector<uint16_t> ref16 =
      reference_bits(n, half_count, DType::bf16, ReduceOp::avg, false, nullptr);
  launch(ranks(n), [&](RankContext& ctx) {
    Device& dev = *ctx.device;
    const int64_t bytes = count * 4;
    Buffer in = to_dtype(dev, random_input(ctx.rank, count), DType::f32);
    // In place, one float past a 64-byte boundary: the streamed stores start after a peeled head.
    Buffer ar_storage = dev.alloc(bytes + 4, MemCategory::workspace);
    float* ar = reinterpret_cast<float*>(ar_storage.data()) + 1;
    std::memcpy(ar, in.data(), size_t(bytes));
    ctx.comm->all_reduce(ar, ar, count, DType::f32, ReduceOp::sum);
    EXPECT_EQ(std::memcmp(ar, ref32.data(), size_t(bytes)), 0) << "rank " << ctx.rank;

    Buffer shard = dev.alloc(per_rank * 4, MemCategory::workspace);
    Buffer rsag = dev.alloc(bytes, MemCategory::workspace);
    ctx.comm->reduce_scatter(in.data(), shard.data(), per_rank, DType::f32, ReduceOp::sum);
    ctx.comm->all_gather(shard.data(), rsag.data(), per_rank, DType::f32);
    EXPECT_EQ(std::memcmp(rsag.data(), ref32.data(), size_t(bytes)), 0) << "rank " << ctx.rank;

    Buffer h = to_dtype(dev, random_input(ctx.rank, half_count), DType::bf16);
    ctx.comm->all_reduce(h.data(), h.data(), half_count, DType::bf16, ReduceOp::avg);
    EXPECT_EQ(std::memcmp(h.data(), ref16.data(), size_t(half_count * 2)), 0)
        << "rank " << ctx.rank;
  });
}

// The f32 loop at every vector width the CPU runs (cpu_simd.hpp: SSE2, AVX2, AVX-512): the
// rank-order bits of the scalar contract, with and without streamed stores, from unaligned sources
// into an unaligned destination, in place, with a tail shorter than a vector, for sum and avg.
TEST(CommLocal, EveryVectorWidthGivesTheRankOrderBits) {
  const int n = 3;
  const int64_t len = 10000 + 13;
  std::vector<std::vector<float>> in;
  for (int r = 0; r < n; ++r) in.push_back(random_input(r, len + 8));
  int checked = 0;
  for (CpuSimd level : {CpuSimd::baseline, CpuSimd::avx2, CpuSimd::avx512}) {
    if (static_cast<int>(level) > static_cast<int>(cpu_simd_supported())) continue;
    ScopedCpuSimd at(level);
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg})
      for (bool stream : {false, true})
        for (int64_t off : {0, 1, 3}) {  // floats past the vectors' alignment
          std::vector<const void*> src;
          for (int r = 0; r < n; ++r) src.push_back(in[r].data() + off);
          std::vector<float> out(len + 8, 0.0f), own = in[1];
          void* dst[2] = {out.data() + off, own.data() + off};  // own: rank 1's, in place
          src[1] = own.data() + off;
          reduce_rank_order(src.data(), n, dst, 2, len, DType::f32, op, stream);
          for (int64_t i = 0; i < len; ++i) {
            float acc = in[0][off + i];
            for (int r = 1; r < n; ++r) acc = acc + in[r][off + i];
            if (op == ReduceOp::avg) acc = acc / static_cast<float>(n);
            ASSERT_EQ(std::memcmp(&out[off + i], &acc, 4), 0)
                << cpu_simd_name(level) << " " << reduce_op_name(op) << " stream " << stream
                << " offset " << off << " element " << i;
            ASSERT_EQ(std::memcmp(&own[off + i], &acc, 4), 0) << "in place, element " << i;
          }
          ++checked;
        }
  }
  EXPECT_GE(checked, 12);
}

TEST(CommLocal, AsyncCollectivesOverlapComputeAndRunInIssueOrder) {
  const int n = 4;
  const int64_t count = 50000;
  launch(ranks(n), [&](RankContext& ctx) {
    Device& dev = *ctx.device;
    // Two in-place sums of the same buffer, queued back to back: the second must see the first's
    // result, so each element ends as n * (sum over ranks) exactly (small integers).
    Buffer a = dev.alloc(count * 4, MemCategory::workspace);
    Buffer g = dev.alloc(n * count * 4, MemCategory::workspace);
    float* pa = a.f32();
    for (int64_t i = 0; i < count; ++i) pa[i] = float((i + ctx.rank) % 10);
    Work w1 = ctx.comm->all_reduce(pa, pa, count, DType::f32, ReduceOp::sum, true);
    Work w2 = ctx.comm->all_reduce(pa, pa, count, DType::f32, ReduceOp::sum, true);
    Work w3 = ctx.comm->all_gather(pa, g.data(), count, DType::f32, true);

    // Compute on the rank thread meanwhile: a GEMM whose result is checked too.
    const int m = 96;
    std::vector<float> A(m * m, 1.0f), B(m * m, 2.0f), C(m * m, 0.0f);
    for (int rep = 0; rep < 20; ++rep)
      dev.gemm(false, false, m, m, m, 1.0f, A.data(), m, B.data(), m, 0.0f, C.data(), m);
    for (float c : C) ASSERT_EQ(c, 2.0f * m);

    // A blocking call issued behind pending async ones runs after them.
    float root_value = float(ctx.rank) + 0.5f;
    ctx.comm->broadcast(&root_value, 1, DType::f32, n - 1);
    EXPECT_EQ(root_value, float(n - 1) + 0.5f);
    EXPECT_TRUE(w1.done());  // earlier calls finished before a later one
    EXPECT_TRUE(w2.done());
    EXPECT_TRUE(w3.done());
    w3.wait();
    w1.wait();
    w2.wait();
    for (int64_t i = 0; i < count; ++i) {
      float s = 0;
      for (int r = 0; r < n; ++r) s += float((i + r) % 10);
      ASSERT_EQ(pa[i], n * s) << "element " << i;
      for (int r = 0; r < n; ++r) ASSERT_EQ(g.f32()[r * count + i], n * s) << "gathered " << r;
    }
  });
}

// The collectives read and write the ranks' buffers directly and reduce in registers: no call,
// blocking or async, in place or not, of any dtype, takes memory from the rank's device. (The
// memory planner and the simulator charge none either: tests/sim_memory_test.cpp.)
TEST(CommLocal, CollectivesTakeNoMemoryOfTheirOwn) {
  const int n = 3;
  const int64_t count = 3 * 100003;  // several 256 KiB pieces per call
  launch(ranks(n), [&](RankContext& ctx) {
    std::vector<std::pair<MemCategory, int64_t>> changes;
    std::mutex mu;
    for (DType t : {DType::f32, DType::bf16}) {
      const int64_t es = int64_t(dtype_size(t));
      Buffer a = ctx.device->alloc_zeros(count * es, MemCategory::workspace);
      Buffer b = ctx.device->alloc_zeros(count * es, MemCategory::workspace);
      ctx.tracker->set_listener([&](const MemoryTracker::Change& c) {
        std::lock_guard<std::mutex> lk(mu);
        changes.push_back({c.category, c.delta});
      });
      const int64_t per = count / n;
      ctx.comm->all_reduce(a.data(), a.data(), count, t).wait();
      ctx.comm->all_reduce(a.data(), b.data(), count, t, ReduceOp::avg, true).wait();
      ctx.comm->reduce_scatter(a.data(), b.data(), per, t).wait();
      ctx.comm->reduce_scatter(b.data(), a.data(), per, t, ReduceOp::sum, true).wait();
      ctx.comm->all_gather(b.data(), a.data(), per, t).wait();
      ctx.comm->broadcast(a.data(), count, t, 1).wait();
      ctx.tracker->set_listener(nullptr);
      std::lock_guard<std::mutex> lk(mu);
      EXPECT_TRUE(changes.empty())
          << dtype_name(t) << ": " << changes.size() << " allocations, the first of "
          << (changes.empty() ? 0 : changes[0].second) << " bytes in "
          << (changes.empty() ? "" : mem_category_name(changes[0].first));
      changes.clear();
    }
    EXPECT_EQ(ctx.tracker->peak(MemCategory::comm_buffers), 0);
  });
}

TEST(CommLocal, TrafficCountsRingBytesPerRank) {
  const int n = 4;
  launch(ranks(n), [&](RankContext& ctx) {
    const int64_t c = 1000;
    Buffer a = ctx.device->alloc_zeros(n * c * 4, MemCategory::workspace);
    Buffer b = ctx.device->alloc_zeros(n * c * 4, MemCategory::workspace);
    ctx.comm->all_gather(a.data(), b.data(), c, DType::f32);
    ctx.comm->reduce_scatter(a.data(), b.data(), c, DType::bf16);
    ctx.comm->all_reduce(a.data(), b.data(), c, DType::f32, ReduceOp::sum, true).wait();
    ctx.comm->broadcast(a.data(), c, DType::f16, 0);
    Communicator::Traffic t = ctx.comm->traffic();
    EXPECT_EQ(t.all_gather, c * 4 * (n - 1));
    EXPECT_EQ(t.reduce_scatter, c * 2 * (n - 1));
    EXPECT_EQ(t.all_reduce, 2 * c * 4 * (n - 1) / n);
    EXPECT_EQ(t.broadcast, c * 2);
    EXPECT_EQ(t.total(), t.all_gather + t.reduce_scatter + t.all_reduce + t.broadcast);
    // Buffer: each collective's full size (nccl-tests' convention), summed over the calls.
    EXPECT_EQ(t.buffer, n * c * 4 + n * c * 2 + c * 4 + c * 2);
    EXPECT_EQ(collective_bytes(CommOp::all_gather, c, DType::f32, n), n * c * 4);
    EXPECT_EQ(collective_bytes(CommOp::barrier, 0, DType::f32, n), 0);
  });
}

TEST(CommLocal, SplitOrdersRanksByKeyThenOldRank) {
  const int n = 6;
  launch(ranks(n), [&](RankContext& ctx) {
    const int r = ctx.rank;
    // Colors {0,1,0,1,0,1}; keys tie for ranks 0 and 2 (key 0), rank 4 has key -1.
    const int color = r % 2;
    const int key = r == 4 ? -1 : (r == 5 ? -5 : 0);
    std::unique_ptr<Communicator> sub = ctx.comm->split(color, key);
    const std::vector<int> want =
        color == 0 ? std::vector<int>{4, 0, 2} : std::vector<int>{5, 1, 3};
    ASSERT_EQ(sub->size(), 3);
    std::vector<float> mine = {float(r)}, all(3, -1.0f);
    sub->all_gather(mine.data(), all.data(), 1, DType::f32);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(all[i], float(want[i])) << "rank " << r;
    EXPECT_EQ(want[sub->rank()], r);
    // A split of the split still works and reaches only its members.
    std::unique_ptr<Communicator> solo = sub->split(sub->rank(), 0);
    EXPECT_EQ(solo->size(), 1);
    float x = float(r);
    solo->all_reduce(&x, &x, 1, DType::f32);
    EXPECT_EQ(x, float(r));
  });
}

TEST(CommLocal, BarrierWaitsForEveryRank) {
  const int n = 4;
  std::vector<int> seen(n, 0);
  std::mutex mu;
  launch(ranks(n), [&](RankContext& ctx) {
    // Later ranks arrive later; without the barrier rank 0 would read before they write.
    std::this_thread::sleep_for(std::chrono::milliseconds(10 * ctx.rank));
    {
      std::lock_guard<std::mutex> lk(mu);
      seen[ctx.rank] = 1;
    }
    ctx.comm->barrier();
    std::lock_guard<std::mutex> lk(mu);
    for (int r = 0; r < n; ++r) EXPECT_EQ(seen[r], 1) << "rank " << ctx.rank << " passed early";
  });
}

TEST(CommLocal, EachCollectiveRecordsOneSpan) {
  LaunchOptions o = ranks(2);
  o.make_recorder = [](int rank) { return std::make_unique<Recorder>(rank, ""); };
  launch(o, [&](RankContext& ctx) {
    ASSERT_TRUE(ctx.recorder->enabled());
    EXPECT_EQ(ctx.comm->recorder(), ctx.recorder);
    float a[4] = {1, 2, 3, 4}, b[8];
    int64_t before = ctx.recorder->event_count();
    ctx.comm->all_gather(a, b, 4, DType::f32, false, {7, "params"});  // one span
    EXPECT_EQ(ctx.recorder->event_count(), before + 1);
    before = ctx.recorder->event_count();
    Work w = ctx.comm->broadcast(a, 4, DType::f32, 1, true);
    w.wait();
    w.wait();  // a second wait reports nothing more
    EXPECT_EQ(ctx.recorder->event_count(), before + 1);
    before = ctx.recorder->event_count();
    ctx.comm->all_reduce(a, b, 4, DType::f32);  // one span, and no memory event (no staging)
    EXPECT_EQ(ctx.recorder->event_count(), before + 1);

    // The spans themselves: op, unit, bytes (nccl-tests size), and the times' order.
    std::vector<nlohmann::json> spans;
    std::istringstream lines(ctx.recorder->buffered_text());
    for (std::string line; std::getline(lines, line);) {
      nlohmann::json j = nlohmann::json::parse(line);
      if (j["kind"] == "span" && j["lane"] == "comm") spans.push_back(j);
    }
    ASSERT_EQ(spans.size(), 3u);
    EXPECT_EQ(spans[0]["op"], "all_gather");
    EXPECT_EQ(spans[0]["unit"], 7);
    EXPECT_EQ(spans[0]["bytes"], 2 * 4 * 4);
    EXPECT_EQ(spans[1]["op"], "broadcast");
    EXPECT_EQ(spans[2]["op"], "all_reduce");
    EXPECT_EQ(spans[2]["bytes"], 4 * 4);
    EXPECT_EQ(spans[2]["dtype"], "f32");
    for (const nlohmann::json& sp : spans) {
      EXPECT_LE(sp["t_issue"].get<int64_t>(), sp["t_start"].get<int64_t>());
      EXPECT_LE(sp["t_start"].get<int64_t>(), sp["t_end"].get<int64_t>());
    }
    EXPECT_EQ(spans[0]["t_wait"], -1);                                                 // blocking
    EXPECT_GE(spans[1]["t_wait"].get<int64_t>(), spans[1]["t_issue"].get<int64_t>());  // async
  });
}

}  // namespace

// Ranks that fit on the process's CPUs run on one CPU each, rank r on the r-th; unbound when asked,
// when one rank has no peer, and when there are more ranks than CPUs.
TEST(CommLocal, RanksBindToCoresOfTheirOwnWhenTheyFit) {
  const std::vector<int> allowed = allowed_cpus();
  if (allowed.empty()) GTEST_SKIP() << "this system does not report thread affinity";
  const auto cpus_seen = [](const LaunchOptions& o) {
    std::vector<std::vector<int>> seen(static_cast<size_t>(o.ranks));
    launch(o, [&](RankContext& ctx) { seen[static_cast<size_t>(ctx.rank)] = this_thread_cpus(); });
    return seen;
  };
  if (allowed.size() >= 2) {
    LaunchOptions o = ranks(2);
    EXPECT_EQ(local_rank_cpus(o), (std::vector<int>{allowed[0], allowed[1]}));
    const auto seen = cpus_seen(o);
    EXPECT_EQ(seen[0], std::vector<int>{allowed[0]});
    EXPECT_EQ(seen[1], std::vector<int>{allowed[1]});
    o.bind_to_cores = false;
    EXPECT_TRUE(local_rank_cpus(o).empty());
    for (const auto& s : cpus_seen(o)) EXPECT_EQ(s, allowed);
  }
  EXPECT_TRUE(local_rank_cpus(ranks(1)).empty());
  EXPECT_EQ(cpus_seen(ranks(1))[0], allowed);
  const LaunchOptions more = ranks(static_cast<int>(allowed.size()) + 1);
  EXPECT_TRUE(local_rank_cpus(more).empty());
  for (const auto& s : cpus_seen(more)) EXPECT_EQ(s, allowed);
  // The process's mask is unchanged by its ranks' binding.
  EXPECT_EQ(allowed_cpus(), allowed);
  EXPECT_EQ(cpu_list_text({0, 1, 2, 5, 7, 8}), "0-2,5,7-8");
  EXPECT_EQ(cpu_list_text({3}), "3");
}
