// GPT-2 trained with --attention flash (core/kernels/flash_attention.hpp in each block's attention
// half): the same run under every strategy, against the naive kernel, and its memory against
// the planner's and against the O(T) formula of what a block keeps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

#include "core/base/error.hpp"
#include "core/fsdp/memory_plan.hpp"
#include "core/model/gpt2.hpp"
#include "core/model/layers.hpp"
#include "core/train/trainer.hpp"

using namespace shardlab;

namespace {

TrainConfig flash_config(Strategy s, int ranks) {
  TrainConfig c;
  c.model = "tiny";
  c.attention = AttentionKernel::flash;
  c.steps = 6;
  c.batch = 8;
  c.seq = 32;
  c.warmup = 0;
  c.ranks = ranks;
  c.synthetic.vocab = 32;
  c.synthetic.tokens = 20000;
  c.engine.optim.lr = 1e-2f;
  c.engine.strategy = s;
  c.run_dir.clear();
  return c;
}

TrainResult train(const TrainConfig& c) {
  std::ostringstream out;
  return run_training(c, out);
}

}  // namespace

TEST(TrainFlash, EveryStrategyIsBitIdenticalAndFollowsOneRank) {
  // The local backend reduces in a fixed order, so on the same 4 ranks the four flat strategies
  // are the same run bit for bit, as with the naive kernel; hybrid_shard (a group's gradients
  // summed first, then across groups) and one rank (the whole batch at once) sum in other
  // orders and differ only in fp32 rounding.
  const TrainResult one = train(flash_config(Strategy::no_shard, 1));
  const TrainResult ddp = train(flash_config(Strategy::no_shard, 4));
  ASSERT_EQ(one.losses.size(), 6u);
  ASSERT_EQ(ddp.losses.size(), 6u);
  EXPECT_LT(one.losses.back(), one.losses.front() - 0.5f);
  for (size_t i = 0; i < one.losses.size(); ++i)
    EXPECT_NEAR(ddp.losses[i], one.losses[i], 1e-5) << "step " << i;
  for (Strategy s : {Strategy::shard_optim, Strategy::shard_grad_op, Strategy::full_shard})
    EXPECT_EQ(train(flash_config(s, 4)).losses, ddp.losses) << strategy_name(s);
  TrainConfig h = flash_config(Strategy::hybrid_shard, 4);
  h.engine.hybrid_group = 2;
  const TrainResult hybrid = train(h);
  ASSERT_EQ(hybrid.losses.size(), ddp.losses.size());
  for (size_t i = 0; i < ddp.losses.size(); ++i)
    EXPECT_NEAR(hybrid.losses[i], ddp.losses[i], 1e-5) << "hybrid_shard step " << i;
}

TEST(TrainFlash, LossesFollowTheNaiveKernel) {
  // Same model, data and order: the two kernels differ only in fp32 rounding (online softmax
  // against the full row), which six AdamW steps carry to a few 1e-6 in the loss.
  TrainConfig c = flash_config(Strategy::full_shard, 2);
  const TrainResult flash = train(c);
  c.attention = AttentionKernel::naive;
  const TrainResult naive = train(c);
  ASSERT_EQ(flash.losses.size(), naive.losses.size());
  double worst = 0;
  for (size_t i = 0; i < flash.losses.size(); ++i)
    worst = std::fmax(worst, std::fabs(static_cast<double>(flash.losses[i]) - naive.losses[i]));
  std::printf("max |loss flash - loss naive| over %zu steps: %.3g\n", flash.losses.size(), worst);
  EXPECT_LT(worst, 1e-4);
  EXPECT_NE(flash.losses, naive.losses);  // a different kernel, not the same one twice
}

TEST(TrainFlash, ABlockKeepsOneLogSumExpPerRowInsteadOfTheProbabilities) {
  const GPTConfig m = GPTConfig::preset("small");
  const int B = 2;
  for (int T : {64, 256}) {
    const int64_t naive = block_attn_saved_bytes(m, {AttentionKernel::naive}, B, T);
    const int64_t flash = block_attn_saved_bytes(m, {AttentionKernel::flash}, B, T);
    // Their difference is exactly the probabilities traded for the log-sum-exp: B NH (T^2 - T).
    EXPECT_EQ(naive - flash,
              static_cast<int64_t>(sizeof(float)) * B * m.n_head * (int64_t{T} * T - T))
        << "T " << T;
  }
  // Linear in T: doubling T doubles what a flash block keeps.
  EXPECT_EQ(2 * block_attn_saved_bytes(m, {AttentionKernel::flash}, B, 128),
            block_attn_saved_bytes(m, {AttentionKernel::flash}, B, 256));
}

TEST(TrainFlash, PlanMatchesTheTrainersPeakAndIsBelowNaive) {
  TrainConfig c = flash_config(Strategy::full_shard, 4);
  c.steps = 2;
  const TrainResult r = train(c);
  PlanInput in = plan_input(c.engine, 4, gpt2_model(c.model_config(), c.kernels()), 2, 32, 1);
  in.token_buffers = true;
  const MemoryPlan flash = plan_memory(in);
  EXPECT_EQ(r.peak_bytes, flash.peak_total());
  PlanInput naive_in = plan_input(c.engine, 4, gpt2_model(c.model_config(), {}), 2, 32, 1);
  naive_in.token_buffers = true;
  EXPECT_LT(flash.peak_total(), plan_memory(naive_in).peak_total());
}

TEST(TrainFlash, AttentionKernelNamesRoundTripAndABadOneIsNamed) {
  for (AttentionKernel k : {AttentionKernel::naive, AttentionKernel::flash})
    EXPECT_EQ(parse_attention_kernel(attention_kernel_name(k)), k);
  try {
    parse_attention_kernel("flash2");
    FAIL() << "flash2 was accepted";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--attention 'flash2'"), std::string::npos) << what;
    EXPECT_NE(what.find("naive"), std::string::npos) << what;
  }
}
