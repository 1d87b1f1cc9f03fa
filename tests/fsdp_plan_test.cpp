// core/fsdp memory planner: persistent bytes against docs/memory.md's formula table for every
// strategy and N = 1..8, and the ZeRO paper's 7.5B-parameter example (Rajbhandari et al. 2020,
// Figure 1).
#include <gtest/gtest.h>

#include <cmath>

#include "apps/shardlab/plan_command.hpp"
#include "core/device/cluster_spec.hpp"
#include "core/fsdp/flat_param.hpp"
#include "core/fsdp/memory_plan.hpp"

#include <memory>
#include <sstream>

using namespace shardlab;

namespace {
int64_t cat(const MemArray& a, MemCategory c) { return a[static_cast<int>(c)]; }
const Strategy kAll[] = {Strategy::no_shard, Strategy::shard_optim, Strategy::shard_grad_op,
                         Strategy::full_shard, Strategy::hybrid_shard};
}  // namespace

TEST(FsdpPlan, ZeroPaperExample7_5BOn64Ranks) {
  // 7.5B parameters, 64 ranks, mixed precision (2 + 2 + 12 bytes per parameter). The paper's
  // figure: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB (GB = 1e9 bytes).
  PlanInput in;
  in.world = 64;
  in.engine.param_dtype = DType::f16;
  in.engine.reduce_dtype = DType::f16;
  in.unit_numels = {7'500'000'000};
  const double expect_gb[] = {120.0, 31.4, 16.6, 1.9};
  const Strategy s4[] = {Strategy::no_shard, Strategy::shard_optim, Strategy::shard_grad_op,
                         Strategy::full_shard};
  for (int i = 0; i < 4; ++i) {
    in.engine.strategy = s4[i];
    MemoryPlan p = plan_memory(in);
    const double gb = static_cast<double>(p.persistent_total()) / 1e9;
    EXPECT_NEAR(gb, expect_gb[i], 0.05) << strategy_name(s4[i]);
    EXPECT_EQ(p.padding_bytes, 0);  // 7.5e9 is a multiple of 64
  }
  // Exact bytes: 16 Psi, 4 Psi + 12 Psi/64, 2 Psi + 14 Psi/64, 16 Psi/64.
  in.engine.strategy = Strategy::shard_grad_op;
  MemoryPlan p2 = plan_memory(in);
  EXPECT_EQ(cat(p2.persistent, MemCategory::params), 15'000'000'000);
  EXPECT_EQ(cat(p2.persistent, MemCategory::grads), 234'375'000);
  EXPECT_EQ(cat(p2.persistent, MemCategory::optimizer_state), 1'406'250'000);
  std::string table = format_plan_table({p2}, true);
  EXPECT_NE(table.find("16.641"), std::string::npos) << table;
}

TEST(FsdpPlan, PersistentBytesMatchTheFormulaTableForN1To8) {
  // Units with sizes that pad differently for every N: the formula holds with the padded Psi, and
  // the real-Psi formula plus the reported padding gives the same bytes.
  const std::vector<int64_t> units = {20'608, 49'984, 49'984, 12'345};
  for (int n = 1; n <= 8; ++n) {
    for (Strategy s : kAll) {
      for (int g : {1, 2, n}) {
        if (s != Strategy::hybrid_shard && g != n) continue;
        if (n % g) continue;
        PlanInput in;
        in.engine.strategy = s;
        in.world = n;
        in.engine.hybrid_group = g;
        in.unit_numels = units;
        MemoryPlan p = plan_memory(in);
        const int group = s == Strategy::no_shard ? 1 : (s == Strategy::hybrid_shard ? g : n);
        ASSERT_EQ(p.group, group);
        int64_t padded = 0;
        for (int64_t u : units) padded += (u + group - 1) / group * group;
        ASSERT_EQ(p.padded_psi, padded);
        const int64_t shard = padded / group;  // sum of per-unit shards
        int64_t ep = 0, eg = 0, eo = 0;
        switch (s) {
          case Strategy::no_shard:
            ep = 4 * padded;
            eg = 4 * padded;
            eo = 8 * padded;
            break;
          case Strategy::shard_optim:
            ep = 4 * padded;
            eg = 4 * padded;
            eo = 8 * shard;
            break;
          case Strategy::shard_grad_op:
            ep = 4 * padded;
            eg = 4 * shard;
            eo = 8 * shard;
            break;
          default:
            ep = 4 * shard;
            eg = 4 * shard;
            eo = 8 * shard;
            break;
        }
        EXPECT_EQ(cat(p.persistent, MemCategory::params), ep) << strategy_name(s) << " N=" << n;
        EXPECT_EQ(cat(p.persistent, MemCategory::grads), eg) << strategy_name(s) << " N=" << n;
        EXPECT_EQ(cat(p.persistent, MemCategory::optimizer_state), eo);
        const double formula = formula_persistent_bytes(s, static_cast<double>(in.psi()), n, g);
        EXPECT_NEAR(static_cast<double>(p.persistent_total() - p.padding_bytes), formula, 0.5);
        EXPECT_GE(p.padding_bytes, 0);
        // Padding is under G elements per unit, at 16 bytes an element at most.
        EXPECT_LT(p.padding_bytes, 16 * group * static_cast<int64_t>(units.size()));
        if (group == 1) {
          EXPECT_EQ(p.padding_bytes, 0);
        }
      }
    }
  }
}

TEST(FsdpPlan, MixedPrecisionMovesOnlyTheShardedTerms) {
  // bf16: 2 + 2 + 12. no_shard and full_shard keep 16 Psi and 16 Psi/N; ZeRO-1/2 change.
  PlanInput in;
  in.world = 4;
  in.unit_numels = {1 << 20};
  const double psi = 1 << 20;
  for (DType pd : {DType::f32, DType::bf16}) {
    in.engine.param_dtype = in.engine.reduce_dtype = pd;
    in.engine.strategy = Strategy::no_shard;
    EXPECT_EQ(plan_memory(in).persistent_total(), 16 * (1 << 20));
    in.engine.strategy = Strategy::full_shard;
    EXPECT_EQ(plan_memory(in).persistent_total(), 4 * (1 << 20));
  }
  in.engine.param_dtype = in.engine.reduce_dtype = DType::bf16;
  in.engine.strategy = Strategy::shard_optim;
  EXPECT_EQ(plan_memory(in).persistent_total(), static_cast<int64_t>(4 * psi + 12 * psi / 4));
  in.engine.param_dtype = in.engine.reduce_dtype = DType::f32;
  EXPECT_EQ(plan_memory(in).persistent_total(), static_cast<int64_t>(8 * psi + 8 * psi / 4));
  // fp32 params with bf16 reduction: no master copy, 2-byte grads.
  in.engine.reduce_dtype = DType::bf16;
  in.engine.strategy = Strategy::no_shard;
  EXPECT_EQ(plan_memory(in).persistent_total(), 14 * (1 << 20));
}

TEST(FsdpPlan, CapacityDecidesFit) {
  PlanInput in;
  in.world = 8;
  in.unit_numels = std::vector<int64_t>(10, 100'000);  // a root and 9 blocks of 100k
  in.capacity = 8'000'000;  // 16 MB for DDP does not fit; FSDP's 2 MB + 3 gathered units do
  in.engine.strategy = Strategy::no_shard;
  EXPECT_FALSE(plan_memory(in).fits());
  in.engine.strategy = Strategy::full_shard;
  EXPECT_TRUE(plan_memory(in).fits());
  in.unit_numels = {};
  EXPECT_THROW(plan_memory(in), InvalidArgument);
}

TEST(FsdpPlan, OnAClusterFitsCountsTheGpusHeadroom) {
  // The communicators each strategy uses: NCCL's buffers come per communicator.
  EXPECT_EQ(communicators_used(Strategy::full_shard, 1, 0), 0);
  EXPECT_EQ(communicators_used(Strategy::no_shard, 8, 0), 1);
  EXPECT_EQ(communicators_used(Strategy::shard_optim, 8, 0), 1);
  EXPECT_EQ(communicators_used(Strategy::full_shard, 64, 0), 1);
  EXPECT_EQ(communicators_used(Strategy::hybrid_shard, 64, 8), 2);
  EXPECT_EQ(communicators_used(Strategy::hybrid_shard, 64, 64), 1);  // G = N: full_shard's

  EngineConfig e;
  e.strategy = Strategy::hybrid_shard;
  e.hybrid_group = 8;
  PlanInput in = plan_input(e, 16, GPTConfig::preset("small"), 4, 128);
  const MemoryPlan bare = plan_memory(in);  // no cluster: no headroom
  EXPECT_EQ(bare.headroom.total(), 0);
  in.cluster = std::make_shared<const ClusterSpec>(load_cluster_spec("h100-sxm"));
  const MemoryPlan p = plan_memory(in);
  const Headroom& h = in.cluster->headroom;
  EXPECT_EQ(p.headroom.context, h.context_bytes);
  EXPECT_EQ(p.headroom.communicators, 2);
  EXPECT_EQ(p.headroom.nccl, 2 * h.nccl_bytes_per_communicator);
  EXPECT_EQ(p.headroom.fragmentation,
            static_cast<int64_t>(std::ceil(h.fragmentation * static_cast<double>(p.peak_total()))));
  // A capacity of exactly peak + headroom fits; a byte less does not, though the peak alone would.
  in.capacity = p.peak_total() + p.headroom.total();
  EXPECT_TRUE(plan_memory(in).fits());
  in.capacity -= 1;
  EXPECT_FALSE(plan_memory(in).fits());
  EXPECT_GT(in.capacity, p.peak_total());
  EXPECT_NE(p.headroom.describe().find("(2 communicators)"), std::string::npos)
      << p.headroom.describe();
}

TEST(FsdpPlan, WrapPolicyDecidesTheUnitsAndTheGatheredPeak) {
  // small (C = 256, 4 blocks) on 4 ranks, full_shard, fp32. The units are the policy's; the
  // gathered peak is the root plus the current and the prefetched unit (prefetch 1).
  const GPTConfig m = GPTConfig::preset("small");
  EngineConfig e;
  e.strategy = Strategy::full_shard;
  auto plan = [&](const char* wrap) {
    e.wrap = wrap;
    return plan_memory(plan_input(e, 4, m, 2, 64));
  };
  auto gathered = [](const MemoryPlan& p) {
    return cat(p.transient, MemCategory::params_unsharded);
  };
  const MemoryPlan block = plan("block"), whole = plan("whole"), layer = plan("layer");
  const int64_t root = 256 * 256 + 256 * 256 + 2 * 256, attn = 4 * 256 * 256 + 6 * 256,
                mlp = 8 * 256 * 256 + 7 * 256;
  EXPECT_EQ(block.input.unit_numels,
            (std::vector<int64_t>{root, attn + mlp, attn + mlp, attn + mlp, attn + mlp}));
  EXPECT_EQ(whole.input.unit_numels, (std::vector<int64_t>{m.num_params()}));
  EXPECT_EQ(layer.input.unit_numels.size(), 9u);
  EXPECT_EQ(gathered(whole), round_up(m.num_params(), 4) * 4);
  EXPECT_EQ(gathered(block), (round_up(root, 4) + 2 * round_up(attn + mlp, 4)) * 4);
  EXPECT_EQ(gathered(layer), (round_up(root, 4) + round_up(attn, 4) + round_up(mlp, 4)) * 4);
  // Persistent state is the same 16 Psi / N up to each policy's padding.
  EXPECT_EQ(whole.persistent_total() - whole.padding_bytes,
            block.persistent_total() - block.padding_bytes);
  // size:N in its middle regime: the MLP halves are units, the attention halves join the root.
  const MemoryPlan sz = plan("size:300000");
  EXPECT_EQ(sz.input.unit_numels, (std::vector<int64_t>{root + 4 * attn, mlp, mlp, mlp, mlp}));
  e.wrap = "size:abc";
  EXPECT_THROW(plan_memory(plan_input(e, 4, m, 2, 64)), InvalidArgument);
}

TEST(FsdpPlan, PlanCommandPrintsTheZeroExampleAndModelPlans) {
  PlanCommandOptions o;
  o.params = 7'500'000'000;
  o.ranks = 64;
  o.engine.param_dtype = o.engine.reduce_dtype = DType::f16;
  o.decimal = true;
  o.strategies = {Strategy::no_shard, Strategy::shard_optim, Strategy::shard_grad_op,
                  Strategy::full_shard};
  std::ostringstream os;
  EXPECT_EQ(plan_command(o, os), 0);
  const std::string t = os.str();
  for (const char* gb : {"120.000", "31.406", "16.641", "1.875"})
    EXPECT_NE(t.find(gb), std::string::npos) << gb << " missing from\n" << t;

  PlanCommandOptions m;
  m.model = "tiny";
  m.ranks = 4;
  m.capacity = 1;  // nothing fits in one byte
  std::ostringstream os2;
  EXPECT_EQ(plan_command(m, os2), 2);
  EXPECT_NE(os2.str().find("transient at the peak"), std::string::npos) << os2.str();
  EXPECT_NE(os2.str().find("NO"), std::string::npos) << os2.str();
  m.model = "nope";
  EXPECT_THROW(plan_command(m, os2), InvalidArgument);
}

TEST(FsdpPlan, ParamsAlonePlansModelStatesOnlyAndNeverSaysFits) {
  PlanCommandOptions o;
  o.params = 1'000'000;
  o.ranks = 4;
  o.capacity = 1;  // a cap nothing could fit: not compared, no exit 2
  std::ostringstream os;
  EXPECT_EQ(plan_command(o, os), 0);
  const std::string t = os.str();
  EXPECT_NE(t.find("model states only"), std::string::npos) << t;
  EXPECT_EQ(t.find("fits"), t.find("no \"fits\"") + 4) << t;  // only in "no "fits""
  EXPECT_EQ(t.find("yes"), std::string::npos) << t;
  EXPECT_EQ(t.find(" NO"), std::string::npos) << t;
  EXPECT_NE(t.find("not compared"), std::string::npos) << t;
  // A shape beside --params is refused, naming the flag.
  o.shape_flags_given = {"--n-layer"};
  try {
    plan_command(o, os);
    FAIL() << "--params with --n-layer accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--n-layer"), std::string::npos) << e.what();
  }
}

TEST(FsdpPlan, ShapeOverridesAndTheirBadInputNameTheFlag) {
  PlanCommandOptions o;
  o.model = "small";
  o.n_layer = 2;
  o.n_embd = 128;
  o.n_head = 4;
  o.vocab_size = 512;
  o.max_seq_len = 64;
  const GPTConfig m = plan_model(o);
  EXPECT_EQ(m.n_layer, 2);
  EXPECT_EQ(m.n_embd, 128);
  EXPECT_EQ(m.vocab_size, 512);
  EXPECT_EQ(m.max_seq_len, 64);
  const auto refused = [&](PlanCommandOptions bad, const char* flag) {
    try {
      plan_model(bad);
      ADD_FAILURE() << flag << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  };
  PlanCommandOptions heads = o;
  heads.n_head = 5;  // does not divide 128
  refused(heads, "--n-head");
  PlanCommandOptions neg = o;
  neg.n_layer = -1;
  refused(neg, "--n-layer");
  PlanCommandOptions seq = o;
  seq.seq = 65;
  refused(seq, "--seq");
  PlanCommandOptions preset = o;
  preset.model = "huge";
  refused(preset, "huge");
}

TEST(FsdpPlan, ClusterAddsStepTimeTokensPerSecondAndExposedComm) {
  const GPTConfig m = GPTConfig::preset("small");
  EngineConfig e;
  e.strategy = Strategy::full_shard;
  PlanInput in = plan_input(e, 8, m, 4, 128);
  const MemoryPlan memory_only = plan_memory(in);
  EXPECT_LT(memory_only.step_s, 0);
  in.cluster = std::make_shared<const ClusterSpec>(load_cluster_spec("h100-sxm"));
  const MemoryPlan timed = plan_memory(in);
  EXPECT_GT(timed.step_s, 0);
  EXPECT_GE(timed.exposed_comm_s, 0);
  EXPECT_LE(timed.exposed_comm_s, timed.step_s);
  EXPECT_EQ(timed.tokens, 8 * 4 * 128);
  EXPECT_DOUBLE_EQ(timed.tokens_per_s(), timed.tokens / timed.step_s);
  // Time never changes memory.
  EXPECT_EQ(timed.peak_by_category(), memory_only.peak_by_category());
  // A slower cluster (A100: a third of the bf16 peak, half the links) predicts a longer step.
  in.cluster = std::make_shared<const ClusterSpec>(load_cluster_spec("a100-40gb"));
  EXPECT_GT(plan_memory(in).step_s, timed.step_s);
  // N must fit the cluster: 12 ranks are a node and a half of 8.
  in.world = 12;
  EXPECT_THROW(plan_memory(in), InvalidArgument);

  PlanCommandOptions o;
  o.model = "small";
  o.ranks = 8;
  o.batch = 2;
  o.seq = 64;
  o.cluster = "h100-sxm";
  std::ostringstream os;
  EXPECT_EQ(plan_command(o, os), 0);
  for (const char* col : {"tokens/s", "exposed", "timed on cluster h100-sxm"})
    EXPECT_NE(os.str().find(col), std::string::npos) << col << " missing from\n" << os.str();
}
