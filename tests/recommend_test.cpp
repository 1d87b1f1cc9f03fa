// `shardlab plan --recommend` (apps/shardlab/recommend.hpp): the search space it covers, a search
// whose answer is known from simulations run here one by one, the act-ckpt pruning against the
// exhaustive search, and its errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <sstream>
#include <string>

#include "apps/shardlab/pytorch_settings.hpp"
#include "apps/shardlab/recommend.hpp"
#include "apps/shardlab/simulate_command.hpp"
#include "core/base/error.hpp"

using namespace shardlab;

namespace {

// tiny on 16 ranks (two 8-GPU nodes of h100-sxm), 2 sequences per rank.
RecommendOptions tiny16() {
  RecommendOptions o;
  o.model = "tiny";
  o.cluster = "h100-sxm";
  o.ranks = 16;
  o.global_batch = 32;
  o.seq = 64;
  return o;
}

// The peak of one configuration, simulated on its own (no cap).
int64_t peak_of(const RecommendOptions& o, Strategy s, bool act_ckpt, int accum) {
  TrainConfig cfg;
  cfg.model = o.model;
  cfg.cluster = o.cluster;
  cfg.ranks = o.ranks;
  cfg.batch = o.global_batch;
  cfg.seq = o.seq;
  cfg.steps = 2;
  cfg.warmup = 0;
  cfg.accum = accum;
  cfg.engine.strategy = s;
  cfg.engine.prefetch = 0;
  cfg.engine.act_ckpt = act_ckpt;
  cfg.engine.param_dtype = cfg.engine.reduce_dtype = DType::bf16;
  cfg.gemm_math = default_gemm_math(cfg.engine);
  std::ostringstream out;
  return run_simulation(cfg, out).peak_bytes;
}

}  // namespace

TEST(Recommend, SearchSpaceIsEveryStrategyGroupPrefetchCheckpointSplitAndDtype) {
  const RecommendOptions o = tiny16();
  const std::vector<RecommendCandidate> c = recommend_candidates(o, 8);
  // Hybrid groups: divisors of the node's 8 GPUs and multiples of it, strictly between 1 and 16.
  std::vector<int> groups;
  for (const RecommendCandidate& x : c)
    if (x.strategy == Strategy::hybrid_shard &&
        std::find(groups.begin(), groups.end(), x.hybrid_group) == groups.end())
      groups.push_back(x.hybrid_group);
  EXPECT_EQ(groups, (std::vector<int>{2, 4, 8}));
  // Per dtype pair (4) and K in {1, 2}, act-ckpt off/on: three strategies with full parameters
  // (one prefetch depth each, nothing to prefetch) and full_shard + three hybrids at 0..2.
  EXPECT_EQ(c.size(), 4u * 2 * 2 * (3 * 1 + 4 * 3));
  for (size_t i = 0; i < c.size(); i += 2) {  // each act-ckpt-off directly before its twin
    EXPECT_FALSE(c[i].act_ckpt);
    EXPECT_TRUE(c[i + 1].act_ckpt);
    EXPECT_EQ(c[i].accum, c[i + 1].accum);
    EXPECT_EQ(c[i].prefetch, c[i + 1].prefetch);
  }
  RecommendOptions one = o;
  one.dtypes = {DType::f32};
  EXPECT_EQ(recommend_candidates(one, 8).size(), c.size() / 4);
  for (const RecommendCandidate& x : c) EXPECT_EQ(x.wrap, "block");
  // --wraps: each policy once more over the same space, twins still side by side.
  RecommendOptions two = o;
  two.wraps = {"block", "layer"};
  const std::vector<RecommendCandidate> w = recommend_candidates(two, 8);
  ASSERT_EQ(w.size(), 2 * c.size());
  EXPECT_EQ(std::count_if(w.begin(), w.end(),
                          [](const RecommendCandidate& x) { return x.wrap == "layer"; }),
            static_cast<long>(c.size()));
  for (size_t i = 0; i < w.size(); i += 2) EXPECT_EQ(w[i].wrap, w[i + 1].wrap);
  // A policy wrap_policy.hpp does not know names --wraps.
  two.wraps = {"block", "halves"};
  try {
    recommend_candidates(two, 8);
    ADD_FAILURE() << "--wraps halves accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--wraps: "), std::string::npos) << e.what();
  }
}

// A cap just below the leanest peak of every strategy that keeps full parameters: only
// full_shard and hybrid_shard can be recommended, and the best is the fastest of those that
// run_simulation, called here one configuration at a time, finds under the cap.
TEST(Recommend, UnderACapThatOnlyShardedParametersFitTheBestIsFullShardOrHybrid) {
  RecommendOptions o = tiny16();
  o.dtypes = {DType::bf16};
  o.cluster_overrides.headroom = "none";  // caps of MiB: compare the tracked peaks alone
  int64_t full_params_min = std::numeric_limits<int64_t>::max();
  for (Strategy s : {Strategy::no_shard, Strategy::shard_optim, Strategy::shard_grad_op})
    full_params_min = std::min(full_params_min, peak_of(o, s, true, 2));
  const int64_t sharded = peak_of(o, Strategy::full_shard, true, 2);
  ASSERT_LT(sharded, full_params_min) << "the test's premise: full_shard needs less";
  o.mem_cap = full_params_min - 1;
  o.top = 100;
  std::ostringstream out;
  const RecommendResult r = recommend(o, out, nullptr);
  ASSERT_FALSE(r.best.empty()) << out.str();
  for (const RecommendRow& row : r.best) {
    EXPECT_TRUE(row.c.strategy == Strategy::full_shard || row.c.strategy == Strategy::hybrid_shard)
        << row.command;
    EXPECT_LE(row.peak_bytes, o.mem_cap) << row.command;
  }
  EXPECT_GT(r.dropped, 0);
  EXPECT_EQ(r.simulated + r.skipped + r.refused, r.candidates);
  for (size_t i = 1; i < r.best.size(); ++i)
    EXPECT_GE(r.best[i - 1].tokens_per_s, r.best[i].tokens_per_s);
  // The first row, simulated again from its own settings, gives the same prediction.
  const RecommendRow& best = r.best.front();
  EXPECT_NE(best.command.find("--strategy " + std::string(strategy_name(best.c.strategy))),
            std::string::npos);
  EXPECT_GT(best.compute_s, 0);
  EXPECT_GE(best.exposed_comm_s, 0);
  // A step is mostly its compute and the communication it waits for (the rest: the loop's own
  // spans between them).
  EXPECT_LE(best.compute_s + best.exposed_comm_s, best.step_s * 1.001);
  EXPECT_GE(best.compute_s + best.exposed_comm_s, best.step_s * 0.8);
  EXPECT_NE(out.str().find("nothing fits"), std::string::npos) << out.str();  // no_shard's row
}

// --offloads: optim offload for every strategy, params only where parameters are sharded; under a
// device cap that nothing fits without offload, the best keeps state in host memory, and a host
// cap below every host tier's peak fits nothing.
TEST(Recommend, OffloadIsSearchedWhenAskedAndHostMemoryIsCapped) {
  // small on 2 ranks: its model states, not its activations, set the peak, so offload helps.
  RecommendOptions o = tiny16();
  o.model = "small";
  o.ranks = 2;
  o.global_batch = 4;
  o.dtypes = {DType::bf16};
  o.cluster_overrides.headroom = "none";  // caps of MiB: compare the tracked peaks alone
  const size_t plain = recommend_candidates(o, 8).size();
  size_t sharded = 0;
  for (const RecommendCandidate& x : recommend_candidates(o, 8))
    if (!keeps_full_params(x.strategy)) ++sharded;
  o.offloads = {Offload::none, Offload::optim, Offload::params};
  const std::vector<RecommendCandidate> c = recommend_candidates(o, 8);
  EXPECT_EQ(c.size(), 2 * plain + sharded);
  for (const RecommendCandidate& x : c) {
    if (x.offload == Offload::params) {
      EXPECT_FALSE(keeps_full_params(x.strategy));
    }
  }

  // The leanest device peak without offload (a cap of 1 byte: nothing fits, so no act-ckpt twin
  // is pruned), then a cap just below it.
  RecommendOptions none = o;
  none.offloads = {Offload::none};
  none.mem_cap = 1;
  std::ostringstream a;
  const RecommendResult base = recommend(none, a, nullptr);
  o.mem_cap = base.leanest.peak_bytes - 1;
  o.top = 3;
  std::ostringstream b;
  const RecommendResult r = recommend(o, b, nullptr);
  ASSERT_FALSE(r.best.empty()) << b.str();
  for (const RecommendRow& row : r.best) {
    EXPECT_NE(row.c.offload, Offload::none) << row.command;
    EXPECT_GT(row.host_peak_bytes, 0) << row.command;
    EXPECT_LE(row.peak_bytes, o.mem_cap) << row.command;
    EXPECT_NE(row.command.find(std::string("--offload ") + offload_name(row.c.offload)),
              std::string::npos)
        << row.command;
  }
  EXPECT_NE(b.str().find("offload"), std::string::npos);
  // Pruning offload where the same without it fits changes no answer: under the GPU's memory,
  // where everything fits on the device, the best is the exhaustive search's and no offloaded
  // configuration is simulated.
  RecommendOptions roomy = o;
  roomy.mem_cap = 0;
  std::ostringstream e, f;
  const RecommendResult pruned = recommend(roomy, e, nullptr);
  roomy.exhaustive = true;
  const RecommendResult all = recommend(roomy, f, nullptr);
  ASSERT_FALSE(pruned.best.empty());
  EXPECT_EQ(pruned.best.front().command, all.best.front().command);
  EXPECT_EQ(pruned.best.front().c.offload, Offload::none);
  for (const RecommendRow& row : pruned.fits) EXPECT_EQ(row.c.offload, Offload::none);
  // Every offloaded row of the exhaustive search is no faster than its twin on the device.
  const auto twin_of = [](const RecommendCandidate& a, const RecommendCandidate& b) {
    return a.strategy == b.strategy && a.hybrid_group == b.hybrid_group &&
           a.prefetch == b.prefetch && a.act_ckpt == b.act_ckpt && a.accum == b.accum &&
           a.param_dtype == b.param_dtype && a.reduce_dtype == b.reduce_dtype && a.wrap == b.wrap &&
           b.offload == Offload::none;
  };
  int compared = 0;
  for (const RecommendRow& row : all.fits) {
    if (row.c.offload == Offload::none) continue;
    const auto t = std::find_if(all.fits.begin(), all.fits.end(),
                                [&](const RecommendRow& y) { return twin_of(row.c, y.c); });
    ASSERT_NE(t, all.fits.end()) << row.command;
    EXPECT_LE(row.tokens_per_s, t->tokens_per_s) << row.command;
    ++compared;
  }
  EXPECT_GT(compared, 0);
  // A host tier of one byte: nothing fits.
  o.host_cap = 1;
  std::ostringstream d;
  EXPECT_TRUE(recommend(o, d, nullptr).best.empty()) << d.str();
  // A name parse_offload does not know is refused by the command line (cli.recommend_cli); an
  // empty list here.
  o.offloads.clear();
  EXPECT_THROW(recommend_candidates(o, 8), InvalidArgument);
}

// Skipping act-ckpt where its twin fits changes nothing: the exhaustive search finds the same
// best, and what it adds are act-ckpt twins no faster than their twins.
TEST(Recommend, PruningActCkptMatchesTheExhaustiveSearch) {
  RecommendOptions o = tiny16();
  o.ranks = 8;
  o.global_batch = 16;
  o.dtypes = {DType::bf16};
  std::ostringstream a, b;
  const RecommendResult pruned = recommend(o, a, nullptr);
  o.exhaustive = true;
  const RecommendResult all = recommend(o, b, nullptr);
  EXPECT_GT(pruned.skipped, 0);
  EXPECT_EQ(all.skipped, 0);
  ASSERT_FALSE(pruned.fits.empty());
  EXPECT_EQ(pruned.fits.front().command, all.fits.front().command);
  EXPECT_EQ(pruned.fits.front().tokens_per_s, all.fits.front().tokens_per_s);
  // Every row of the pruned search is in the exhaustive one with the same prediction; every row
  // only the exhaustive search has is an act-ckpt twin no faster than its twin.
  for (const RecommendRow& x : all.fits) {
    const auto in_pruned =
        std::find_if(pruned.fits.begin(), pruned.fits.end(),
                     [&](const RecommendRow& y) { return y.command == x.command; });
    if (in_pruned != pruned.fits.end()) {
      EXPECT_EQ(in_pruned->tokens_per_s, x.tokens_per_s) << x.command;
      continue;
    }
    EXPECT_TRUE(x.c.act_ckpt) << x.command;
    const std::string twin =
        x.command.substr(0, x.command.size() - std::string(" --act-ckpt").size());
    const auto t = std::find_if(all.fits.begin(), all.fits.end(),
                                [&](const RecommendRow& y) { return y.command == twin; });
    ASSERT_NE(t, all.fits.end()) << x.command;
    EXPECT_LE(x.tokens_per_s, t->tokens_per_s) << x.command;
  }
  EXPECT_EQ(pruned.fits.size() + static_cast<size_t>(pruned.skipped), all.fits.size());
}

TEST(Recommend, BadInputIsAClearErrorAndNothingFittingIsExitTwo) {
  std::ostringstream out;
  RecommendOptions o = tiny16();
  o.cluster = "";
  EXPECT_THROW(
      {
        try {
          recommend(o, out, nullptr);
        } catch (const InvalidArgument& e) {
          EXPECT_NE(std::string(e.what()).find("--recommend needs --cluster"), std::string::npos);
          throw;
        }
      },
      InvalidArgument);
  o = tiny16();
  o.global_batch = 20;
  try {
    recommend(o, out, nullptr);
    ADD_FAILURE() << "a global batch of 20 over 16 ranks was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--global-batch 20 is not divisible by --ranks 16"),
              std::string::npos)
        << e.what();
  }
  o = tiny16();
  o.dtypes = {DType::bf16};
  o.mem_cap = 1 << 20;  // 1 MiB: nothing
  std::ostringstream none;
  EXPECT_EQ(recommend_command(o, none, nullptr), 2);
  EXPECT_NE(none.str().find("nothing fits 1.00 MiB per rank: the leanest configuration"),
            std::string::npos)
      << none.str();
}

TEST(Recommend, PyTorchSettingsSayTheSameConfiguration) {
  // full_shard, bf16 parameters and fp32 reduction, 2 micro-batches of 2 on 64 ranks.
  RecommendCandidate c;
  c.strategy = Strategy::full_shard;
  c.prefetch = 1;
  c.accum = 2;
  c.param_dtype = DType::bf16;
  const std::string fs = pytorch_settings(c, 64, 256, 2048);
  for (const char* want :
       {"mesh = init_device_mesh(\"cuda\", (64,))",
        "MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)",
        "fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=True)",
        "local_batch_size = 2", "global_batch_size = 256", "seq_len = 2048",
        "mixed_precision_param = \"bfloat16\"", "mixed_precision_reduce = \"float32\"",
        "data_parallel_replicate_degree = 1", "data_parallel_shard_degree = 64", "mode = \"none\""})
    EXPECT_NE(fs.find(want), std::string::npos) << want << "\n" << fs;
  // HSDP: a replicate x shard mesh of 2 x 32; activation checkpointing; ZeRO-2 never reshards.
  c.strategy = Strategy::hybrid_shard;
  c.hybrid_group = 32;
  c.act_ckpt = true;
  const std::string hs = pytorch_settings(c, 64, 256, 2048);
  EXPECT_NE(hs.find("(2, 32), mesh_dim_names=(\"replicate\", \"shard\")"), std::string::npos) << hs;
  EXPECT_NE(hs.find("data_parallel_replicate_degree = 2"), std::string::npos) << hs;
  EXPECT_NE(hs.find("data_parallel_shard_degree = 32"), std::string::npos) << hs;
  EXPECT_NE(hs.find("mode = \"full\""), std::string::npos) << hs;
  c.strategy = Strategy::shard_grad_op;
  EXPECT_NE(pytorch_settings(c, 64, 256, 2048).find("reshard_after_forward=False"),
            std::string::npos);
  // DDP replicates; ZeRO-1 says it has no fully_shard setting.
  c.strategy = Strategy::no_shard;
  const std::string ddp = pytorch_settings(c, 8, 64, 1024);
  EXPECT_NE(ddp.find("DistributedDataParallel(model)"), std::string::npos) << ddp;
  EXPECT_NE(ddp.find("data_parallel_replicate_degree = 8"), std::string::npos) << ddp;
  c.strategy = Strategy::shard_optim;
  EXPECT_NE(pytorch_settings(c, 8, 64, 1024).find("ZeRO-1: no fully_shard setting"),
            std::string::npos);
}

// A cap between the leanest peak and that peak plus the GPU's headroom fits nothing: "fits" is
// the peak and the headroom together, and the message says what both need.
TEST(Recommend, TheGpusHeadroomCountsAgainstTheCap) {
  RecommendOptions o = tiny16();
  o.dtypes = {DType::bf16};
  o.mem_cap = int64_t(1) << 20;
  std::ostringstream a;
  const RecommendResult none_fits = recommend(o, a, nullptr);
  ASSERT_TRUE(none_fits.best.empty());
  const RecommendRow& lean = none_fits.leanest;
  ASSERT_GT(lean.headroom_bytes, 0);
  // The default headroom: context 1.15 GiB + NCCL 1 GiB (one communicator) + 1.7% of the peak.
  EXPECT_GE(lean.headroom_bytes, Headroom::gib(2.15));
  o.mem_cap = lean.peak_bytes + lean.headroom_bytes - 1;
  std::ostringstream b;
  EXPECT_TRUE(recommend(o, b, nullptr).best.empty()) << b.str();
  o.mem_cap += 1;
  std::ostringstream c;
  const RecommendResult r = recommend(o, c, nullptr);
  ASSERT_FALSE(r.best.empty()) << c.str();
  for (const RecommendRow& row : r.best)
    EXPECT_LE(row.peak_bytes + row.headroom_bytes, o.mem_cap) << row.command;
  EXPECT_NE(c.str().find("fits: peak + headroom <= the cap"), std::string::npos) << c.str();
}
