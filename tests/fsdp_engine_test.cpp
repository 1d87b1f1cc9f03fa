// core/fsdp engine: every strategy trains the same model to the same parameters. On the local
// backend (rank-ordered reductions) no_shard, shard_optim, shard_grad_op and full_shard agree bit
// for bit after 20 steps; against the single-rank GPT reference and for hybrid_shard they agree
// within a tolerance.
#include <gtest/gtest.h>

#include <cstring>

#include "tests/fsdp_test_util.hpp"

using namespace shardlab;
using namespace shardlab::fsdp_test;

namespace {
const Strategy kFour[] = {Strategy::no_shard, Strategy::shard_optim, Strategy::shard_grad_op,
                          Strategy::full_shard};
}

TEST(FsdpEngine, FourStrategiesBitIdenticalAfter20Steps) {
  const GPTConfig model = tiny_model();
  for (int ranks : {2, 3, 4}) {  // 3: units need padding
    RunResult ref;
    for (Strategy s : kFour) {
      EngineConfig ec = test_config(s);
      RunResult r = run_engine(model, ec, ranks, 20, 2, 16);
      ASSERT_EQ(r.params.size(), static_cast<size_t>(num_units(model)));
      if (s == Strategy::no_shard) {
        ref = r;
        // Training happened: the loss fell.
        EXPECT_LT(r.losses.back(), r.losses.front() - 0.3f);
        continue;
      }
      EXPECT_TRUE(bit_identical(r.params, ref.params))
          << strategy_name(s) << " on " << ranks << " ranks differs from no_shard by up to "
          << max_abs_diff(r.params, ref.params);
      EXPECT_EQ(r.losses, ref.losses) << strategy_name(s);
    }
  }
}

TEST(FsdpEngine, MatchesSingleRankReferenceWithTheSameGlobalBatch) {
  const GPTConfig model = tiny_model();
  EngineConfig ec = test_config(Strategy::full_shard);
  RunResult ref = run_reference(model, ec, 4 * 2, 20, 16);
  RunResult r = run_engine(model, ec, 4, 20, 2, 16);
  const double d = max_abs_diff(r.params, ref.params);
  std::printf("full_shard (4 ranks) vs single rank after 20 steps: max |dparam| %.3g\n", d);
  // Summation order differs (per-rank means, then a sum over ranks), and Adam divides by
  // sqrt(v): elements with tiny gradients turn rounding into steps of up to lr. The tolerance is
  // 1% of the largest move 20 Adam steps can make (20 * lr); with lr 1e-3 the gap is ~3e-6.
  EXPECT_LT(d, 0.01 * 20 * ec.optim.lr);
  for (size_t s = 0; s < ref.losses.size(); ++s) EXPECT_NEAR(r.losses[s], ref.losses[s], 1e-3);
  // One rank through the engine is the reference computation itself.
  RunResult one = run_engine(model, ec, 1, 20, 8, 16);
  std::printf("engine on 1 rank vs single rank: max |dparam| %.3g\n",
              max_abs_diff(one.params, ref.params));
  EXPECT_LT(max_abs_diff(one.params, ref.params), 1e-5);
}

TEST(FsdpEngine, HybridShardMatchesFullShardWithinTolerance) {
  // hybrid_shard sums a group's gradients first, then across groups: another summation order
  // than full_shard's rank order, so agreement is within rounding (same bound as above).
  const GPTConfig model = tiny_model();
  RunResult full = run_engine(model, test_config(Strategy::full_shard), 4, 20, 2, 16);
  for (int g : {1, 2, 4}) {
    EngineConfig ec = test_config(Strategy::hybrid_shard);
    ec.hybrid_group = g;
    RunResult h = run_engine(model, ec, 4, 20, 2, 16);
    const double d = max_abs_diff(h.params, full.params);
    std::printf("hybrid_shard G=%d (4 ranks) vs full_shard: max |dparam| %.3g\n", g, d);
    EXPECT_LT(d, 0.01 * 20 * ec.optim.lr) << "G=" << g;
    EXPECT_LT(h.losses.back(), h.losses.front() - 0.3f);
    // G = N is full_shard; G = 1 all-reduces whole units in the same rank order as the
    // reduce-scatter: both bit-identical to full_shard.
    if (g != 2) {
      EXPECT_TRUE(bit_identical(h.params, full.params)) << "G=" << g;
    }
  }
}

TEST(FsdpEngine, MixedPrecisionStrategiesAgreeAndTrackFp32) {
  const GPTConfig model = tiny_model();
  RunResult f32 = run_engine(model, test_config(Strategy::no_shard), 4, 20, 2, 16);
  for (DType pd : {DType::bf16, DType::f16}) {
    RunResult ref;
    for (Strategy s : kFour) {
      EngineConfig ec = test_config(s);
      ec.param_dtype = ec.reduce_dtype = pd;
      RunResult r = run_engine(model, ec, 4, 20, 2, 16);
      if (s == Strategy::no_shard) {
        ref = r;
        // Parameters are rounded to 8 (bf16) or 11 (f16) bits for compute, gradients for the
        // reduction; the fp32 master copy keeps the small updates. Loss curves stay together.
        double worst = 0;
        for (size_t i = 0; i < r.losses.size(); ++i)
          worst = std::max(worst, static_cast<double>(std::abs(r.losses[i] - f32.losses[i])));
        std::printf("%s vs f32 (no_shard, 4 ranks): max |dloss| %.3g, max |dparam| %.3g\n",
                    dtype_name(pd), worst, max_abs_diff(r.params, f32.params));
        EXPECT_LT(worst, pd == DType::bf16 ? 0.05 : 0.01);
        EXPECT_LT(r.losses.back(), r.losses.front() - 0.3f);
        continue;
      }
      // The same casts happen at the same places in every strategy, and the reductions (fp32
      // accumulation, one rounding) are rank-ordered: still bit-identical.
      EXPECT_TRUE(bit_identical(r.params, ref.params))
          << dtype_name(pd) << " " << strategy_name(s) << ": max |dparam| "
          << max_abs_diff(r.params, ref.params);
    }
  }
}

TEST(FsdpEngine, BytesCommunicatedPerStepEqualTheory) {
  const GPTConfig model = tiny_model();
  for (int n : {2, 3, 4}) {
    for (DType dt : {DType::f32, DType::bf16}) {
      for (Strategy s : {Strategy::no_shard, Strategy::shard_optim, Strategy::shard_grad_op,
                         Strategy::full_shard, Strategy::hybrid_shard}) {
        if (s == Strategy::hybrid_shard && n != 4) continue;
        EngineConfig ec = test_config(s);
        ec.hybrid_group = 2;
        ec.param_dtype = ec.reduce_dtype = dt;
        RunResult r = run_engine(model, ec, n, 2, 1, 16);
        const StepStats& st = r.stats.back();
        const int g = shard_group_size(s, n, 2);
        // Psi_p: padded to the group (per unit); elements-worth per rank, times the dtype size.
        int64_t psi_p = 0, psi = 0;
        for (int u = 0; u < num_units(model); ++u) {
          psi += unit_layout(model, u).numel;
          psi_p += (unit_layout(model, u).numel + g - 1) / g * g;
        }
        const int64_t e = dtype_size(dt);
        int64_t ag = 0, rs = 0, ar = 0, inter = 0;
        // Buffer: the collectives' full sizes (nccl-tests' convention), per rank per step.
        int64_t buffer = 0;
        switch (s) {
          case Strategy::no_shard:  // 2 Psi (N-1)/N: all-reduce, counted per unit
            for (int u = 0; u < num_units(model); ++u)
              ar += 2 * unit_layout(model, u).numel * e * (n - 1) / n;
            EXPECT_NEAR(static_cast<double>(ar), 2.0 * psi * e * (n - 1) / n, num_units(model));
            inter = ar;
            buffer = psi * e;  // Psi
            break;
          case Strategy::shard_optim:
          case Strategy::shard_grad_op:  // Psi (N-1)/N reduce-scatter + Psi (N-1)/N all-gather
            rs = psi_p * e * (n - 1) / n;
            ag = psi_p * e * (n - 1) / n;
            buffer = 2 * psi_p * e;  // 2 Psi_p
            break;
          case Strategy::full_shard:  // 3 Psi (N-1)/N: two all-gathers, one reduce-scatter
            ag = 2 * psi_p * e * (n - 1) / n;
            rs = psi_p * e * (n - 1) / n;
            buffer = 3 * psi_p * e;  // 3 Psi_p
            break;
          case Strategy::hybrid_shard: {  // full_shard in the group, all-reduce of shards across
            ag = 2 * psi_p * e * (g - 1) / g;
            rs = psi_p * e * (g - 1) / g;
            const int groups = n / g;
            for (int u = 0; u < num_units(model); ++u) {
              const int64_t shard = (unit_layout(model, u).numel + g - 1) / g;
              ar += 2 * shard * e * (groups - 1) / groups;
              buffer += shard * e;  // the shard's all-reduce: Psi_p / G
            }
            inter = ar;
            buffer += 3 * psi_p * e;  // full_shard in the group
            break;
          }
        }
        EXPECT_EQ(st.comm_all_gather, ag)
            << strategy_name(s) << " N=" << n << " " << dtype_name(dt);
        EXPECT_EQ(st.comm_reduce_scatter, rs) << strategy_name(s) << " N=" << n;
        EXPECT_EQ(st.comm_all_reduce, ar) << strategy_name(s) << " N=" << n;
        EXPECT_EQ(st.comm_inter, inter) << strategy_name(s) << " N=" << n;
        EXPECT_EQ(st.comm_intra, ag + rs) << strategy_name(s) << " N=" << n;
        EXPECT_EQ(st.comm_buffer, buffer) << strategy_name(s) << " N=" << n;
      }
    }
  }
}

// --keep-root: the root stays gathered from the loss to the head's backward, as PyTorch's FSDP
// keeps its root. The same bits as the default, the same tracked peaks in every category, and one
// all-gather of the root fewer per step: Psi_root_p (G-1)/G elements sent, Psi_root_p received.
TEST(FsdpEngine, KeepRootGathersTheRootOnceLessAndChangesNoBitOrPeak) {
  const GPTConfig model = tiny_model();
  for (int n : {2, 3, 4}) {
    for (Strategy s : {Strategy::full_shard, Strategy::hybrid_shard}) {
      if (s == Strategy::hybrid_shard && n != 4) continue;
      for (DType dt : {DType::f32, DType::bf16}) {
        for (int prefetch : {0, 1, 2}) {
          const std::string what = std::string(strategy_name(s)) + " N=" + std::to_string(n) + " " +
                                   dtype_name(dt) + " prefetch " + std::to_string(prefetch);
          EngineConfig ec = test_config(s);
          ec.hybrid_group = 2;
          ec.param_dtype = ec.reduce_dtype = dt;
          ec.prefetch = prefetch;
          const RunResult base = run_engine(model, ec, n, 6, 2, 16);
          ec.keep_root = true;
          const RunResult kept = run_engine(model, ec, n, 6, 2, 16);
          EXPECT_TRUE(bit_identical(kept.params, base.params))
              << what << ": differs by up to " << max_abs_diff(kept.params, base.params);
          EXPECT_EQ(kept.losses, base.losses) << what;
          for (int r = 0; r < n; ++r)
            for (int k = 0; k < kNumMemCategories; ++k)
              EXPECT_EQ(kept.peak[r][k], base.peak[r][k])
                  << what << ", rank " << r << ", "
                  << mem_category_name(static_cast<MemCategory>(k));
          const int g = shard_group_size(s, n, 2);
          const int64_t root_p = (unit_layout(model, 0).numel + g - 1) / g * g;
          const int64_t e = dtype_size(dt);
          const StepStats& b = base.stats.back();
          const StepStats& k = kept.stats.back();
          EXPECT_EQ(b.comm_all_gather - k.comm_all_gather, root_p * e * (g - 1) / g) << what;
          EXPECT_EQ(b.comm_buffer - k.comm_buffer, root_p * e) << what;
          EXPECT_EQ(k.comm_reduce_scatter, b.comm_reduce_scatter) << what;
          EXPECT_EQ(k.comm_all_reduce, b.comm_all_reduce) << what;
        }
      }
    }
  }
  // Activation checkpointing, two micro-batches and parameter offload: the same bits and peaks.
  for (int variant = 0; variant < 3; ++variant) {
    EngineConfig ec = test_config(Strategy::full_shard);
    ec.act_ckpt = variant == 0;
    if (variant == 2) ec.offload = Offload::params;
    const int K = variant == 1 ? 2 : 1;
    const RunResult base = run_engine(model, ec, 4, 4, 2, 16, K);
    ec.keep_root = true;
    const RunResult kept = run_engine(model, ec, 4, 4, 2, 16, K);
    EXPECT_TRUE(bit_identical(kept.params, base.params)) << "variant " << variant;
    EXPECT_EQ(kept.losses, base.losses) << "variant " << variant;
    for (int r = 0; r < 4; ++r) EXPECT_EQ(kept.peak[r], base.peak[r]) << "variant " << variant;
    EXPECT_LT(kept.stats.back().comm_all_gather, base.stats.back().comm_all_gather);
  }
  // The strategies that keep whole parameters gather nothing per unit: no change at all.
  for (Strategy s : {Strategy::no_shard, Strategy::shard_grad_op}) {
    EngineConfig ec = test_config(s);
    const RunResult base = run_engine(model, ec, 2, 2, 2, 16);
    ec.keep_root = true;
    const RunResult kept = run_engine(model, ec, 2, 2, 2, 16);
    EXPECT_EQ(kept.stats.back().comm_all_gather, base.stats.back().comm_all_gather);
    EXPECT_EQ(kept.losses, base.losses) << strategy_name(s);
  }
}

TEST(FsdpEngine, ShardsRoundTripIntoAFreshEngine) {
  // Save every unit's shard after 3 steps, load them into a new engine (other seed), continue:
  // the same parameters as 6 uninterrupted steps, bit for bit (master params and Adam moments).
  const GPTConfig model = tiny_model();
  for (Strategy s : {Strategy::shard_grad_op, Strategy::full_shard}) {
    for (DType pd : {DType::f32, DType::bf16}) {
      EngineConfig ec = test_config(s);
      ec.param_dtype = pd;
      RunResult straight = run_engine(model, ec, 3, 6, 2, 16);
      std::vector<std::vector<float>> resumed;
      LaunchOptions lo;
      lo.ranks = 3;
      launch(lo, [&](RankContext& ctx) {
        auto step = [&](Engine& e, int k) {
          GlobalBatch gb = make_batch(model, 3 * 2, 16, k);
          e.step({gb.tokens.data() + ctx.rank * 32}, {gb.targets.data() + ctx.rank * 32}, 2, 16);
        };
        std::vector<UnitShard> saved;
        {
          Engine a(*ctx.device, *ctx.comm, ctx.recorder, model, ec);
          for (int k = 0; k < 3; ++k) step(a, k);
          for (int u = 0; u < a.num_units(); ++u) saved.push_back(a.get_shard(u));
          EXPECT_EQ(saved[0].states.count("v"), 1u);  // AdamW's second moment
        }
        EngineConfig other = ec;
        other.seed = 7;
        Engine b(*ctx.device, *ctx.comm, ctx.recorder, model, other);
        for (int u = 0; u < b.num_units(); ++u) b.set_shard(u, saved[u]);
        b.set_steps_done(3);
        for (int k = 3; k < 6; ++k) step(b, k);
        std::vector<std::vector<float>> p;
        for (int u = 0; u < b.num_units(); ++u) p.push_back(b.gather_unit_params(u));
        if (ctx.rank == 0) resumed = std::move(p);
      });
      EXPECT_TRUE(bit_identical(resumed, straight.params))
          << strategy_name(s) << " " << dtype_name(pd);
    }
  }
}
