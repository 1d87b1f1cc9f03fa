// Lesson 2: sharded parameters. Each unit's flat buffer is padded to a multiple of N and cut into
// N equal shards; rank r keeps only shard r. Right before a unit computes, an all-gather rebuilds
// the whole unit on every rank; right after, the gathered copy is freed. Gradients are still
// all-reduced in full as in lesson 1 and the Adam state is still full size, but each rank now
// updates only its own shard, so only that slice of the gradients and of Adam is ever used.
#include <algorithm>

#include "lessons/common/lesson.hpp"

using namespace shardlab;
using namespace shardlab::lessons;

namespace {

const LessonInfo kInfo = {
    2, "sharded parameters", "lesson02_sharded_params",
    "Parameters live as shards, gathered per unit before use and freed after."};

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
  Buffer grads;       // (numel) full, all-reduced as in lesson 1
  Buffer m, v;        // (numel) full Adam moments; only this rank's slice is used
  Buffer full;        // (N*S) params_unsharded: the gathered unit while it computes, else empty
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
    unit.grads = dev.alloc_zeros(unit.numel * 4, MemCategory::grads);
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

// One step: gather, compute and free unit by unit, all-reduce of the gradients, AdamW on the shard.
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
  for (Unit& u : units) dev.fill_zero(u.grads.data(), u.grads.bytes());
  float* droot = root.grads.f32();
  {
    ScopedSpan s(rec, "backward", kRootUnit);
    head_backward(dev, cfg, a.dx(), droot, a.head, a.x(L), a.targets(), w, B, T);
  }
  reshard(ctx, root, kRootUnit);
  for (int l = L - 1; l >= 0; --l) {
    const int u = block_unit(l);
    Unit& unit = units[u];
    w = gather(ctx, unit, u);
    {
      ScopedSpan s(rec, "backward", u);
      block_backward(dev, cfg, a.dx(), unit.grads.f32(), a.dx(), a.blocks[l], a.x(l), w, B, T);
    }
    reshard(ctx, unit, u);
  }
  {
    ScopedSpan s(rec, "backward", kRootUnit);
    embedding_backward(dev, cfg, droot, a.tokens(), a.dx(), B, T);  // needs no parameters
  }
  // As in lesson 1: every rank ends with the whole mean gradient...
  for (int u = 0; u < static_cast<int>(units.size()); ++u)
    ctx.comm->all_reduce(units[u].grads.data(), units[u].grads.data(), units[u].numel, DType::f32,
                         ReduceOp::avg, false, {u, "grads"});
  // ...but it only has its shard of the weights to update: the same slice of grads, m and v.
  ScopedSpan s(rec, "optimizer");
  for (Unit& u : units) {
    const int64_t o = u.shard.offset;
    adamw_update(dev, u.params.f32(), u.grads.f32() + o, u.m.f32() + o, u.v.f32() + o, u.shard.real,
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
    int64_t psi = 0, psi_pad = 0, largest = 0, ar = 0;
    for (int u = 0; u < num_units(cfg); ++u) {
      const int64_t n = unit_layout(cfg, u).numel, padded = shard_of(n, 0, N).size * N;
      psi += n;
      psi_pad += padded;
      largest = std::max(largest, padded);
      ar += 2 * 4 * n * (N - 1) / N;  // core/comm counts an all-reduce's ring traffic per call
    }
    lesson.note("units: root " + commas(unit_layout(cfg, kRootUnit).numel) + " params, " +
                std::to_string(cfg.n_layer) + " blocks of " + commas(unit_layout(cfg, 1).numel) +
                "; Ψ = " + commas(psi) + ", padded to multiples of N = " + std::to_string(N) +
                ": Ψ' = " + commas(psi_pad) + " (padding " + commas(psi_pad - psi) + ")");
    lesson.expect_memory(MemCategory::params, false, "4Ψ'/N (a shard)", 4 * psi_pad / N);
    lesson.expect_memory(MemCategory::grads, false, "4Ψ", 4 * psi);
    lesson.expect_memory(MemCategory::optimizer_state, false, "8Ψ", 8 * psi);
    lesson.expect_persistent("12Ψ + 4Ψ'/N", 12 * psi + 4 * psi_pad / N);
    lesson.expect_memory(MemCategory::params_unsharded, true, "4 × largest unit", 4 * largest);
    // Each unit is gathered twice a step: for its forward and for its backward (the root for the
    // embedding and for the head, whose backward follows at once).
    lesson.expect_comm("all_gather", "2·4Ψ'(N-1)/N", 2 * 4 * psi_pad * (N - 1) / N);
    lesson.expect_comm("all_reduce", "2·4Ψ(N-1)/N", ar);
    lesson.expect_buffer("2·4Ψ' + 4Ψ", 2 * 4 * psi_pad + 4 * psi);

    lesson.compare_losses("lesson 1", lesson1_losses(opt, N), 0.0);
    return lesson.finish();
  });
}
