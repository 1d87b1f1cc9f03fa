// --offload on the CUDA device: the host tier is pinned host memory (cudaHostAlloc) whose AdamW
// runs on the CPU, and the copies between the tiers run on the GPU's copy stream. Parameters and
// losses after 6 steps must be bit-identical to the same run without offload (the GPU's AdamW
// is compiled without fused multiply-adds, so it rounds as the host's does), on 1 GPU (optim) and
// on 2 GPUs over NCCL (optim, params, params with 2 micro-batches).
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "core/comm/launcher.hpp"
#include "core/fsdp/engine.hpp"
#include "tests/cuda/cuda_test_util.hpp"
#include "tests/fsdp_test_util.hpp"

namespace shardlab {
namespace {

struct OffloadRun {
  std::vector<std::vector<float>> params;  // per unit, from rank 0
  std::vector<float> losses;
  int64_t h2d = 0, d2h = 0;  // rank 0's copies in the last step
  bool pinned_host = false;  // rank 0's host tier tracked bytes (the pinned buffers)
};

OffloadRun run_cuda(const GPTConfig& model, EngineConfig ec, int ranks, int steps, int K) {
  const int B = 2, T = model.max_seq_len;
  OffloadRun out;
  LaunchOptions lo;
  lo.ranks = ranks;
  lo.device = "cuda";
  lo.backend = "nccl";
  launch(lo, [&](RankContext& ctx) {
    Device& dev = *ctx.device;
    Engine eng(dev, *ctx.comm, ctx.recorder, model, ec);
    for (int s = 0; s < steps; ++s) {
      const fsdp_test::GlobalBatch gb = fsdp_test::make_batch(model, ranks * K * B, T, s);
      std::vector<Buffer> bufs;
      std::vector<const int*> tok, tgt;
      for (int k = 0; k < K; ++k) {
        const int64_t row = (static_cast<int64_t>(k) * ranks + ctx.rank) * B;
        for (const std::vector<int>* v : {&gb.tokens, &gb.targets}) {
          Buffer b = dev.alloc(B * T * 4, MemCategory::workspace);
          dev.copy_from_host(b.data(), v->data() + row * T, B * T * 4);
          bufs.push_back(std::move(b));
        }
        tok.push_back(bufs[bufs.size() - 2].as<int>());
        tgt.push_back(bufs.back().as<int>());
      }
      const StepStats st = eng.step(tok, tgt, B, T);
      const float mean = eng.world_mean(st.loss);
      if (ctx.rank == 0) {
        out.losses.push_back(mean);
        out.h2d = st.copy_h2d;
        out.d2h = st.copy_d2h;
      }
    }
    std::vector<std::vector<float>> params;
    for (int u = 0; u < eng.num_units(); ++u) params.push_back(eng.gather_unit_params(u));
    if (ctx.rank == 0) {
      out.params = std::move(params);
      out.pinned_host = eng.host_tracker() && eng.host_tracker()->total() > 0;
    }
  });
  return out;
}

struct Case {
  Offload o;
  Strategy s;
  int ranks, K;
};

void expect_bit_identical(const Case& c) {
  const GPTConfig model = fsdp_test::tiny_model();
  EngineConfig ec = fsdp_test::test_config(c.s);
  const std::string what = detail::concat("offload ", offload_name(c.o), " ", strategy_name(c.s),
                                          " N=", c.ranks, " K=", c.K);
  const OffloadRun a = run_cuda(model, ec, c.ranks, 6, c.K);
  ec.offload = c.o;
  const OffloadRun b = run_cuda(model, ec, c.ranks, 6, c.K);
  EXPECT_EQ(a.h2d + a.d2h, 0) << what;
  EXPECT_GT(b.h2d, 0) << what;
  EXPECT_GT(b.d2h, 0) << what;
  EXPECT_TRUE(b.pinned_host) << what;
  EXPECT_EQ(a.losses, b.losses) << what;
  ASSERT_EQ(a.params.size(), b.params.size()) << what;
  for (size_t u = 0; u < a.params.size(); ++u) {
    ASSERT_EQ(a.params[u].size(), b.params[u].size()) << what << " unit " << u;
    for (size_t i = 0; i < a.params[u].size(); ++i)
      ASSERT_EQ(a.params[u][i], b.params[u][i]) << what << " unit " << u << "[" << i << "]";
  }
}

TEST(CudaOffload, OptimOnOneGpuIsBitIdentical) {
  SL_REQUIRE_CUDA();
  expect_bit_identical({Offload::optim, Strategy::no_shard, 1, 1});
  expect_bit_identical({Offload::optim, Strategy::full_shard, 1, 2});
}

TEST(CudaOffload, OptimAndParamsOnTwoGpusAreBitIdentical) {
  SL_REQUIRE_GPUS(2);
  expect_bit_identical({Offload::optim, Strategy::full_shard, 2, 1});
  expect_bit_identical({Offload::optim, Strategy::shard_grad_op, 2, 1});
  expect_bit_identical({Offload::params, Strategy::full_shard, 2, 1});
  expect_bit_identical({Offload::params, Strategy::full_shard, 2, 2});
}

// The host tier of a GPU is pinned memory charged to the host tracker, with CPU kernels: a buffer
// from it is written and read by the host, and a copy up then down through the copy stream
// returns the same bytes.
TEST(CudaOffload, HostTierIsPinnedTrackedAndCopiesRoundTrip) {
  SL_REQUIRE_CUDA();
  MemoryTracker gpu_t(0), host_t(0);
  auto gpu = make_cuda_device(gpu_t, 0);
  auto host = gpu->make_host_tier(host_t);
  EXPECT_EQ(host->kind(), DeviceKind::cpu);  // CPU kernels over it
  const std::vector<float> v = testing::random_vector(1 << 16, 11);
  const int64_t bytes = static_cast<int64_t>(v.size() * 4);
  Buffer h = host->alloc(bytes, MemCategory::optimizer_state);
  EXPECT_EQ(host_t.total(), bytes);
  EXPECT_EQ(gpu_t.current(MemCategory::optimizer_state), 0);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, h.data()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);  // page-locked, registered with CUDA
  host->copy_from_host(h.data(), v.data(), bytes);
  Buffer d = gpu->alloc(bytes, MemCategory::workspace);
  gpu->copy_from_host_tier(d.data(), h.data(), bytes, ReadBy::compute);
  Buffer back = host->alloc(bytes, MemCategory::workspace);
  gpu->copy_to_host_tier(back.data(), d.data(), bytes);
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(back.f32()[i], v[i]) << i;
  h.reset();
  back.reset();
  EXPECT_EQ(host_t.total(), 0);
}

}  // namespace
}  // namespace shardlab
