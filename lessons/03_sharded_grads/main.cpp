// Lesson 3: sharded gradients. A rank updates only its shard of the weights, so it needs only its
// shard of the mean gradient. A reduce-scatter gives exactly that: each rank sends its whole unit
// gradient and receives the sum over ranks of its own shard, for half the bytes of lesson 2's
// all-reduce. The unit's full gradient now lives only from its backward to its reduce-scatter.
// The Adam state is still full size, and still only this rank's slice of it is used.
#include <algorithm>

#include "lessons/common/lesson.hpp"

using namespace shardlab;
using namespace shardlab::lessons;

namespace {

const LessonInfo kInfo = {3, "sharded gradients", "lesson03_sharded_grads",
                          "A reduce-scatter leaves each rank only its shard of the mean gradient."};

// Rank r of N owns elements [r*S, (r+1)*S) of a unit's flat buffer padded to N*S elements.
struct Shard {
  int64_t size = 0;    // S = ceil(numel / N)
  int64_t offset = 0;  // r * S
  int64_t real = 0;    // elements of the shard inside the unit; the rest is padding (zeros)
};
Shard shard_of(int64_t numel, int rank, int world) {
  const int64_t S = (numel + world - 1) / world;
  const int64_t offset = rank * S;
  return {S, offset, std::clamp<int64_t>(numel - offset, 0, S)};
}

// One unit as this rank keeps it.
struct Unit {
  int64_t numel = 0;  // parameters in the unit
  Shard shard;        // this rank's part of the padded flat buffer
  Buffer params;      // (S) this rank's shard only
  Buffer grads;       // (S) this rank's shard of the mean gradient
  Buffer m, v;        // (numel) full Adam moments; only this rank's slice is used
  Buffer full;        // (N*S) params_unsharded: the gathered unit while it computes, else empty
  Buffer dfull;       // (N*S) grads_unsharded: the unit's whole gradient until reduce-scattered
};

std::vector<Unit> build_shards(RankContext& ctx, const GPTConfig& cfg, uint64_t seed) {
  Device& dev = *ctx.device;
  std::vector<Unit> units(static_cast<size_t>(num_units(cfg)));
  for (int u = 0; u < num_units(cfg); ++u) {
    Unit& unit = units[static_cast<size_t>(u)];
    unit.numel = unit_layout(cfg, u).numel;
    unit.shard = shard_of(unit.numel, ctx.rank, ctx.world);
    // Every rank initialises the whole unit (same seed) and keeps its own slice of it.
    std::vector<float> host(static_cast<size_t>(unit.numel));
    init_unit(cfg, u, seed, host.data());
    unit.params = dev.alloc_zeros(unit.shard.size * 4, MemCategory::params);
    dev.copy_from_host(unit.params.data(), host.data() + unit.shard.offset, unit.shard.real * 4);
    unit.grads = dev.alloc_zeros(unit.shard.size * 4, MemCategory::grads);
    unit.m = dev.alloc_zeros(unit.numel * 4, MemCategory::optimizer_state);
    unit.v = dev.alloc_zeros(unit.numel * 4, MemCategory::optimizer_state);
  }
  return units;
}

// Before a unit computes: every rank sends its shard and receives all N, in rank order, which is
// the whole padded flat buffer.
const float* gather(RankContext& ctx, Unit& unit, int u) {
  ctx.recorder->unit(u, UnitState::gathering);
  unit.full = ctx.device->alloc(unit.shard.size * ctx.world * 4, MemCategory::params_unsharded);
  ctx.comm->all_gather(unit.params.data(), unit.full.data(), unit.shard.size, DType::f32, false,
                       {u, "params"});
  ctx.recorder->unit(u, UnitState::unsharded);
  return unit.full.f32();
}

// After it computed: drop the gathered copy; the shard stays.
void reshard(RankContext& ctx, Unit& unit, int u) {
  unit.full.reset();
  ctx.recorder->unit(u, UnitState::resharded);
}

// A zeroed, padded buffer for the unit's whole gradient; backward accumulates into it.
float* start_grad(RankContext& ctx, Unit& unit) {
  unit.dfull =
      ctx.device->alloc_zeros(unit.shard.size * ctx.world * 4, MemCategory::grads_unsharded);
  return unit.dfull.f32();
}

// Shard r of the mean over ranks lands on rank r (block r summed in rank order, as all-reduce
// sums every element); the whole gradient is then freed.
void reduce_grad(RankContext& ctx, Unit& unit, int u) {
  ctx.comm->reduce_scatter(unit.dfull.data(), unit.grads.data(), unit.shard.size, DType::f32,
                           ReduceOp::avg, false, {u, "grads"});
  unit.dfull.reset();
}

// One step: gather, compute and free unit by unit, reduce-scatter each unit's gradient as soon as
// its backward is done, AdamW on the shard.
float train_step(RankContext& ctx, const LessonOptions& opt, const GPTConfig& cfg,
                 std::vector<Unit>& units, const Batch& batch, int step) {
  Device& dev = *ctx.device;
  Recorder* rec = ctx.recorder;
  const int L = cfg.n_layer, B = int(batch.rows), T = int(batch.seq);
  StepActivations a(dev, cfg, batch);
  Unit& root = units[kRootUnit];
  float loss = 0;
  // ---- forward: gather a unit, compute, free it (each layer call is one compute span in the
  // trace, so the viewer shows the all-gathers between them for what they are: waits)
  const float* w = gather(ctx, root, kRootUnit);
  {
    ScopedSpan s(rec, "forward", kRootUnit);
    embedding_forward(dev, cfg, a.x(0), a.tokens(), w, B, T);
  }
  reshard(ctx, root, kRootUnit);
  for (int l = 0; l < L; ++l) {
    const int u = block_unit(l);
    w = gather(ctx, units[u], u);
    {
      ScopedSpan s(rec, "forward", u);
      block_forward(dev, cfg, a.x(l + 1), a.blocks[l], a.x(l), w, B, T);
    }
    reshard(ctx, units[u], u);
  }
  // The head uses the root again (the LM head is tied to wte) and keeps it for its backward.
  w = gather(ctx, root, kRootUnit);
  {
    ScopedSpan s(rec, "forward", kRootUnit);
    loss = head_forward(dev, cfg, a.head, a.x(L), a.targets(), w, B, T);
  }
  // ---- backward, units in reverse
  // The root's gradient is complete only after the embedding's backward, at the very end.
  float* droot = start_grad(ctx, root);
  {
    ScopedSpan s(rec, "backward", kRootUnit);
    head_backward(dev, cfg, a.dx(), droot, a.head, a.x(L), a.targets(), w, B, T);
  }
  reshard(ctx, root, kRootUnit);
  for (int l = L - 1; l >= 0; --l) {
    const int u = block_unit(l);
    Unit& unit = units[u];
    w = gather(ctx, unit, u);
    float* dw = start_grad(ctx, unit);
    {
      ScopedSpan s(rec, "backward", u);
      block_backward(dev, cfg, a.dx(), dw, a.dx(), a.blocks[l], a.x(l), w, B, T);
    }
    reshard(ctx, unit, u);
    reduce_grad(ctx, unit, u);
  }
  {
    ScopedSpan s(rec, "backward", kRootUnit);
    embedding_backward(dev, cfg, droot, a.tokens(), a.dx(), B, T);  // needs no parameters
  }
  reduce_grad(ctx, root, kRootUnit);
  // The gradient shard matches the weight shard; Adam is still full size: use this rank's slice.
  ScopedSpan s(rec, "optimizer");
  for (Unit& u : units) {
    const int64_t o = u.shard.offset;
    adamw_update(dev, u.params.f32(), u.grads.f32(), u.m.f32() + o, u.v.f32() + o, u.shard.real,
                 opt.lr, opt.beta1, opt.beta2, opt.eps, opt.weight_decay, step + 1);
  }
  return loss;
}

void train_rank(RankContext& ctx, const LessonOptions& opt, RankResult& res) {
  const GPTConfig cfg = opt.config();
  std::vector<Unit> units = build_shards(ctx, cfg, opt.seed);
  DataLoader data = make_loader(opt, ctx.rank, ctx.world);
  for (int step = 0; step < opt.steps; ++step) {
    const Batch batch = data.next();
    StepMeter meter({{ctx.comm, ""}});
    const float loss = train_step(ctx, opt, cfg, units, batch, step);
    end_step(ctx, meter, step, loss, batch.rows * batch.seq, res);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return lesson_main([&] {
    Lesson lesson(argc, argv, kInfo);
    const LessonOptions& opt = lesson.options();
    lesson.run([&](RankContext& ctx, RankResult& res) { train_rank(ctx, opt, res); });

    // ---- what it should have cost: Ψ parameters, Ψ' after padding each unit to a multiple of N
    const GPTConfig cfg = lesson.config();
    const int N = lesson.ranks();
    int64_t psi = 0, psi_pad = 0, largest = 0, largest_block = 0;
    for (int u = 0; u < num_units(cfg); ++u) {
      const int64_t n = unit_layout(cfg, u).numel, padded = shard_of(n, 0, N).size * N;
      psi += n;
      psi_pad += padded;
      largest = std::max(largest, padded);
      if (u != kRootUnit) largest_block = std::max(largest_block, padded);
    }
    const int64_t root_pad = shard_of(unit_layout(cfg, kRootUnit).numel, 0, N).size * N;
    lesson.note("units: root " + commas(unit_layout(cfg, kRootUnit).numel) + " params, " +
                std::to_string(cfg.n_layer) + " blocks of " + commas(unit_layout(cfg, 1).numel) +
                "; Ψ = " + commas(psi) + ", padded to multiples of N = " + std::to_string(N) +
                ": Ψ' = " + commas(psi_pad) + " (padding " + commas(psi_pad - psi) + ")");
    lesson.expect_memory(MemCategory::params, false, "4Ψ'/N (a shard)", 4 * psi_pad / N);
    lesson.expect_memory(MemCategory::grads, false, "4Ψ'/N (a shard)", 4 * psi_pad / N);
    lesson.expect_memory(MemCategory::optimizer_state, false, "8Ψ", 8 * psi);
    lesson.expect_persistent("8Ψ + 8Ψ'/N", 8 * psi + 8 * psi_pad / N);
    lesson.expect_memory(MemCategory::params_unsharded, true, "4 × largest unit", 4 * largest);
    // The root's whole gradient waits for the embedding while each block's comes and goes.
    lesson.expect_memory(MemCategory::grads_unsharded, true, "4 × (root + largest block)",
                         4 * (root_pad + largest_block));
    // Each unit is gathered twice a step: for its forward and for its backward (the root for the
    // embedding and for the head, whose backward follows at once).
    lesson.expect_comm("all_gather", "2·4Ψ'(N-1)/N", 2 * 4 * psi_pad * (N - 1) / N);
    lesson.expect_comm("reduce_scatter", "4Ψ'(N-1)/N", 4 * psi_pad * (N - 1) / N);
    lesson.expect_buffer("3·4Ψ'", 3 * 4 * psi_pad);

    lesson.compare_losses("lesson 1", lesson1_losses(opt, N), 0.0);
    return lesson.finish();
  });
}
