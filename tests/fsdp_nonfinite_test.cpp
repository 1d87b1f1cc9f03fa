// core/fsdp: a diverged step stops the engine at that step, before any update reaches a checkpoint:
// a non-finite loss, a NaN or Inf in a reduced gradient shard (with clipping on or off) and a
// NaN or Inf left in the parameters by the update each throw an error naming the step, and for
// gradients and parameters the unit and the rank.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "core/base/error.hpp"
#include "tests/fsdp_test_util.hpp"

using namespace shardlab;
using namespace shardlab::fsdp_test;

namespace {

// Writes `value` into element `index` of unit 0's tensor `name` on the rank that owns it (every
// rank calls it: set_shard is collective for some strategies).
void poke_root(Engine& eng, const std::string& name, int64_t index, float value) {
  const FlatLayout& layout = eng.layout(kRootUnit);
  const FlatEntry& e = layout.entries()[static_cast<size_t>(layout.find(name))];
  UnitShard s = eng.get_shard(kRootUnit);
  const int64_t at = e.offset + index;
  if (at >= s.range.offset && at < s.range.end()) s.states["params"][at - s.range.offset] = value;
  eng.set_shard(kRootUnit, s);
}

// Runs `steps` steps of the engine on `ranks` ranks after `setup`; returns the error's message
// ("" when none was thrown).
std::string run_until_error(const EngineConfig& ec, int ranks, int steps,
                            const std::function<void(Engine&)>& setup) {
  const GPTConfig model = tiny_model();
  const int B = 2, T = 8;
  LaunchOptions lo;
  lo.ranks = ranks;
  try {
    launch(lo, [&](RankContext& ctx) {
      Engine eng(*ctx.device, *ctx.comm, ctx.recorder, model, ec);
      setup(eng);
      for (int s = 0; s < steps; ++s) {
        GlobalBatch gb = make_batch(model, ranks * B, T, s);
        const int64_t row = static_cast<int64_t>(ctx.rank) * B;
        eng.step({gb.tokens.data() + row * T}, {gb.targets.data() + row * T}, B, T);
      }
    });
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_has(const std::string& msg, const std::string& part) {
  EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

}  // namespace

TEST(FsdpNonFinite, NaNParameterStopsAtTheLossOfThatStep) {
  const std::string msg = run_until_error(test_config(Strategy::full_shard), 2, 3, [](Engine& e) {
    poke_root(e, "wte.weight", 5, kNaN);  // token 5's embedding, and its logit in the tied head
  });
  expect_has(msg, "step 1: loss is NaN");
  expect_has(msg, "diverged");
}

TEST(FsdpNonFinite, InfGradientIsNamedByUnitAndRankWithClippingOnAndOff) {
  // ln_f.bias 1e8 on one channel: logits ~1e7 apart, a finite loss and a one-hot softmax, but the
  // tied embedding's gradient (p - onehot) x 1e8 / tokens overflows f16's 65504 in the reduction.
  for (float clip : {0.0f, 1.0f}) {
    for (Strategy s : {Strategy::full_shard, Strategy::no_shard}) {
      EngineConfig ec = test_config(s);
      ec.reduce_dtype = DType::f16;
      ec.clip = clip;
      const std::string msg =
          run_until_error(ec, 2, 2, [](Engine& e) { poke_root(e, "ln_f.bias", 0, 1e8f); });
      SCOPED_TRACE(std::string(strategy_name(s)) + " clip " + std::to_string(clip));
      expect_has(msg,
                 "step 1: the reduced gradient of unit 0 (embeddings and ln_f) holds NaN or "
                 "Inf on rank ");
      const bool named =
          msg.find("on rank 0") != std::string::npos || msg.find("on rank 1") != std::string::npos;
      EXPECT_TRUE(named) << msg;
    }
  }
}

TEST(FsdpNonFinite, NaNLeftInParametersByTheUpdateIsNamed) {
  // A row of wpe past T: no forward or backward reads it, so loss and gradients stay finite, and
  // only the check after the update sees it (weight decay keeps it NaN).
  const std::string msg = run_until_error(test_config(Strategy::full_shard), 2, 2, [](Engine& e) {
    poke_root(e, "wpe.weight", 15 * tiny_model().n_embd + 3, kNaN);
  });
  expect_has(msg, "step 1: the optimizer update left NaN or Inf in the parameters of unit 0");
  expect_has(msg, " on rank ");
}

TEST(FsdpNonFinite, FiniteRunsAreUntouched) {
  EngineConfig ec = test_config(Strategy::full_shard);
  ec.reduce_dtype = DType::bf16;
  EXPECT_EQ(run_until_error(ec, 2, 3, [](Engine&) {}), "");
  ec.clip = 0.5f;
  EXPECT_EQ(run_until_error(ec, 2, 3, [](Engine&) {}), "");
}
