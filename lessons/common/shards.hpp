// What lessons 3 and 4 share besides their subjects: lesson 2's shard rule and gather, a unit as
// both keep it, the loop over steps, and the padded sizes their formulas use. Lesson 2 writes the
// shard rule and the gather out in its own file, where they are the subject (its page quotes
// them); lesson 5 has group-wise versions of its own.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "lessons/common/lesson.hpp"

namespace shardlab::lessons {

// Rank r of N owns elements [r*S, (r+1)*S) of a unit's flat buffer padded to N*S elements.
struct Shard {
  int64_t size = 0;    // S = ceil(numel / N)
  int64_t offset = 0;  // r * S
  int64_t real = 0;    // elements of the shard inside the unit; the rest is padding (zeros)
};
inline Shard shard_of(int64_t numel, int rank, int world) {
  const int64_t S = (numel + world - 1) / world;
  const int64_t offset = rank * S;
  return {S, offset, std::clamp<int64_t>(numel - offset, 0, S)};
}

// One unit as a rank of lessons 3 and 4 keeps it.
struct ShardedUnit {
  int64_t numel = 0;  // parameters in the unit
  Shard shard;        // this rank's part of the padded flat buffer
  Buffer params;      // (S) this rank's shard only
  Buffer grads;       // (S) this rank's shard of the mean gradient
  Buffer m, v;        // Adam's moments: (numel) in lesson 3, (S) in lesson 4
  Buffer full;        // (N*S) params_unsharded: the gathered unit while it computes, else empty
  Buffer dfull;       // (N*S) grads_unsharded: the unit's whole gradient until reduce-scattered
};

// Before a unit computes: every rank sends its shard and receives all N, in rank order, which is
// the whole padded flat buffer (lesson 2).
inline const float* gather(RankContext& ctx, ShardedUnit& unit, int u) {
  ctx.recorder->unit(u, UnitState::gathering);
  unit.full = ctx.device->alloc(unit.shard.size * ctx.world * 4, MemCategory::params_unsharded);
  ctx.comm->all_gather(unit.params.data(), unit.full.data(), unit.shard.size, DType::f32, false,
                       {u, "params"});
  ctx.recorder->unit(u, UnitState::unsharded);
  return unit.full.f32();
}

// After it computed: drop the gathered copy; the shard stays.
inline void reshard(RankContext& ctx, ShardedUnit& unit, int u) {
  unit.full.reset();
  ctx.recorder->unit(u, UnitState::resharded);
}

// The rank's steps: the next batch, the lesson's step(batch, step) -> loss, one printed line.
template <typename StepFn>
void run_steps(RankContext& ctx, const LessonOptions& opt, RankResult& res, StepFn step_fn) {
  DataLoader data = make_loader(opt, ctx.rank, ctx.world);
  for (int step = 0; step < opt.steps; ++step) {
    const Batch batch = data.next();
    StepMeter meter({{ctx.comm, ""}});
    const float loss = step_fn(batch, step);
    end_step(ctx, meter, step, loss, batch.rows * batch.seq, res);
  }
}

// The sizes the formulas use: Ψ parameters, Ψ' after padding each unit to a multiple of N.
struct PaddedSizes {
  int64_t psi = 0, psi_pad = 0;
  int64_t largest = 0;        // the largest padded unit
  int64_t largest_block = 0;  // the largest padded block unit
  int64_t root_pad = 0;       // the padded root
};
inline PaddedSizes padded_sizes(const GPTConfig& cfg, int N) {
  PaddedSizes p;
  for (int u = 0; u < num_units(cfg); ++u) {
    const int64_t n = unit_layout(cfg, u).numel, padded = shard_of(n, 0, N).size * N;
    p.psi += n;
    p.psi_pad += padded;
    p.largest = std::max(p.largest, padded);
    if (u != kRootUnit) p.largest_block = std::max(p.largest_block, padded);
  }
  p.root_pad = shard_of(unit_layout(cfg, kRootUnit).numel, 0, N).size * N;
  return p;
}
// "units: root 20,608 params, 2 blocks of 49,984; Ψ = ..., padded to multiples of N = 4: Ψ' = ..."
inline std::string units_note(const GPTConfig& cfg, int N, const PaddedSizes& p) {
  return "units: root " + commas(unit_layout(cfg, kRootUnit).numel) + " params, " +
         std::to_string(cfg.n_layer) + " blocks of " + commas(unit_layout(cfg, 1).numel) +
         "; Ψ = " + commas(p.psi) + ", padded to multiples of N = " + std::to_string(N) +
         ": Ψ' = " + commas(p.psi_pad) + " (padding " + commas(p.psi_pad - p.psi) + ")";
}

}  // namespace shardlab::lessons
