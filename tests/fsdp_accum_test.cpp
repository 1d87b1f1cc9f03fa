// core/fsdp engine: gradient accumulation over K micro-batches against one K-times-larger batch,
// activation checkpointing against storing activations, and global-norm clipping across shards.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/fsdp_test_util.hpp"

using namespace shardlab;
using namespace shardlab::fsdp_test;

namespace {

// Reduced gradients of every unit after one forward/backward pass over K micro-batches of B rows
// per rank (step 0's batch), from rank 0; the norm clip_grad_norm reports with max 0 (no scaling).
struct Grads {
  std::vector<std::vector<float>> g;
  float norm = 0;
  int64_t peak_activations = 0;
};
Grads grads_after_one_pass(const GPTConfig& model, const EngineConfig& ec, int ranks, int B,
                           int K) {
  Grads out;
  LaunchOptions lo;
  lo.ranks = ranks;
  launch(lo, [&](RankContext& ctx) {
    Engine eng(*ctx.device, *ctx.comm, ctx.recorder, model, ec);
    GlobalBatch gb = make_batch(model, ranks * K * B, 16, 0);
    for (int k = 0; k < K; ++k) {
      const int64_t row = (static_cast<int64_t>(k) * ranks + ctx.rank) * B;
      eng.forward_backward(gb.tokens.data() + row * 16, gb.targets.data() + row * 16, B, 16, k, K);
    }
    const float norm = eng.clip_grad_norm(0.0f);
    std::vector<std::vector<float>> g;
    for (int u = 0; u < eng.num_units(); ++u) g.push_back(eng.gather_unit_grads(u));
    if (ctx.rank == 0) {
      out.g = std::move(g);
      out.norm = norm;
      out.peak_activations = ctx.tracker->peak(MemCategory::activations);
    }
  });
  return out;
}

double max_rel_diff(const std::vector<std::vector<float>>& a,
                    const std::vector<std::vector<float>>& b) {
  double scale = 0, diff = 0;
  for (size_t u = 0; u < a.size(); ++u)
    for (size_t i = 0; i < a[u].size(); ++i) {
      scale = std::max(scale, static_cast<double>(std::abs(b[u][i])));
      diff = std::max(diff, static_cast<double>(std::abs(a[u][i] - b[u][i])));
    }
  return diff / scale;
}

}  // namespace

TEST(FsdpAccum, KMicroBatchesEqualOneKTimesLargerBatch) {
  const GPTConfig model = tiny_model();
  for (Strategy s : {Strategy::no_shard, Strategy::shard_optim, Strategy::shard_grad_op,
                     Strategy::full_shard, Strategy::hybrid_shard}) {
    for (AccumMode mode : {AccumMode::reduce_each, AccumMode::no_sync}) {
      EngineConfig ec = test_config(s);
      ec.hybrid_group = 2;
      ec.accum_mode = mode;
      // One batch of 4 rows per rank, against 4 micro-batches of one row each: the same rows.
      Grads big = grads_after_one_pass(model, ec, 4, 4, 1);
      Grads acc = grads_after_one_pass(model, ec, 4, 1, 4);
      // Rows are assigned differently ((k*N + r)*B): the same set of 16 rows in both, so the
      // mean gradient is the same up to summation order.
      const double rel = max_rel_diff(acc.g, big.g);
      EXPECT_LT(rel, 1e-5) << strategy_name(s) << " " << accum_mode_name(mode);
      EXPECT_NEAR(acc.norm, big.norm, 1e-5 * big.norm);
    }
  }
  // no_sync keeps full gradients locally like no_shard, then reduces once: bit-identical.
  EngineConfig ns = test_config(Strategy::no_shard), fs = test_config(Strategy::full_shard);
  fs.accum_mode = AccumMode::no_sync;
  Grads a = grads_after_one_pass(model, ns, 4, 1, 4), b = grads_after_one_pass(model, fs, 4, 1, 4);
  EXPECT_EQ(a.g, b.g);
}

TEST(FsdpAccum, MixedPrecisionAccumulationWithinBf16Rounding) {
  // bf16 gradients: no_shard rounds the running sum each micro-batch, reduce_each rounds each
  // reduced micro-batch, no_sync rounds once. All within a few bf16 ulps (2^-8) of the big batch.
  const GPTConfig model = tiny_model();
  for (Strategy s : {Strategy::no_shard, Strategy::shard_grad_op, Strategy::full_shard}) {
    for (AccumMode mode : {AccumMode::reduce_each, AccumMode::no_sync}) {
      EngineConfig ec = test_config(s);
      ec.param_dtype = ec.reduce_dtype = DType::bf16;
      ec.accum_mode = mode;
      Grads big = grads_after_one_pass(model, ec, 2, 4, 1);
      Grads acc = grads_after_one_pass(model, ec, 2, 1, 4);
      EXPECT_LT(max_rel_diff(acc.g, big.g), 4.0 / 256)
          << strategy_name(s) << " " << accum_mode_name(mode);
      EXPECT_GT(big.norm, 0.0f);
    }
  }
}

TEST(FsdpAccum, AccumulationOverTwentyStepsTracksTheLargeBatch) {
  const GPTConfig model = tiny_model();
  EngineConfig ec = test_config(Strategy::full_shard);
  RunResult big = run_engine(model, ec, 2, 20, 4, 16, 1);
  RunResult acc = run_engine(model, ec, 2, 20, 1, 16, 4);
  // Rows per step are the same set; only their grouping differs.
  EXPECT_LT(max_abs_diff(acc.params, big.params), 0.01 * 20 * ec.optim.lr);
  // reduce_each sends the gradient K times; the parameters' all-gathers do not change.
  EXPECT_EQ(acc.stats.back().comm_reduce_scatter, 4 * big.stats.back().comm_reduce_scatter);
  EXPECT_EQ(acc.stats.back().comm_all_gather, 4 * big.stats.back().comm_all_gather);
  ec.accum_mode = AccumMode::no_sync;
  RunResult ns = run_engine(model, ec, 2, 20, 1, 16, 4);
  EXPECT_EQ(ns.stats.back().comm_reduce_scatter, big.stats.back().comm_reduce_scatter);
}

TEST(FsdpAccum, ActivationCheckpointingGivesIdenticalGradients) {
  GPTConfig model = tiny_model();
  model.n_layer = 3;
  for (Strategy s : {Strategy::no_shard, Strategy::full_shard}) {
    EngineConfig ec = test_config(s);
    Grads plain = grads_after_one_pass(model, ec, 2, 2, 1);
    ec.act_ckpt = true;
    Grads ckpt = grads_after_one_pass(model, ec, 2, 2, 1);
    EXPECT_EQ(ckpt.g, plain.g) << strategy_name(s);  // the same kernels on the same inputs
    // Stored: the residual stream, all three blocks' activations and the head's at the loss.
    // Checkpointed: the residual stream and one block's (recomputed in backward) or the head's.
    const int64_t block = BlockActivations::bytes_for(model, 2, 16);
    const int64_t head = HeadActivations::bytes_for(model, 2, 16);
    EXPECT_EQ(plain.peak_activations - ckpt.peak_activations,
              3 * block + head - std::max(block, head))
        << strategy_name(s);
  }
  EngineConfig ec = test_config(Strategy::full_shard);
  RunResult a = run_engine(model, ec, 2, 5, 2, 16);
  ec.act_ckpt = true;
  RunResult b = run_engine(model, ec, 2, 5, 2, 16);
  EXPECT_TRUE(bit_identical(a.params, b.params));
}

TEST(FsdpClip, GlobalNormAcrossShardsAndReplicaGroups) {
  const GPTConfig model = tiny_model();
  // The reference norm: the single-rank GPT's gradient on the whole batch (8 rows).
  MemoryTracker tracker;
  auto dev = make_cpu_device(tracker);
  GPT gpt(*dev, model, test_config(Strategy::no_shard).seed);
  GlobalBatch gb = make_batch(model, 8, 16, 0);
  gpt.forward(gb.tokens.data(), gb.targets.data(), 8, 16);
  gpt.backward();
  double sq = 0;
  for (int u = 0; u < gpt.num_units(); ++u) {
    std::vector<float> g(gpt.layout(u).numel);
    dev->copy_to_host(g.data(), gpt.unit_grads(u), g.size() * 4);
    for (float x : g) sq += static_cast<double>(x) * x;
  }
  const double ref = std::sqrt(sq);
  for (Strategy s : {Strategy::no_shard, Strategy::shard_optim, Strategy::shard_grad_op,
                     Strategy::full_shard, Strategy::hybrid_shard}) {
    EngineConfig ec = test_config(s);
    ec.hybrid_group = 2;  // replicas must not be counted twice: the norm would be sqrt(2) larger
    Grads g = grads_after_one_pass(model, ec, 4, 2, 1);
    EXPECT_NEAR(g.norm, ref, 1e-5 * ref) << strategy_name(s);
  }
  // Clipping scales the update: with a limit far below the norm, every strategy still agrees
  // with no_shard to rounding, and differs from an unclipped run.
  EngineConfig ec = test_config(Strategy::no_shard);
  ec.clip = static_cast<float>(ref / 10);
  RunResult clipped = run_engine(model, ec, 4, 5, 2, 16);
  EXPECT_NEAR(clipped.stats[0].grad_norm, ref, 1e-5 * ref);
  ec.strategy = Strategy::full_shard;
  RunResult clipped_fs = run_engine(model, ec, 4, 5, 2, 16);
  EXPECT_LT(max_abs_diff(clipped.params, clipped_fs.params), 0.01 * 5 * ec.optim.lr);
  ec.clip = 0;
  RunResult unclipped = run_engine(model, ec, 4, 5, 2, 16);
  EXPECT_GT(max_abs_diff(clipped.params, unclipped.params), 1e-4);
}
