// The engine schedules any list of stages: a model defined only in this folder
// (tests/stack_model.hpp: embeddings, layers of two residual MLP stages, a head untied or tied to
// the token embedding) trains under all five strategies and every wrap policy, with no change to
// core/fsdp. no_shard, shard_optim, shard_grad_op and full_shard give the same bits after 20
// steps under every policy (hybrid_shard the same bits under every policy); with act-ckpt,
// micro-batches and bf16 too; the policies name its units by its own layers and stages; and the
// planner's meta-device step predicts the measured peak of this model as of GPT-2.
#include <gtest/gtest.h>

#include <cstring>

#include "core/fsdp/memory_plan.hpp"
#include "core/fsdp/wrap_policy.hpp"
#include "tests/fsdp_test_util.hpp"
#include "tests/stack_model.hpp"

using namespace shardlab;
using namespace shardlab::fsdp_test;
using namespace shardlab::stack_test;

namespace {

const char* const kPolicies[] = {"block",     "whole",     "layer",     "blocks:2",
                                 "size:1000", "size:2500", "size:4000", "size:6000"};

bool same_bits(const RunResult& a, const RunResult& b) {
  if (a.named.size() != b.named.size()) return false;
  for (const auto& [name, v] : a.named) {
    auto it = b.named.find(name);
    if (it == b.named.end() || it->second.size() != v.size() ||
        std::memcmp(v.data(), it->second.data(), v.size() * sizeof(float)) != 0)
      return false;
  }
  return a.losses == b.losses;
}

double max_diff(const RunResult& a, const RunResult& b) {
  double m = 0;
  for (const auto& [name, v] : a.named)
    for (size_t i = 0; i < v.size(); ++i)
      m = std::max(m, static_cast<double>(std::abs(v[i] - b.named.at(name)[i])));
  return m;
}

std::vector<std::string> names(const WrapPlan& w) {
  std::vector<std::string> out;
  for (const WrapUnit& u : w.units) out.push_back(u.name);
  return out;
}

}  // namespace

TEST(StageModel, PoliciesGroupItsOwnLayersAndStages) {
  // C 24: ffn0 (hidden 48) 2376 parameters, ffn1 (hidden 72) 3552, a layer 5928.
  const Model m = stack_model({});
  ASSERT_EQ(m.stage(1).numel(), 2376);
  ASSERT_EQ(m.stage(2).numel(), 3552);
  auto plan = [&](const char* p) { return names(make_wrap_plan(m, parse_wrap_policy(p))); };
  using V = std::vector<std::string>;
  EXPECT_EQ(plan("block"), (V{"root", "layer 0", "layer 1", "layer 2"}));
  EXPECT_EQ(plan("whole"), (V{"whole model"}));
  EXPECT_EQ(plan("blocks:2"), (V{"root", "layers 0-1", "layer 2"}));
  EXPECT_EQ(plan("layer"), (V{"root", "layer 0 ffn0", "layer 0 ffn1", "layer 1 ffn0",
                              "layer 1 ffn1", "layer 2 ffn0", "layer 2 ffn1"}));
  // PyTorch's size rule over this tree: both stages, then the ffn1 stages alone (the ffn0 ones
  // left in the root), then whole layers, then nothing.
  EXPECT_EQ(plan("size:2376"), plan("layer"));
  EXPECT_EQ(plan("size:2377"),
            (V{"root + 3 ffn0 halves", "layer 0 ffn1", "layer 1 ffn1", "layer 2 ffn1"}));
  EXPECT_EQ(plan("size:5928"), plan("block"));
  EXPECT_EQ(plan("size:5929"), plan("whole"));
  // The tied head reads the embedding's token weight: a tie, no parameter of its own.
  const Model tied = stack_model({48, 16, 3, 24, true});
  ASSERT_EQ(tied.ties(tied.num_stages() - 1).size(), 1u);
  EXPECT_EQ(tied.ties(tied.num_stages() - 1)[0].owner, 0);
  EXPECT_EQ(tied.num_params(), m.num_params() - 48 * 24);
}

TEST(StageModel, TrainsBitIdenticallyUnderEveryStrategyAndPolicy) {
  for (bool tied : {false, true}) {
    const Model model = stack_model({48, 16, 3, 24, tied});
    RunResult ref;  // no_shard, block
    for (Strategy s : {Strategy::no_shard, Strategy::shard_optim, Strategy::shard_grad_op,
                       Strategy::full_shard}) {
      for (const char* wrap : kPolicies) {
        EngineConfig ec = test_config(s);
        ec.wrap = wrap;
        // 3 ranks: every unit needs padding, of a different amount under each policy.
        RunResult r = run_engine(model, ec, 3, 20, 2, 16);
        if (ref.named.empty()) {
          ref = r;
          EXPECT_LT(r.losses.back(), r.losses.front() - 0.5f) << "it trained";
          continue;
        }
        EXPECT_TRUE(same_bits(r, ref))
            << (tied ? "tied " : "") << strategy_name(s) << " --wrap " << wrap
            << " differs from no_shard by up to " << max_diff(r, ref);
      }
    }
    // hybrid_shard: the same bits under every policy, and the same model as full_shard to
    // rounding (its reduction adds group sums, another order).
    RunResult href;
    for (const char* wrap : kPolicies) {
      EngineConfig ec = test_config(Strategy::hybrid_shard);
      ec.hybrid_group = 2;
      ec.wrap = wrap;
      RunResult r = run_engine(model, ec, 4, 20, 2, 16);
      if (href.named.empty()) {
        href = r;
        EngineConfig fs = test_config(Strategy::full_shard);
        EXPECT_LT(max_diff(r, run_engine(model, fs, 4, 20, 2, 16)), 1e-5);
        continue;
      }
      EXPECT_TRUE(same_bits(r, href))
          << "hybrid_shard --wrap " << wrap << ": up to " << max_diff(r, href);
    }
  }
}

TEST(StageModel, ActCkptAccumulationAndBf16StayBitIdenticalAcrossPolicies) {
  const Model model = stack_model({48, 16, 3, 24, true});
  RunResult plain;
  {
    EngineConfig ec = test_config(Strategy::full_shard);
    ec.param_dtype = ec.reduce_dtype = DType::bf16;
    plain = run_engine(model, ec, 4, 10, 1, 16, /*K=*/2);
  }
  for (const char* wrap : kPolicies) {
    EngineConfig ec = test_config(Strategy::full_shard);
    ec.act_ckpt = true;  // recompute = the same kernels on the same input: the same bits
    ec.prefetch = 2;
    ec.param_dtype = ec.reduce_dtype = DType::bf16;
    ec.wrap = wrap;
    RunResult r = run_engine(model, ec, 4, 10, 1, 16, /*K=*/2);
    EXPECT_TRUE(same_bits(r, plain)) << wrap << ": up to " << max_diff(r, plain);
  }
}

TEST(StageModel, PlannedPeakIsTheMeasuredPeak) {
  // The planner runs the engine on the meta device: no data, the same allocations.
  const Model model = stack_model({48, 16, 4, 24, false});
  for (const char* wrap : {"block", "layer", "size:2500"}) {
    for (bool ckpt : {false, true}) {
      EngineConfig ec = test_config(Strategy::full_shard);
      ec.wrap = wrap;
      ec.act_ckpt = ckpt;
      const RunResult r = run_engine(model, ec, 4, 2, 2, 16);
      const MemoryPlan plan = plan_memory(plan_input(ec, 4, model, 2, 16));
      EXPECT_EQ(plan.peak_total(), r.peak_total[0]) << wrap << (ckpt ? " act-ckpt" : "");
      EXPECT_EQ(plan.persistent, r.persistent[0]) << wrap;
    }
  }
}
