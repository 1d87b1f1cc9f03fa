// The simulator's memory is the engine's own: the same training steps on N real local ranks and
// on the simulator (backend sim, one rank at a time standing for rank r of N) give identical peak
// bytes per category on every rank, for every strategy, N in {1, 2, 3, 4, 8}, prefetch 0 to 2,
// activation checkpointing, gradient accumulation and bf16 (docs/simulate.md, "Memory").
//
// One exception, which is the local backend's and not the simulator's: comm_buffers. The local
// backend's worker thread takes a reduction's staging while it runs; when two reductions can be
// in flight together (hybrid's all-reduce behind the next unit's reduce-scatter, or a 16-bit
// gradient's staging copy beside the previous unit's reduction) whether their staging overlaps
// depends on thread timing, and the real peak changes from run to run. The simulator holds a
// staging from issue until the collective is waited on or the next one on its communicator is
// issued, so its comm_buffers peak is the real one when they cannot overlap, and otherwise at
// most one staging above it: real <= simulated <= real + one staging.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/virtual_clock.hpp"
#include "core/comm/launcher.hpp"
#include "core/comm/reduce.hpp"
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
  std::string name() const {
    std::ostringstream os;
    os << strategy_name(strategy) << " N=" << ranks << " prefetch " << prefetch
       << (act_ckpt ? " act-ckpt" : "") << " accum " << accum << (bf16 ? " bf16" : " f32")
       << " wrap " << wrap;
    return os.str();
  }
};

constexpr int kRowsPerMicro = 2, kT = 16, kSteps = 2;

EngineConfig config_of(const Case& c) {
  EngineConfig ec = test_config(c.strategy);
  if (c.strategy == Strategy::hybrid_shard) ec.hybrid_group = c.ranks % 2 == 0 ? 2 : c.ranks;
  ec.prefetch = c.prefetch;
  ec.act_ckpt = c.act_ckpt;
  ec.wrap = c.wrap;
  if (c.bf16) ec.param_dtype = ec.reduce_dtype = DType::bf16;
  return ec;
}

// Each rank's tracker peaks after kSteps steps of the trainer's EngineStepper.
void step_rank(const Case& c, RankContext& ctx, std::vector<MemArray>& peaks) {
  const GPTConfig model = tiny_model();
  EngineStepper stepper(ctx, model, config_of(c), c.accum);
  const int rows = kRowsPerMicro * c.accum;  // this rank's rows per step
  for (int s = 0; s < kSteps; ++s) {
    const GlobalBatch b = make_batch(model, rows, kT, s);
    stepper.step(b.tokens.data(), b.targets.data(), rows, kT, 1e-2f);
  }
  peaks[static_cast<size_t>(ctx.rank)] = ctx.tracker->peak_all();
}

std::vector<MemArray> real_peaks(const Case& c) {
  std::vector<MemArray> peaks(static_cast<size_t>(c.ranks));
  LaunchOptions lo;
  lo.ranks = c.ranks;
  launch(lo, [&](RankContext& ctx) { step_rank(c, ctx, peaks); });
  return peaks;
}

std::vector<MemArray> simulated_peaks(const Case& c, const std::string& cluster) {
  std::vector<MemArray> peaks(static_cast<size_t>(c.ranks));
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

// The largest reduction staging of the case: its largest unit's, capped by the reduction block.
int64_t one_staging(const Case& c) {
  const GPTConfig model = tiny_model();
  int64_t largest = 0;
  for (int u = 0; u < num_units(model); ++u)
    largest = std::max(largest, unit_layout(model, u).numel);
  return reduce_staging_bytes(largest, c.bf16 ? DType::bf16 : DType::f32);
}

// Returns whether comm_buffers matched exactly on every rank.
bool expect_same_peaks(const Case& c, const std::string& cluster) {
  const std::vector<MemArray> real = real_peaks(c);
  const std::vector<MemArray> sim = simulated_peaks(c, cluster);
  const int comm = static_cast<int>(MemCategory::comm_buffers);
  bool comm_exact = true;
  for (int r = 0; r < c.ranks; ++r) {
    const std::string where = c.name() + " on " + cluster + ", rank " + std::to_string(r) + ", ";
    for (int k = 0; k < kNumMemCategories; ++k) {
      if (k == comm) continue;
      EXPECT_EQ(sim[r][k], real[r][k]) << where << mem_category_name(static_cast<MemCategory>(k));
    }
    EXPECT_LE(real[r][comm], sim[r][comm]) << where << "comm_buffers";
    EXPECT_LE(sim[r][comm], real[r][comm] + one_staging(c)) << where << "comm_buffers";
    comm_exact = comm_exact && sim[r][comm] == real[r][comm];
  }
  return comm_exact;
}

const Strategy kStrategies[] = {Strategy::no_shard, Strategy::shard_optim, Strategy::shard_grad_op,
                                Strategy::full_shard, Strategy::hybrid_shard};
const int kRanks[] = {1, 2, 3, 4, 8};

}  // namespace

// Every strategy and N, each with two settings that between them cover prefetch 0, 1 and 2,
// act-ckpt on and off, one and two micro-batches, f32 and bf16.
TEST(SimMemory, PeaksPerCategoryAndRankEqualARealRun) {
  int i = 0, exact = 0, cases = 0;
  for (Strategy s : kStrategies)
    for (int n : kRanks) {
      exact += expect_same_peaks({s, n, i % 3, false, 1, false}, "h100-sxm");
      exact += expect_same_peaks({s, n, (i + 1) % 3, true, 2, true}, "h100-sxm");
      cases += 2;
      ++i;
    }
  // Where no two reductions can be in flight together (one f32 reduction at a time: every
  // strategy but hybrid) comm_buffers is exact too; only the timing-dependent cases may differ.
  EXPECT_GE(exact, cases / 2) << exact << " of " << cases << " cases exact in comm_buffers";
}

// f32 and one micro-batch, no hybrid: at most one reduction's staging at a time, so every
// category, comm_buffers included, is exact.
TEST(SimMemory, CommBuffersAreExactWhenReductionsCannotOverlap) {
  for (Strategy s :
       {Strategy::no_shard, Strategy::shard_optim, Strategy::shard_grad_op, Strategy::full_shard})
    for (int n : kRanks)
      for (int prefetch : {0, 2})
        EXPECT_TRUE(expect_same_peaks({s, n, prefetch, n % 2 == 0, 1, false}, "h100-sxm"))
            << strategy_name(s) << " N=" << n << " prefetch " << prefetch;
}

// The units the wrap policy makes change what is gathered together; the simulator follows.
TEST(SimMemory, EveryWrapPolicyToo) {
  for (const char* wrap : {"whole", "layer", "blocks:2", "size:5000"}) {
    expect_same_peaks({Strategy::full_shard, 4, 1, false, 1, false, wrap}, "h100-sxm");
    expect_same_peaks({Strategy::shard_grad_op, 3, 2, true, 2, true, wrap}, "h100-sxm");
  }
}

// The cluster changes the time, never the memory: the A100 preset gives the same peaks.
TEST(SimMemory, TheClusterDoesNotChangeTheMemory) {
  expect_same_peaks({Strategy::full_shard, 4, 2, true, 2, false}, "a100-40gb");
  expect_same_peaks({Strategy::hybrid_shard, 8, 1, false, 1, true}, "a100-40gb");
}
