// The wrap policy (core/fsdp/wrap_policy.hpp): parsing and its errors, the units each policy makes
// and the schedule that uses them, and the engine under every policy: bit-identical parameters
// after 20 steps for each strategy on the local backend (no element's reduction depends on the
// units), with act-ckpt, accumulation and mixed precision too; clipping within rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "core/base/error.hpp"
#include "core/fsdp/wrap_policy.hpp"
#include "tests/fsdp_test_util.hpp"

using namespace shardlab;
using namespace shardlab::fsdp_test;

namespace {

// tiny_model with 3 blocks, so blocks:2 leaves a shorter last unit. C = 32: a block's attention
// half has 4C^2 + 6C = 4288 parameters, its MLP half 8C^2 + 7C = 8416, the block 12704.
GPTConfig three_blocks() {
  GPTConfig m = tiny_model();
  m.n_layer = 3;
  return m;
}

// Policies that between them make every kind of unit: root + blocks, one unit, halves, groups of
// blocks with a short last one, and size:N in its four regimes (halves; MLP halves with the
// attention halves left in the root; whole blocks; nothing wrapped).
const char* const kPolicies[] = {"block",     "whole",     "layer",      "blocks:2",
                                 "size:1000", "size:5000", "size:10000", "size:20000"};

std::vector<std::string> names(const WrapPlan& w) {
  std::vector<std::string> out;
  for (const WrapUnit& u : w.units) out.push_back(u.name);
  return out;
}

std::string error_of(const std::string& text) {
  try {
    parse_wrap_policy(text);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

bool same_bits(const std::map<std::string, std::vector<float>>& a,
               const std::map<std::string, std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, v] : a) {
    auto it = b.find(name);
    if (it == b.end() || it->second.size() != v.size() ||
        std::memcmp(v.data(), it->second.data(), v.size() * sizeof(float)) != 0)
      return false;
  }
  return true;
}

double max_diff(const std::map<std::string, std::vector<float>>& a,
                const std::map<std::string, std::vector<float>>& b) {
  double m = 0;
  for (const auto& [name, v] : a)
    for (size_t i = 0; i < v.size(); ++i)
      m = std::max(m, static_cast<double>(std::abs(v[i] - b.at(name)[i])));
  return m;
}

}  // namespace

TEST(WrapPolicy, ParsesEveryPolicyAndNamesTheOptionInErrors) {
  for (const char* p : {"block", "whole", "layer", "blocks:3", "size:100000"})
    EXPECT_EQ(wrap_policy_name(parse_wrap_policy(p)), p);
  EXPECT_EQ(parse_wrap_policy("blocks:3").n, 3);
  EXPECT_EQ(parse_wrap_policy("size:100000").kind, WrapKind::size);
  const std::pair<const char*, const char*> bad[] = {
      {"blocks:0", "--wrap blocks:0: K (blocks per unit) must be >= 1"},
      {"size:abc", "--wrap size:abc: N (min_num_params) must be a whole number >= 1, not 'abc'"},
      {"size:-5", "must be a whole number >= 1, not '-5'"},
      {"blocks:", "must be a whole number >= 1, not ''"},
      {"blocks", "must be a whole number >= 1"},
      {"size:1e6", "not '1e6'"},
      {"layers", "--wrap layers: unknown wrap policy (block, whole, layer, blocks:K, size:N)"},
      {"", "--wrap '': unknown wrap policy"},
  };
  for (const auto& [text, want] : bad)
    EXPECT_NE(error_of(text).find(want), std::string::npos) << text << ": " << error_of(text);
  // EngineConfig::validate is where train and plan meet it.
  EngineConfig ec;
  ec.wrap = "blocks:0";
  EXPECT_THROW(ec.validate(), InvalidArgument);
  ec.wrap = "blocks:2";
  EXPECT_NO_THROW(ec.validate());
}

TEST(WrapPolicy, EachPolicyMakesTheUnitsItNames) {
  const GPTConfig m = three_blocks();
  auto plan = [&](const char* p) { return make_wrap_plan(m, parse_wrap_policy(p)); };
  using V = std::vector<std::string>;
  EXPECT_EQ(names(plan("block")), (V{"root", "block 0", "block 1", "block 2"}));
  EXPECT_EQ(names(plan("whole")), (V{"whole model"}));
  EXPECT_EQ(names(plan("layer")), (V{"root", "block 0 attn", "block 0 mlp", "block 1 attn",
                                     "block 1 mlp", "block 2 attn", "block 2 mlp"}));
  EXPECT_EQ(names(plan("blocks:2")), (V{"root", "blocks 0-1", "block 2"}));
  EXPECT_EQ(names(plan("blocks:7")), (V{"root", "blocks 0-2"}));
  // size:N, PyTorch's rule: attention 4288, MLP 8416, block 12704 parameters.
  EXPECT_EQ(names(plan("size:4288")), names(plan("layer")));
  EXPECT_EQ(names(plan("size:4289")),
            (V{"root + 3 attn halves", "block 0 mlp", "block 1 mlp", "block 2 mlp"}));
  EXPECT_EQ(names(plan("size:8417")), names(plan("block")));
  EXPECT_EQ(names(plan("size:12704")), names(plan("block")));
  EXPECT_EQ(names(plan("size:12705")), names(plan("whole")));

  // Every policy: each stage (so each parameter element) in exactly one unit, and the places
  // agree with the units' buffers.
  const Model model(m);
  for (const char* p : kPolicies) {
    SCOPED_TRACE(p);
    const WrapPlan w = plan(p);
    int64_t total = 0;
    std::set<int> seen;
    for (size_t u = 0; u < w.units.size(); ++u) {
      int64_t n = 0;
      for (int s : w.units[u].stages) {
        EXPECT_TRUE(seen.insert(s).second);
        EXPECT_EQ(w.place[s].unit, static_cast<int>(u));
        EXPECT_EQ(w.place[s].offset, n);  // one after the other, in the unit's order
        n += model.stage(s).numel();
      }
      EXPECT_EQ(n, w.units[u].numel);
      total += w.units[u].numel;
    }
    EXPECT_EQ(static_cast<int>(seen.size()), model.num_stages());
    EXPECT_EQ(total, m.num_params());
    EXPECT_EQ(w.place[0].unit, 0);  // the embedding: the root, first
    EXPECT_EQ(w.place[0].offset, 0);
    for (int l = 0; l < m.n_layer; ++l) {
      const int attn = 1 + 2 * l, mlp = 2 + 2 * l;
      EXPECT_EQ(model.stage(attn).numel() + model.stage(mlp).numel(),
                unit_layout(m, block_unit(l)).numel);
      // Within one unit, a block's MLP half follows its attention half.
      if (w.place[attn].unit == w.place[mlp].unit) {
        EXPECT_EQ(w.place[mlp].offset, w.place[attn].offset + model.stage(attn).numel());
      }
    }
  }
}

TEST(WrapPolicy, ScheduleGathersEachUnitFromItsFirstUseToItsLast) {
  const Model m(three_blocks());  // stages: embedding, (attn, mlp) x 3, head
  const WrapPlan layer = make_wrap_plan(m, parse_wrap_policy("layer"));
  const PassSchedule f = forward_schedule(m, layer);
  // embed, (attn, mlp) x 3, head; the root stays gathered until the head.
  ASSERT_EQ(f.uses.size(), 8u);
  EXPECT_EQ(f.order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(f.uses[0].release.empty());
  EXPECT_EQ(f.uses[1].release, (std::vector<int>{1}));
  EXPECT_EQ(f.uses[7].release, (std::vector<int>{0}));
  // Backward with act-ckpt: the recompute needs both halves (MLP first, the order backward uses
  // them), the attention half is freed after its own backward.
  const PassSchedule b = backward_schedule(m, layer, true);
  ASSERT_EQ(b.uses.size(), 1u + 3 * 3 + 1);
  EXPECT_TRUE(b.uses[1].recompute);
  EXPECT_EQ(b.uses[1].units, (std::vector<int>{6, 5}));
  EXPECT_TRUE(b.uses[1].release.empty());
  EXPECT_EQ(b.uses[2].release, (std::vector<int>{6}));
  EXPECT_EQ(b.uses[3].release, (std::vector<int>{5}));
  EXPECT_EQ(b.order, (std::vector<int>{0, 6, 5, 4, 3, 2, 1}));
  EXPECT_EQ(b.uses.back().release, (std::vector<int>{0}));
  // size:5000 puts the attention halves in the root: the root is used by every block's attention.
  const WrapPlan sz = make_wrap_plan(m, parse_wrap_policy("size:5000"));
  const PassSchedule fs = forward_schedule(m, sz);
  EXPECT_EQ(fs.uses[1].stages, (std::vector<int>{1}));
  EXPECT_EQ(m.stage(fs.uses[1].stages[0]).role(), "attn");
  EXPECT_EQ(fs.uses[1].units, (std::vector<int>{0}));
  EXPECT_EQ(fs.order, (std::vector<int>{0, 1, 2, 3}));
  // whole: one unit, gathered once per pass.
  const PassSchedule fw = forward_schedule(m, make_wrap_plan(m, parse_wrap_policy("whole")));
  EXPECT_EQ(fw.order, (std::vector<int>{0}));
  for (size_t i = 0; i + 1 < fw.uses.size(); ++i) EXPECT_TRUE(fw.uses[i].release.empty());
  // keep_root: the head's forward releases nothing, and nothing else changes.
  const PassSchedule fk = forward_schedule(m, layer, true);
  ASSERT_EQ(fk.uses.size(), f.uses.size());
  EXPECT_TRUE(fk.uses.back().release.empty());
  for (size_t i = 0; i + 1 < fk.uses.size(); ++i) EXPECT_EQ(fk.uses[i].release, f.uses[i].release);
  EXPECT_EQ(fk.order, f.order);
}

TEST(FsdpWrap, EveryPolicyBitIdenticalAfter20StepsForEachStrategy) {
  const GPTConfig model = three_blocks();
  struct Case {
    Strategy s;
    int ranks, group;
  };
  // 3 ranks: every unit needs padding, of a different amount under each policy.
  const Case cases[] = {{Strategy::no_shard, 3, 0},
                        {Strategy::shard_optim, 3, 0},
                        {Strategy::shard_grad_op, 3, 0},
                        {Strategy::full_shard, 3, 0},
                        {Strategy::hybrid_shard, 4, 2}};
  for (const Case& c : cases) {
    RunResult ref;
    for (const char* wrap : kPolicies) {
      EngineConfig ec = test_config(c.s);
      ec.hybrid_group = c.group;
      ec.wrap = wrap;
      RunResult r = run_engine(model, ec, c.ranks, 20, 2, 16);
      if (std::string(wrap) == "block") {
        ref = r;
        EXPECT_LT(r.losses.back(), r.losses.front() - 0.3f);  // it trained
        continue;
      }
      EXPECT_TRUE(same_bits(r.named, ref.named))
          << strategy_name(c.s) << " --wrap " << wrap << " differs from block by up to "
          << max_diff(r.named, ref.named);
      EXPECT_EQ(r.losses, ref.losses) << strategy_name(c.s) << " --wrap " << wrap;
    }
  }
}

TEST(FsdpWrap, ActCkptAccumulationAndBf16StayBitIdenticalAcrossPolicies) {
  const GPTConfig model = three_blocks();
  for (Strategy s : {Strategy::full_shard, Strategy::shard_grad_op}) {
    RunResult ref;
    for (const char* wrap : kPolicies) {
      EngineConfig ec = test_config(s);
      ec.act_ckpt = true;
      ec.prefetch = 2;
      ec.param_dtype = ec.reduce_dtype = DType::bf16;
      ec.wrap = wrap;
      RunResult r = run_engine(model, ec, 4, 20, 1, 16, /*K=*/2);
      if (std::string(wrap) == "block") {
        ref = r;
        continue;
      }
      EXPECT_TRUE(same_bits(r.named, ref.named))
          << strategy_name(s) << " --wrap " << wrap << ": up to " << max_diff(r.named, ref.named);
      EXPECT_EQ(r.losses, ref.losses) << wrap;
    }
  }
}

TEST(FsdpWrap, ClippingAgreesAcrossPoliciesWithinRounding) {
  // The global norm adds per-unit sums of squares (in double): other units, another summation
  // order, so the clipping factor may differ in its last bit. A limit below the norm clips
  // every step.
  const GPTConfig model = three_blocks();
  EngineConfig ec = test_config(Strategy::full_shard);
  ec.clip = 0.05f;
  RunResult ref = run_engine(model, ec, 4, 20, 2, 16);
  EXPECT_GT(ref.stats[0].grad_norm, ec.clip);
  for (const char* wrap : kPolicies) {
    ec.wrap = wrap;
    RunResult r = run_engine(model, ec, 4, 20, 2, 16);
    const double d = max_diff(r.named, ref.named);
    std::printf("clip %.2f --wrap %s vs block: max |dparam| %.3g\n", ec.clip, wrap, d);
    EXPECT_LT(d, 1e-3 * 20 * ec.optim.lr) << wrap;
  }
}
