// --offload optim (the optimizer state and step in the host tier) and --offload params (the
// parameter and gradient shards too). Parameters bit-identical to no offload for every strategy
// each supports; device bytes saved = the formula; planned device and host peaks = the measured
// ones; a device capacity that full_shard exceeds without offload and trains in with params
// offload; copies counted by direction; the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "core/fsdp/flat_param.hpp"
#include "core/fsdp/memory_plan.hpp"
#include "tests/fsdp_test_util.hpp"

using namespace shardlab;
using namespace shardlab::fsdp_test;

namespace {

int64_t cat(const MemArray& a, MemCategory c) { return a[static_cast<int>(c)]; }

struct Case {
  Offload o;
  Strategy s;
  int ranks, group;
  DType pd;
  int K = 1;  // micro-batches: K > 1 adds reduced shards into the kept one
};

// Every strategy with optim; the sharded-parameter strategies with params (the others refused).
const Case kCases[] = {
    {Offload::optim, Strategy::no_shard, 2, 0, DType::f32},
    {Offload::optim, Strategy::shard_optim, 3, 0, DType::f32},
    {Offload::optim, Strategy::shard_grad_op, 3, 0, DType::f32},
    {Offload::optim, Strategy::full_shard, 3, 0, DType::f32},
    {Offload::optim, Strategy::hybrid_shard, 4, 2, DType::f32},
    {Offload::optim, Strategy::full_shard, 2, 0, DType::bf16},
    {Offload::optim, Strategy::shard_grad_op, 2, 0, DType::bf16},
    {Offload::params, Strategy::full_shard, 3, 0, DType::f32},
    {Offload::params, Strategy::full_shard, 2, 0, DType::f32, 2},
    {Offload::params, Strategy::hybrid_shard, 4, 2, DType::f32},
    {Offload::params, Strategy::full_shard, 2, 0, DType::bf16},
    {Offload::params, Strategy::full_shard, 2, 0, DType::bf16, 2},
};

EngineConfig config(const Case& c, Offload o) {
  EngineConfig ec = test_config(c.s);
  ec.hybrid_group = c.group;
  ec.param_dtype = ec.reduce_dtype = c.pd;
  ec.offload = o;
  return ec;
}

std::string what(const Case& c) {
  return detail::concat("offload ", offload_name(c.o), " ", strategy_name(c.s), " N=", c.ranks, " ",
                        dtype_name(c.pd), " K=", c.K);
}

// Bytes of persistent state per owned parameter that the offload moves: o (optim), p + g + o
// (params), with o = 8 (AdamW m, v) + 4 (the fp32 master when mixed).
int64_t moved_per_param(const Case& c) {
  const int64_t o = 8 + (c.pd == DType::f32 ? 0 : 4);
  return c.o == Offload::optim ? o : 2 * dtype_size(c.pd) + o;
}

// The host tier of each rank after the last step: peak and persistent bytes.
struct HostSeen {
  std::vector<int64_t> peak;
  std::vector<MemArray> persistent;
};

RunResult run_offload(const GPTConfig& model, const EngineConfig& ec, int ranks, int steps,
                      HostSeen* host, int64_t mem_limit = 0, int K = 1) {
  std::mutex mu;
  if (host) {
    host->peak.assign(ranks, -1);
    host->persistent.assign(ranks, MemArray{});
  }
  return run_engine(model, ec, ranks, steps, 4, 16, K, mem_limit, [&](Engine& e, int s) {
    if (!host || s != steps - 1) return;
    std::lock_guard<std::mutex> lk(mu);
    host->peak[e.rank()] = e.host_tracker() ? e.host_tracker()->peak_total() : -1;
    host->persistent[e.rank()] = e.host_persistent_bytes();
  });
}

}  // namespace

TEST(FsdpOffload, ParametersAreBitIdenticalToNoOffload) {
  const GPTConfig model = tiny_model();
  for (const Case& c : kCases) {
    const RunResult a = run_offload(model, config(c, Offload::none), c.ranks, 4, nullptr, 0, c.K);
    const RunResult b = run_offload(model, config(c, c.o), c.ranks, 4, nullptr, 0, c.K);
    ASSERT_EQ(a.named.size(), b.named.size()) << what(c);
    for (const auto& [name, values] : a.named) {
      const std::vector<float>& other = b.named.at(name);
      ASSERT_EQ(values.size(), other.size()) << what(c) << " " << name;
      for (size_t i = 0; i < values.size(); ++i)
        ASSERT_EQ(values[i], other[i]) << what(c) << " " << name << "[" << i << "]";
    }
    EXPECT_EQ(a.losses, b.losses) << what(c);
    // Moved bytes, counted by direction; none without offload.
    EXPECT_EQ(a.stats.back().copy_h2d + a.stats.back().copy_d2h, 0) << what(c);
    const MemoryPlan plan =
        plan_memory(plan_input(config(c, Offload::none), c.ranks, model, 4, 16));
    const int64_t owned = keeps_full_optim(c.s) ? plan.padded_psi : plan.padded_psi / plan.group;
    const int64_t psz = dtype_size(c.pd);
    const StepStats& st = b.stats.back();
    if (c.o == Offload::optim) {
      // Per unit: the fp32 gradient shard and (fp32 only) the parameter shard down; the updated
      // parameters up in param_dtype.
      EXPECT_EQ(st.copy_h2d, owned * psz) << what(c);
      EXPECT_EQ(st.copy_d2h, owned * (c.pd == DType::f32 ? 8 : 4)) << what(c);
    } else {
      // Each all-gather sends the shard that was copied up (bytes sent = (G - 1) x shard); each
      // reduction's shard comes down: K per unit and step.
      const int G = plan.group;
      EXPECT_EQ(st.copy_h2d * (G - 1), st.comm_all_gather) << what(c);
      EXPECT_EQ(st.copy_d2h, c.K * owned * psz) << what(c);
    }
  }
}

TEST(FsdpOffload, DeviceBytesSavedAreTheFormula) {
  // Saved device bytes = host bytes = m Psi_p (no_shard), m Psi_p / N (the sharded strategies),
  // m Psi_p / G (hybrid_shard), with m = o for optim and p + g + o for params: docs/memory.md's
  // table, measured on every rank.
  const GPTConfig model = tiny_model();
  for (const Case& c : kCases) {
    HostSeen host;
    const RunResult a = run_offload(model, config(c, Offload::none), c.ranks, 1, nullptr);
    const RunResult b = run_offload(model, config(c, c.o), c.ranks, 1, &host);
    const MemoryPlan plan =
        plan_memory(plan_input(config(c, Offload::none), c.ranks, model, 4, 16));
    const int64_t per = keeps_full_optim(c.s) ? plan.padded_psi : plan.padded_psi / plan.group;
    for (int r = 0; r < c.ranks; ++r) {
      const MemArray& da = a.persistent[r];
      const MemArray& db = b.persistent[r];
      EXPECT_EQ(cat(db, MemCategory::optimizer_state), 0) << what(c);
      if (c.o == Offload::optim) {
        EXPECT_EQ(cat(da, MemCategory::params), cat(db, MemCategory::params)) << what(c);
        EXPECT_EQ(cat(da, MemCategory::grads), cat(db, MemCategory::grads)) << what(c);
      } else {  // nothing persistent is left on the device
        EXPECT_EQ(cat(db, MemCategory::params) + cat(db, MemCategory::grads), 0) << what(c);
      }
      int64_t saved = 0, on_host = 0;
      for (int k = 0; k < kNumMemCategories; ++k) {
        saved += da[k] - db[k];
        on_host += host.persistent[r][k];
      }
      EXPECT_EQ(saved, moved_per_param(c) * per) << what(c) << " rank " << r;
      EXPECT_EQ(on_host, saved) << what(c) << " rank " << r;
    }
  }
}

TEST(FsdpOffload, PlannedDeviceAndHostPeaksAreTheMeasured) {
  GPTConfig model = tiny_model();
  model.n_layer = 4;
  for (const Case& c : kCases) {
    const EngineConfig ec = config(c, c.o);
    HostSeen host;
    const RunResult r = run_offload(model, ec, c.ranks, 2, &host, 0, c.K);
    const MemoryPlan plan = plan_memory(plan_input(ec, c.ranks, model, 4, 16, c.K));
    for (int rank = 0; rank < c.ranks; ++rank) {
      std::printf(
          "%s rank %d: device planned %.1f KiB, measured %.1f KiB; host planned %.1f KiB, "
          "measured %.1f KiB\n",
          what(c).c_str(), rank, plan.peak_total() / 1024.0, r.peak_total[rank] / 1024.0,
          plan.host_peak_total() / 1024.0, host.peak[rank] / 1024.0);
      // Both tiers exact, as in FsdpMemory.PlannedPeakIsTheMeasuredPeak.
      EXPECT_EQ(r.peak_total[rank], plan.peak_total()) << what(c) << " rank " << rank;
      EXPECT_EQ(host.peak[rank], plan.host_peak_total()) << what(c) << " rank " << rank;
    }
    const MemoryPlan base =
        plan_memory(plan_input(config(c, Offload::none), c.ranks, model, 4, 16, c.K));
    EXPECT_LT(plan.peak_total(), base.peak_total()) << what(c);
    EXPECT_EQ(base.host_peak_total(), 0) << what(c);
  }
}

TEST(FsdpOffload, DeviceCapacityThatFullShardExceedsTrainsWithParamsOffload) {
  // Parameters dominate (8 blocks of C = 64, one sequence per rank), as in the models offload is
  // for. The capacity lies halfway between the two plans.
  GPTConfig model = tiny_model();
  model.n_layer = 8;
  model.n_embd = 64;
  EngineConfig plain = test_config(Strategy::full_shard);
  plain.optim.lr = 2e-3f;
  EngineConfig off = plain;
  off.offload = Offload::params;
  const int64_t plain_peak = plan_memory(plan_input(plain, 4, model, 1, 16)).peak_total();
  const int64_t off_peak = plan_memory(plan_input(off, 4, model, 1, 16)).peak_total();
  ASSERT_LT(off_peak, plain_peak);
  const int64_t capacity = (plain_peak + off_peak) / 2;
  try {
    run_engine(model, plain, 4, 2, 1, 16, 1, capacity);
    FAIL() << "full_shard fit in " << capacity << " bytes";
  } catch (const RankFailure& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
  }
  const RunResult r = run_engine(model, off, 4, 20, 1, 16, 1, capacity);
  EXPECT_LT(r.losses.back(), r.losses.front() - 0.3f);
  for (int64_t p : r.peak_total) EXPECT_LE(p, capacity);
  std::printf(
      "capacity %.1f KiB: full_shard plans %.1f KiB (out of memory), with --offload params "
      "%.1f KiB and peaked at %.1f KiB\n",
      capacity / 1024.0, plain_peak / 1024.0, off_peak / 1024.0, r.peak_total[0] / 1024.0);
}

TEST(FsdpOffload, HostCapacityIsItsOwnLimit) {
  const GPTConfig model = tiny_model();
  for (Offload o : {Offload::optim, Offload::params}) {
    EngineConfig ec = test_config(Strategy::full_shard);
    ec.offload = o;
    const MemoryPlan plan = plan_memory(plan_input(ec, 3, model, 4, 16));
    ec.host_mem_limit = plan.host_peak_total() - 1;  // one byte short: the step does not fit
    try {
      run_offload(model, ec, 3, 1, nullptr);
      FAIL() << "a host tier one byte short of its plan trained";
    } catch (const RankFailure& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("out of memory"), std::string::npos) << m;
      EXPECT_NE(m.find("optimizer_state"), std::string::npos) << m;
    }
    ec.host_mem_limit = plan.host_peak_total();
    HostSeen host;
    run_offload(model, ec, 3, 1, &host);
    for (int64_t p : host.peak) EXPECT_EQ(p, plan.host_peak_total());
  }
}

TEST(FsdpOffload, RefusesWhatItDoesNotDo) {
  EXPECT_EQ(parse_offload("optim"), Offload::optim);
  EXPECT_EQ(parse_offload("params"), Offload::params);
  EXPECT_EQ(parse_offload("none"), Offload::none);
  for (const char* bad : {"param", "gpu", ""}) {
    try {
      parse_offload(bad);
      FAIL() << bad;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("--offload"), std::string::npos) << e.what();
    }
  }
  EngineConfig ec;
  ec.host_mem_limit = 1 << 20;  // without --offload
  EXPECT_THROW(ec.validate(), InvalidArgument);
  ec.offload = Offload::optim;
  EXPECT_NO_THROW(ec.validate());
  ec.host_mem_limit = -1;
  EXPECT_THROW(ec.validate(), InvalidArgument);
  // Parameter offload needs parameter shards: refused where every rank keeps full parameters.
  ec.host_mem_limit = 0;
  ec.offload = Offload::params;
  for (Strategy s : {Strategy::no_shard, Strategy::shard_optim, Strategy::shard_grad_op}) {
    ec.strategy = s;
    try {
      ec.validate();
      FAIL() << strategy_name(s);
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("keeps full parameters"), std::string::npos) << e.what();
    }
  }
  ec.strategy = Strategy::full_shard;
  EXPECT_NO_THROW(ec.validate());
  // ... and a shard group of one rank (the engine knows the world size).
  try {
    run_offload(tiny_model(), ec, 1, 1, nullptr);
    FAIL() << "--offload params on one rank";
  } catch (const RankFailure& e) {
    EXPECT_NE(std::string(e.what()).find("shard group of 2"), std::string::npos) << e.what();
  }
}

TEST(FsdpOffload, ShardsMoveBetweenOffloadAndNoOffload) {
  // get_shard / set_shard (what checkpoints use) read and write the host tier: shards taken from
  // an offloaded engine after 3 steps and put into one without offload give it the same
  // parameters, and the next step's result is the same too.
  const GPTConfig model = tiny_model();
  for (Offload o : {Offload::optim, Offload::params})
    for (DType pd : {DType::f32, DType::bf16}) {
      EngineConfig off = test_config(Strategy::full_shard);
      off.param_dtype = off.reduce_dtype = pd;
      off.offload = o;
      EngineConfig plain = off;
      plain.offload = Offload::none;
      std::vector<std::vector<float>> after_a, after_b, moved_a, moved_b;
      std::mutex mu;
      LaunchOptions lo;
      lo.ranks = 2;
      launch(lo, [&](RankContext& ctx) {
        Engine a(*ctx.device, *ctx.comm, ctx.recorder, model, off);
        Engine b(*ctx.device, *ctx.comm, ctx.recorder, model, plain);
        auto step = [&](Engine& e, int s) {
          GlobalBatch gb = make_batch(model, 2 * 4, 16, s);
          const int64_t row = static_cast<int64_t>(ctx.rank) * 4 * 16;
          e.step({gb.tokens.data() + row}, {gb.targets.data() + row}, 4, 16);
        };
        for (int s = 0; s < 3; ++s) step(a, s);
        for (int u = 0; u < a.num_units(); ++u) b.set_shard(u, a.get_shard(u));
        b.set_steps_done(a.steps_done());
        std::vector<std::vector<float>> ma, mb, pa, pb;
        for (int u = 0; u < a.num_units(); ++u) {
          ma.push_back(a.gather_unit_params(u));
          mb.push_back(b.gather_unit_params(u));
        }
        step(a, 3);
        step(b, 3);
        for (int u = 0; u < a.num_units(); ++u) {
          pa.push_back(a.gather_unit_params(u));
          pb.push_back(b.gather_unit_params(u));
        }
        std::lock_guard<std::mutex> lk(mu);
        if (ctx.rank == 0) {
          moved_a = ma, moved_b = mb, after_a = pa, after_b = pb;
        }
      });
      const std::string w = detail::concat(offload_name(o), " ", dtype_name(pd));
      EXPECT_EQ(moved_a, moved_b) << w;
      EXPECT_EQ(after_a, after_b) << w;
    }
}
