// Lesson 3: sharded gradients. A rank updates only its shard of the weights, so it needs only its
// shard of the mean gradient. A reduce-scatter gives exactly that: each rank sends its whole unit
// gradient and receives the sum over ranks of its own shard, for half the bytes of lesson 2's
// all-reduce. The unit's full gradient now lives only from its backward to its reduce-scatter.
// The Adam state is still full size, and still only this rank's slice of it is used.
#include "lessons/common/shards.hpp"

using namespace shardlab;
using namespace shardlab::lessons;

namespace {

const LessonInfo kInfo = {3, "sharded gradients", "lesson03_sharded_grads",
                          "A reduce-scatter leaves each rank only its shard of the mean gradient."};

// Units are kept as ShardedUnit (lessons/common/shards.hpp, with lesson 2's shard_of, gather and
// reshard): parameters and gradients as shards, Adam's m and v still full size.
using Unit = ShardedUnit;

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
  run_steps(ctx, opt, res, [&](const Batch& batch, int step) {
    return train_step(ctx, opt, cfg, units, batch, step);
  });
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
    const PaddedSizes z = padded_sizes(cfg, N);
    const int64_t psi = z.psi, psi_pad = z.psi_pad;
    lesson.note(units_note(cfg, N, z));
    lesson.expect_memory(MemCategory::params, false, "4Ψ'/N (a shard)", 4 * psi_pad / N);
    lesson.expect_memory(MemCategory::grads, false, "4Ψ'/N (a shard)", 4 * psi_pad / N);
    lesson.expect_memory(MemCategory::optimizer_state, false, "8Ψ", 8 * psi);
    lesson.expect_persistent("8Ψ + 8Ψ'/N", 8 * psi + 8 * psi_pad / N);
    lesson.expect_memory(MemCategory::params_unsharded, true, "4 × largest unit", 4 * z.largest);
    // The root's whole gradient waits for the embedding while each block's comes and goes.
    lesson.expect_memory(MemCategory::grads_unsharded, true, "4 × (root + largest block)",
                         4 * (z.root_pad + z.largest_block));
    // Each unit is gathered twice a step: for its forward and for its backward (the root for the
    // embedding and for the head, whose backward follows at once).
    lesson.expect_comm("all_gather", "2·4Ψ'(N-1)/N", 2 * 4 * psi_pad * (N - 1) / N);
    lesson.expect_comm("reduce_scatter", "4Ψ'(N-1)/N", 4 * psi_pad * (N - 1) / N);
    lesson.expect_buffer("3·4Ψ'", 3 * 4 * psi_pad);

    lesson.compare_losses("lesson 1", lesson1_losses(opt, N), 0.0);
    return lesson.finish();
  });
}
