// The FSDP engine under mpirun (one process per rank): every strategy trains to the same
// parameters as no_shard within rounding (MPI chooses its own reduction order), persistent bytes
// follow the formulas, and bytes per step equal the theory, exactly as on the local backend.
#include <gtest/gtest.h>
#include <mpi.h>

#include "core/fsdp/memory_plan.hpp"
#include "tests/fsdp_test_util.hpp"

using namespace shardlab;
using namespace shardlab::fsdp_test;

namespace {

struct MpiRun {
  std::vector<std::vector<float>> params;
  StepStats last;
  MemArray persistent{};
  float first_loss = 0, last_loss = 0;
};

MpiRun run_mpi(const EngineConfig& ec, int steps) {
  const GPTConfig model = tiny_model();
  MpiRun out;
  LaunchOptions lo;
  lo.backend = "mpi";
  launch(lo, [&](RankContext& ctx) {
    Engine eng(*ctx.device, *ctx.comm, ctx.recorder, model, ec);
    out.persistent = eng.persistent_bytes();
    for (int s = 0; s < steps; ++s) {
      GlobalBatch gb = make_batch(model, ctx.world * 2, 16, s);
      out.last =
          eng.step({gb.tokens.data() + ctx.rank * 32}, {gb.targets.data() + ctx.rank * 32}, 2, 16);
      const float mean = eng.world_mean(out.last.loss);
      if (s == 0) out.first_loss = mean;
      out.last_loss = mean;
    }
    for (int u = 0; u < eng.num_units(); ++u) out.params.push_back(eng.gather_unit_params(u));
  });
  return out;
}

}  // namespace

TEST(FsdpMpi, StrategiesAgreeWithNoShardAndCountBytesAsTheory) {
  MpiRun ref = run_mpi(test_config(Strategy::no_shard), 10);
  EXPECT_LT(ref.last_loss, ref.first_loss - 0.2f);
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const GPTConfig model = tiny_model();
  for (Strategy s : {Strategy::shard_optim, Strategy::shard_grad_op, Strategy::full_shard,
                     Strategy::hybrid_shard}) {
    EngineConfig ec = test_config(s);
    ec.hybrid_group = world >= 4 ? 2 : world;
    MpiRun r = run_mpi(ec, 10);
    EXPECT_LT(max_abs_diff(r.params, ref.params), 0.01 * 10 * ec.optim.lr) << strategy_name(s);
    MemoryPlan plan = plan_memory(plan_input(ec, world, model, 1, 0));
    EXPECT_EQ(r.persistent, plan.persistent) << strategy_name(s);
    // Gradient and parameter traffic of a full_shard step: 3 Psi_p (N-1)/N elements.
    if (s == Strategy::full_shard) {
      EXPECT_EQ(r.last.comm_intra, 3 * plan.padded_psi * 4 * (world - 1) / world);
    }
  }
}

// --keep-root over MPI: the same parameters as the default to the bit (the same collectives on the
// same data, one all-gather of the root fewer), and the root's padded size fewer bytes gathered.
TEST(FsdpMpi, KeepRootChangesOnlyTheRootsSecondGather) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  EngineConfig ec = test_config(Strategy::full_shard);
  const MpiRun base = run_mpi(ec, 4);
  ec.keep_root = true;
  const MpiRun kept = run_mpi(ec, 4);
  EXPECT_TRUE(bit_identical(kept.params, base.params))
      << "differs by up to " << max_abs_diff(kept.params, base.params);
  const int64_t root_p = (unit_layout(tiny_model(), 0).numel + world - 1) / world * world;
  EXPECT_EQ(base.last.comm_all_gather - kept.last.comm_all_gather,
            root_p * 4 * (world - 1) / world);
}
