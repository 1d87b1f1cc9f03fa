// The NCCL communicator on every visible GPU (one thread per GPU, as the launcher runs it): each
// collective, dtype, reduction and in-place form against values computed on the host, async Work,
// split, barrier, traffic counters and the comm spans it records.
#include <gtest/gtest.h>
#include <nccl.h>

#include <exception>
#include <functional>
#include <thread>

#include "core/comm/cuda/nccl_comm.hpp"
#include "core/trace/recorder.hpp"
#include "tests/cuda/cuda_test_util.hpp"

namespace shardlab {
namespace {

struct RankCase {
  int rank = 0;
  int world = 1;
  MemoryTracker* tracker = nullptr;
  Device* dev = nullptr;
  Communicator* comm = nullptr;
};

// Runs fn on `world` threads, rank r on GPU r, and rethrows the first failure.
void run_ranks(int world, const std::function<void(RankCase&)>& fn) {
  const NcclId id = nccl_unique_id();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        set_thread_rank(r);
        MemoryTracker tracker(r);
        auto dev = make_cuda_device(tracker, r);
        auto comm = make_nccl_communicator(*dev, id, r, world);
        RankCase c{r, world, &tracker, dev.get(), comm.get()};
        fn(c);
        comm.reset();
        dev->synchronize();
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Small integers: exact in every dtype, and so are their sums over up to 8 ranks.
float value(int rank, int64_t i) { return static_cast<float>(rank + 1 + i % 5); }

Buffer upload(Device& dev, const std::vector<float>& v, DType t) {
  std::vector<uint16_t> raw(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) store_from_f32(raw.data(), i, t, v[i]);
  Buffer b = dev.alloc(static_cast<int64_t>(v.size() * dtype_size(t)), MemCategory::comm_buffers);
  dev.copy_from_host(b.data(), raw.data(), b.bytes());
  return b;
}

std::vector<float> download(Device& dev, const void* p, int64_t n, DType t) {
  std::vector<uint16_t> raw(static_cast<size_t>(n) * 2);
  dev.copy_to_host(raw.data(), p, n * static_cast<int64_t>(dtype_size(t)));
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = load_as_f32(raw.data(), i, t);
  return v;
}

double avg_tolerance(DType t) { return t == DType::f32 ? 1e-6 : (t == DType::bf16 ? 8e-3 : 1e-3); }

const DType kTypes[] = {DType::f32, DType::bf16, DType::f16};

TEST(CudaNccl, VersionMatchesHeader) {
  EXPECT_EQ(nccl_version(), std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." +
                                std::to_string(NCCL_PATCH));
}

TEST(CudaNccl, CpuDeviceIsRefused) {
  MemoryTracker tracker(0);
  auto cpu = make_cpu_device(tracker);
  EXPECT_THROW(make_nccl_communicator(*cpu, NcclId{}, 0, 1), Error);
}

TEST(CudaNccl, AllGatherEveryDtypeOutOfPlaceAndInPlace) {
  SL_REQUIRE_CUDA();
  const int world = cuda_device_count();
  run_ranks(world, [](RankCase& c) {
    const int64_t count = 1003;
    for (DType t : kTypes) {
      std::vector<float> mine(count);
      for (int64_t i = 0; i < count; ++i) mine[i] = value(c.rank, i);
      std::vector<float> want;
      for (int r = 0; r < c.world; ++r)
        for (int64_t i = 0; i < count; ++i) want.push_back(value(r, i));
      Buffer send = upload(*c.dev, mine, t);
      Buffer recv = c.dev->alloc(count * c.world * dtype_size(t), MemCategory::comm_buffers);
      c.comm->all_gather(send.data(), recv.data(), count, t);
      EXPECT_EQ(download(*c.dev, recv.data(), count * c.world, t), want) << dtype_name(t);
      // In place: this rank's slice already sits in the output.
      Buffer inplace = upload(*c.dev, std::vector<float>(count * c.world, -1.0f), t);
      char* slot = inplace.as<char>() + c.rank * count * dtype_size(t);
      c.dev->copy(slot, send.data(), send.bytes());
      c.comm->all_gather(slot, inplace.data(), count, t);
      EXPECT_EQ(download(*c.dev, inplace.data(), count * c.world, t), want) << dtype_name(t);
    }
  });
}

TEST(CudaNccl, ReduceScatterSumAndAvg) {
  SL_REQUIRE_CUDA();
  const int world = cuda_device_count();
  run_ranks(world, [](RankCase& c) {
    const int64_t count = 517;
    for (DType t : kTypes) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
        std::vector<float> full(count * c.world);
        for (int64_t i = 0; i < count * c.world; ++i) full[i] = value(c.rank, i);
        std::vector<float> want(count, 0.0f);
        for (int64_t i = 0; i < count; ++i) {
          for (int r = 0; r < c.world; ++r) want[i] += value(r, c.rank * count + i);
          if (op == ReduceOp::avg) want[i] /= c.world;
        }
        Buffer send = upload(*c.dev, full, t);
        Buffer recv = c.dev->alloc(count * dtype_size(t), MemCategory::comm_buffers);
        c.comm->reduce_scatter(send.data(), recv.data(), count, t, op);
        auto got = download(*c.dev, recv.data(), count, t);
        EXPECT_LE(testing::max_rel_error(got, want), avg_tolerance(t)) << dtype_name(t);
        if (op == ReduceOp::sum) {
          EXPECT_EQ(got, want) << dtype_name(t);  // integers: exact
        }
        // In place: the result lands in this rank's block of the input.
        char* slot = send.as<char>() + c.rank * count * dtype_size(t);
        c.comm->reduce_scatter(send.data(), slot, count, t, op);
        got = download(*c.dev, slot, count, t);
        EXPECT_LE(testing::max_rel_error(got, want), avg_tolerance(t)) << dtype_name(t);
      }
    }
  });
}

TEST(CudaNccl, AllReduceAndBroadcast) {
  SL_REQUIRE_CUDA();
  const int world = cuda_device_count();
  run_ranks(world, [](RankCase& c) {
    const int64_t count = (1 << 20) + 3;  // large enough for NCCL's pipelined protocols
    for (DType t : kTypes) {
      std::vector<float> mine(count), sum(count, 0.0f), root_data(count);
      for (int64_t i = 0; i < count; ++i) {
        mine[i] = value(c.rank, i);
        for (int r = 0; r < c.world; ++r) sum[i] += value(r, i);
        root_data[i] = value(c.world - 1, i) * 2.0f;
      }
      Buffer buf = upload(*c.dev, mine, t);
      c.comm->all_reduce(buf.data(), buf.data(), count, t, ReduceOp::sum);
      EXPECT_EQ(download(*c.dev, buf.data(), count, t), sum) << dtype_name(t);
      Buffer out = c.dev->alloc(buf.bytes(), MemCategory::comm_buffers);
      c.comm->all_reduce(buf.data(), out.data(), count, t, ReduceOp::avg);
      // Every rank now holds the same sums, so their average is the sum again (times N / N).
      EXPECT_LE(testing::max_rel_error(download(*c.dev, out.data(), count, t), sum),
                avg_tolerance(t));
      Buffer b = upload(*c.dev, c.rank == c.world - 1 ? root_data : mine, t);
      c.comm->broadcast(b.data(), count, t, c.world - 1);
      EXPECT_EQ(download(*c.dev, b.data(), count, t), root_data) << dtype_name(t);
    }
    EXPECT_THROW(c.comm->broadcast(nullptr, 0, DType::f32, c.world), InvalidArgument);
  });
}

// Async: the collective overlaps with compute queued after it; Work::wait orders the consumer.
TEST(CudaNccl, AsyncWorkOrdersTheComputeStream) {
  SL_REQUIRE_CUDA();
  const int world = cuda_device_count();
  run_ranks(world, [](RankCase& c) {
    const int64_t count = 1 << 18;
    std::vector<float> mine(count);
    for (int64_t i = 0; i < count; ++i) mine[i] = value(c.rank, i);
    Buffer send = upload(*c.dev, mine, DType::f32);
    Buffer recv = c.dev->alloc(count * c.world * 4, MemCategory::comm_buffers);
    Buffer copy = c.dev->alloc(recv.bytes(), MemCategory::workspace);
    Work w = c.comm->all_gather(send.data(), recv.data(), count, DType::f32, /*async=*/true);
    send.reset();  // freed early: the pool holds the block until the comm stream is past it
    Buffer scratch = c.dev->alloc(count * 4, MemCategory::workspace);
    c.dev->fill_zero(scratch.data(), scratch.bytes());  // compute work that may reuse memory
    w.wait();
    c.dev->copy(copy.data(), recv.data(), recv.bytes());
    auto got = download(*c.dev, copy.data(), count * c.world, DType::f32);
    for (int r = 0; r < c.world; ++r)
      for (int64_t i = 0; i < count; i += 4099) ASSERT_EQ(got[r * count + i], value(r, i));
    EXPECT_TRUE(w.done());
  });
}

TEST(CudaNccl, HostPointersAreRefusedOnEveryRank) {
  SL_REQUIRE_CUDA();
  const int world = cuda_device_count();
  run_ranks(world, [](RankCase& c) {
    std::vector<float> host(8 * c.world);
    EXPECT_THROW(c.comm->all_reduce(host.data(), host.data(), 8, DType::f32), InvalidArgument);
    EXPECT_THROW(c.comm->all_reduce(nullptr, nullptr, -1, DType::f32), InvalidArgument);
    c.comm->barrier();  // nothing was queued: the communicator is still usable
  });
}

TEST(CudaNccl, SplitOrdersByKeyAndReduces) {
  SL_REQUIRE_CUDA();
  const int world = cuda_device_count();
  run_ranks(world, [](RankCase& c) {
    const int color = c.rank % 2;
    auto sub = c.comm->split(color, /*key=*/-c.rank);  // reversed order inside each group
    ASSERT_NE(sub, nullptr);
    std::vector<int> members;
    for (int r = c.world - 1; r >= 0; --r)
      if (r % 2 == color) members.push_back(r);
    EXPECT_EQ(sub->size(), static_cast<int>(members.size()));
    EXPECT_EQ(members[static_cast<size_t>(sub->rank())], c.rank);
    Buffer b = upload(*c.dev, {static_cast<float>(c.rank)}, DType::f32);
    sub->all_reduce(b.data(), b.data(), 1, DType::f32);
    float want = 0.0f;
    for (int r : members) want += static_cast<float>(r);
    EXPECT_EQ(download(*c.dev, b.data(), 1, DType::f32)[0], want);
    EXPECT_STREQ(sub->backend(), "nccl");
  });
}

TEST(CudaNccl, TrafficAndCommSpans) {
  SL_REQUIRE_CUDA();
  const int world = cuda_device_count();
  run_ranks(world, [](RankCase& c) {
    Recorder rec(c.rank, "");
    c.comm->set_recorder(&rec);
    const int64_t count = 4096;
    Buffer send = c.dev->alloc_zeros(count * c.world * 4, MemCategory::comm_buffers);
    Buffer recv = c.dev->alloc(count * c.world * 4, MemCategory::comm_buffers);
    Work w = c.comm->all_gather(send.data(), recv.data(), count, DType::f32, true,
                                CallInfo{2, "params"});
    w.wait();
    c.comm->reduce_scatter(send.data(), recv.data(), count, DType::f32);
    c.comm->all_reduce(send.data(), recv.data(), count, DType::f32);
    c.comm->broadcast(send.data(), count, DType::f32, 0);
    c.comm->barrier();  // everything finished: all four spans are written
    const int64_t n = c.world;
    const auto tr = c.comm->traffic();
    EXPECT_EQ(tr.all_gather, count * 4 * (n - 1));
    EXPECT_EQ(tr.reduce_scatter, count * 4 * (n - 1));
    EXPECT_EQ(tr.all_reduce, 2 * count * 4 * (n - 1) / n);
    EXPECT_EQ(tr.broadcast, count * 4);
    const std::string text = rec.buffered_text();
    for (const char* op : {"all_gather", "reduce_scatter", "all_reduce", "broadcast"})
      EXPECT_NE(text.find(std::string("\"op\":\"") + op + "\""), std::string::npos) << op;
    EXPECT_NE(text.find("\"lane\":\"comm\""), std::string::npos);
    EXPECT_NE(text.find("\"unit\":2"), std::string::npos);
    c.comm->set_recorder(nullptr);
  });
}

TEST(CudaNccl, InitAllFromOneThread) {
  SL_REQUIRE_CUDA();
  const int world = cuda_device_count();
  std::vector<std::unique_ptr<MemoryTracker>> trackers;
  std::vector<std::unique_ptr<Device>> devs;
  std::vector<Device*> ptrs;
  for (int r = 0; r < world; ++r) {
    trackers.push_back(std::make_unique<MemoryTracker>(r));
    devs.push_back(make_cuda_device(*trackers.back(), r));
    ptrs.push_back(devs.back().get());
  }
  auto comms = make_nccl_communicators(ptrs);
  ASSERT_EQ(static_cast<int>(comms.size()), world);
  std::vector<std::thread> threads;
  std::vector<float> results(static_cast<size_t>(world), -1.0f);
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      Buffer b = upload(*devs[r], {1.0f + r}, DType::f32);
      comms[r]->all_reduce(b.data(), b.data(), 1, DType::f32);
      results[static_cast<size_t>(r)] = download(*devs[r], b.data(), 1, DType::f32)[0];
      comms[r].reset();  // destruction is an intra-node collective: each rank on its own thread
    });
  }
  for (auto& t : threads) t.join();
  const float want = static_cast<float>(world * (world + 1) / 2);
  for (float x : results) EXPECT_EQ(x, want);
}

}  // namespace
}  // namespace shardlab
