// The simulator's memory is the engine's own: the same training steps on N real local ranks and
// on the simulator (backend sim, one rank at a time standing for rank r of N) give identical peak
// bytes per category on every rank, for every strategy, N in {1, 2, 3, 4, 8}, prefetch 0 to 2,
// activation checkpointing, gradient accumulation and bf16 (docs/simulate.md, "Memory").
// comm_buffers included: the local backend's collectives take no memory (they reduce in
// registers), so what comm_buffers holds is the engine's own (a 16-bit gradient's cast copy), at
// the same points of the step on both sides, whatever the threads' timing.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/virtual_clock.hpp"
#include "core/comm/launcher.hpp"
#include "core/device/cluster_spec.hpp"
#include "core/train/engine_stepper.hpp"
#include "tests/fsdp_test_util.hpp"

using namespace shardlab;
using namespace shardlab::fsdp_test;

namespace {

struct Case {
  Strategy strategy;
  int ranks;
  int prefetch;
  bool act_ckpt;
  int accum;
  bool bf16;
  std::string wrap = "block";
  Offload offload = Offload::none;
  bool keep_root = false;
  std::string name() const {
    std::ostringstream os;
    os << strategy_name(strategy) << " N=" << ranks << " prefetch " << prefetch
       << (act_ckpt ? " act-ckpt" : "") << " accum " << accum << (bf16 ? " bf16" : " f32")
       << " wrap " << wrap << " offload " << offload_name(offload)
       << (keep_root ? " keep-root" : "");
    return os.str();
  }
};

// What a rank saw: its device tracker's peaks, and under --offload its host tracker's and the
// bytes copied each way in the last step.
struct Seen {
  MemArray device{}, host{};
  int64_t h2d = 0, d2h = 0;
};

constexpr int kRowsPerMicro = 2, kT = 16, kSteps = 2;

EngineConfig config_of(const Case& c) {
  EngineConfig ec = test_config(c.strategy);
  if (c.strategy == Strategy::hybrid_shard) ec.hybrid_group = c.ranks % 2 == 0 ? 2 : c.ranks;
  ec.prefetch = c.prefetch;
  ec.act_ckpt = c.act_ckpt;
  ec.wrap = c.wrap;
  if (c.bf16) ec.param_dtype = ec.reduce_dtype = DType::bf16;
  ec.offload = c.offload;
  ec.keep_root = c.keep_root;
  return ec;
}

// Each rank's tracker peaks after kSteps steps of the trainer's EngineStepper.
void step_rank(const Case& c, RankContext& ctx, std::vector<Seen>& peaks) {
  const GPTConfig model = tiny_model();
  EngineStepper stepper(ctx, model, config_of(c), c.accum);
  const int rows = kRowsPerMicro * c.accum;  // this rank's rows per step
  for (int s = 0; s < kSteps; ++s) {
    const GlobalBatch b = make_batch(model, rows, kT, s);
    stepper.step(b.tokens.data(), b.targets.data(), rows, kT, 1e-2f);
  }
  Seen& seen = peaks[static_cast<size_t>(ctx.rank)];
  seen.device = ctx.tracker->peak_all();
  if (const MemoryTracker* host = stepper.engine().host_tracker()) seen.host = host->peak_all();
  seen.h2d = stepper.last().copy_h2d;
  seen.d2h = stepper.last().copy_d2h;
}

std::vector<Seen> real_peaks(const Case& c) {
  std::vector<Seen> peaks(static_cast<size_t>(c.ranks));
  LaunchOptions lo;
  lo.ranks = c.ranks;
  launch(lo, [&](RankContext& ctx) { step_rank(c, ctx, peaks); });
  return peaks;
}

std::vector<Seen> simulated_peaks(const Case& c, const std::string& cluster) {
  std::vector<Seen> peaks(static_cast<size_t>(c.ranks));
  LaunchOptions lo;
  lo.backend = "sim";
  lo.device = "meta";
  lo.ranks = c.ranks;
  lo.cluster = std::make_shared<const ClusterSpec>(load_cluster_spec(cluster));
  for (int r = 0; r < c.ranks; ++r) {
    lo.sim_rank = r;
    launch(lo, [&](RankContext& ctx) {
      EXPECT_NE(thread_virtual_clock(), nullptr);
      step_rank(c, ctx, peaks);
    });
  }
  return peaks;
}

// Every category of both tiers and the bytes copied each way, on every rank.
void expect_same_peaks(const Case& c, const std::string& cluster) {
  const std::vector<Seen> real_seen = real_peaks(c);
  const std::vector<Seen> sim_seen = simulated_peaks(c, cluster);
  for (int r = 0; r < c.ranks; ++r) {
    const std::string where = c.name() + " on " + cluster + ", rank " + std::to_string(r) + ", ";
    for (int k = 0; k < kNumMemCategories; ++k) {
      const char* name = mem_category_name(static_cast<MemCategory>(k));
      EXPECT_EQ(sim_seen[r].device[k], real_seen[r].device[k]) << where << name;
      // The host tier (--offload; all zero without).
      EXPECT_EQ(sim_seen[r].host[k], real_seen[r].host[k]) << where << "host " << name;
    }
    EXPECT_EQ(sim_seen[r].h2d, real_seen[r].h2d) << where << "bytes copied host to device";
    EXPECT_EQ(sim_seen[r].d2h, real_seen[r].d2h) << where << "bytes copied device to host";
  }
}

const Strategy kStrategies[] = {Strategy::no_shard, Strategy::shard_optim, Strategy::shard_grad_op,
                                Strategy::full_shard, Strategy::hybrid_shard};
const int kRanks[] = {1, 2, 3, 4, 8};

}  // namespace

// Every strategy and N, each with two settings that between them cover prefetch 0, 1 and 2,
// act-ckpt on and off, one and two micro-batches, f32 and bf16.
TEST(SimMemory, PeaksPerCategoryAndRankEqualARealRun) {
  int i = 0;
  for (Strategy s : kStrategies)
    for (int n : kRanks) {
      expect_same_peaks({s, n, i % 3, false, 1, false}, "h100-sxm");
      expect_same_peaks({s, n, (i + 1) % 3, true, 2, true}, "h100-sxm");
      ++i;
    }
}

// Hybrid's all-reduce behind the next unit's reduce-scatter, prefetch 2 and two micro-batches of
// bf16: reductions in flight together, whose overlap on the local worker depends on timing. The
// peaks still agree exactly, comm_buffers included (no collective takes staging).
TEST(SimMemory, OverlappingReductionsChangeNoPeak) {
  for (int n : {2, 4, 8})
    for (bool bf16 : {false, true})
      expect_same_peaks({Strategy::hybrid_shard, n, 2, false, 2, bf16}, "h100-sxm");
}

// The units the wrap policy makes change what is gathered together; the simulator follows.
TEST(SimMemory, EveryWrapPolicyToo) {
  for (const char* wrap : {"whole", "layer", "blocks:2", "size:5000"}) {
    expect_same_peaks({Strategy::full_shard, 4, 1, false, 1, false, wrap}, "h100-sxm");
    expect_same_peaks({Strategy::shard_grad_op, 3, 2, true, 2, true, wrap}, "h100-sxm");
  }
}

// --keep-root holds the root from the loss to the head's backward; the simulator follows, with and
// without parameter offload (the kept root is not copied up again) and activation checkpointing.
TEST(SimMemory, KeepRootToo) {
  for (int n : {2, 3, 4}) {
    Case c{Strategy::full_shard, n, n % 3, n == 3, 1, n == 4};
    c.keep_root = true;
    expect_same_peaks(c, "h100-sxm");
    c.offload = Offload::params;
    expect_same_peaks(c, "a100-40gb");
  }
  Case h{Strategy::hybrid_shard, 4, 1, false, 2, false};
  h.keep_root = true;
  expect_same_peaks(h, "h100-sxm");
}

// The cluster changes the time, never the memory: the A100 preset gives the same peaks.
TEST(SimMemory, TheClusterDoesNotChangeTheMemory) {
  expect_same_peaks({Strategy::full_shard, 4, 2, true, 2, false}, "a100-40gb");
  expect_same_peaks({Strategy::hybrid_shard, 8, 1, false, 1, true}, "a100-40gb");
}

// CPU offload through the engine itself: the meta device's host tier is a meta device over the
// host tracker, so the simulated rank's device and host peaks per category and the bytes copied
// each way are the real run's, for --offload optim (every strategy) and params (the sharded ones).
TEST(SimMemory, OffloadOptimAndParamsToo) {
  for (Strategy s : kStrategies)
    for (int n : {1, 2, 4}) {
      Case optim{s, n, 1, false, 1, false};
      optim.offload = Offload::optim;
      expect_same_peaks(optim, "h100-sxm");
      if (keeps_full_params(s) || n == 1) continue;
      Case params{s, n, n % 3, n == 4, 2, n == 4};
      params.offload = Offload::params;
      expect_same_peaks(params, "a100-40gb");
    }
}

// The simulated step charges the offload's copies to the host link and the host's optimizer step
// to the host's memory bandwidth: it takes longer than without offload, by at least the copies.
// (On a model as small as tiny_model, launch costs dominate: the device's 4 us per kernel against
// the host loops' none, and offload can come out faster. So the model here is wide: C = 1024.)
TEST(SimMemory, OffloadCostsTimeOnTheHostLink) {
  GPTConfig model = tiny_model();
  model.n_embd = 1024;
  model.n_head = 8;
  const auto step_ns = [&model](Offload o) {
    Case c{Strategy::full_shard, 4, 1, false, 1, false};
    c.offload = o;
    LaunchOptions lo;
    lo.backend = "sim";
    lo.device = "meta";
    lo.ranks = 4;
    lo.cluster = std::make_shared<const ClusterSpec>(load_cluster_spec("h100-sxm"));
    int64_t ns = 0, copied = 0;
    launch(lo, [&](RankContext& ctx) {
      EngineStepper stepper(ctx, model, config_of(c), 1);
      const GlobalBatch b = make_batch(model, kRowsPerMicro, kT, 0);
      stepper.step(b.tokens.data(), b.targets.data(), kRowsPerMicro, kT, 1e-2f);
      const int64_t t0 = thread_virtual_clock()->now_ns;
      stepper.step(b.tokens.data(), b.targets.data(), kRowsPerMicro, kT, 1e-2f);
      ns = thread_virtual_clock()->now_ns - t0;
      copied = stepper.last().copy_h2d + stepper.last().copy_d2h;
    });
    return std::make_pair(ns, copied);
  };
  const auto [plain, none_copied] = step_ns(Offload::none);
  const auto [params, params_copied] = step_ns(Offload::params);
  EXPECT_EQ(none_copied, 0);
  ASSERT_GT(params_copied, 0);
  const ClusterSpec h100 = load_cluster_spec("h100-sxm");
  // At least the copies' bandwidth term; each copy also pays the link's latency.
  EXPECT_GE(params - plain, static_cast<int64_t>(static_cast<double>(params_copied) /
                                                 h100.host_link.bandwidth * 1e9))
      << "plain " << plain << " ns, offload params " << params << " ns";
}
