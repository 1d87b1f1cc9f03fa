// Lesson 1: data parallelism. Every rank holds a whole replica of the model: parameters, gradients
// and both Adam moments, 16 bytes per parameter. Each rank trains on its own slice of the global
// batch, then an all-reduce averages the gradients so every replica takes the same step and the
// replicas stay identical. The model is a list of units (the root: embeddings and final LayerNorm;
// then one unit per transformer block), each one flat buffer: the shape every later lesson shards.
#include "lessons/common/lesson.hpp"

using namespace shardlab;
using namespace shardlab::lessons;

namespace {

const LessonInfo kInfo = {1, "data parallel", "no_shard",
                          "Every rank keeps a full replica; an all-reduce averages the gradients."};

// One unit as this rank keeps it: everything at full size.
struct Unit {
  int64_t numel = 0;  // parameters in the unit
  Buffer params;      // (numel)
  Buffer grads;       // (numel)
  Buffer m, v;        // (numel) Adam's first and second moments
};

std::vector<Unit> build_replica(Device& dev, const GPTConfig& cfg, uint64_t seed) {
  std::vector<Unit> units(static_cast<size_t>(num_units(cfg)));
  for (int u = 0; u < num_units(cfg); ++u) {
    Unit& unit = units[static_cast<size_t>(u)];
    unit.numel = unit_layout(cfg, u).numel;
    // Same seed on every rank: every replica starts from the same weights.
    std::vector<float> host(static_cast<size_t>(unit.numel));
    init_unit(cfg, u, seed, host.data());
    unit.params = dev.alloc(unit.numel * 4, MemCategory::params);
    dev.copy_from_host(unit.params.data(), host.data(), unit.numel * 4);
    unit.grads = dev.alloc_zeros(unit.numel * 4, MemCategory::grads);
    unit.m = dev.alloc_zeros(unit.numel * 4, MemCategory::optimizer_state);
    unit.v = dev.alloc_zeros(unit.numel * 4, MemCategory::optimizer_state);
  }
  return units;
}

// One step: forward and backward on this rank's rows, all-reduce of the gradients, AdamW.
float train_step(RankContext& ctx, const LessonOptions& opt, const GPTConfig& cfg,
                 std::vector<Unit>& units, const Batch& batch, int step) {
  Device& dev = *ctx.device;
  Recorder* rec = ctx.recorder;
  const int L = cfg.n_layer, B = int(batch.rows), T = int(batch.seq);
  StepActivations a(dev, cfg, batch);
  float loss = 0;
  // ---- forward, unit by unit (each layer call is one compute span in the trace)
  const float* w = units[kRootUnit].params.f32();
  {
    ScopedSpan s(rec, "forward", kRootUnit);
    embedding_forward(dev, cfg, a.x(0), a.tokens(), w, B, T);
  }
  for (int l = 0; l < L; ++l) {
    const int u = block_unit(l);
    w = units[u].params.f32();
    {
      ScopedSpan s(rec, "forward", u);
      block_forward(dev, cfg, a.x(l + 1), a.blocks[l], a.x(l), w, B, T);
    }
  }
  w = units[kRootUnit].params.f32();
  {
    ScopedSpan s(rec, "forward", kRootUnit);
    loss = head_forward(dev, cfg, a.head, a.x(L), a.targets(), w, B, T);
  }
  // ---- backward, units in reverse
  for (Unit& u : units) dev.fill_zero(u.grads.data(), u.grads.bytes());
  float* droot = units[kRootUnit].grads.f32();
  {
    ScopedSpan s(rec, "backward", kRootUnit);
    head_backward(dev, cfg, a.dx(), droot, a.head, a.x(L), a.targets(), w, B, T);
  }
  for (int l = L - 1; l >= 0; --l) {
    const int u = block_unit(l);
    Unit& unit = units[u];
    w = unit.params.f32();
    {
      ScopedSpan s(rec, "backward", u);
      block_backward(dev, cfg, a.dx(), unit.grads.f32(), a.dx(), a.blocks[l], a.x(l), w, B, T);
    }
  }
  {
    ScopedSpan s(rec, "backward", kRootUnit);
    embedding_backward(dev, cfg, droot, a.tokens(), a.dx(), B, T);
  }
  // Every rank saw different rows, so its gradients differ. The mean over ranks is the gradient
  // of the whole global batch; after the all-reduce every rank holds it (in place).
  for (int u = 0; u < static_cast<int>(units.size()); ++u)
    ctx.comm->all_reduce(units[u].grads.data(), units[u].grads.data(), units[u].numel, DType::f32,
                         ReduceOp::avg, false, {u, "grads"});
  // Same gradients, same Adam state, same weights: every replica takes the same step.
  ScopedSpan s(rec, "optimizer");
  for (Unit& u : units)
    adamw_update(dev, u.params.f32(), u.grads.f32(), u.m.f32(), u.v.f32(), u.numel, opt.lr,
                 opt.beta1, opt.beta2, opt.eps, opt.weight_decay, step + 1);
  return loss;
}

void train_rank(RankContext& ctx, const LessonOptions& opt, RankResult& res) {
  const GPTConfig cfg = opt.config();
  std::vector<Unit> units = build_replica(*ctx.device, cfg, opt.seed);
  DataLoader data = make_loader(opt, ctx.rank, ctx.world);
  for (int step = 0; step < opt.steps; ++step) {
    const Batch batch = data.next();
    StepMeter meter({{ctx.comm, ""}});
    const float loss = train_step(ctx, opt, cfg, units, batch, step);
    end_step(ctx, meter, step, loss, batch.rows * batch.seq, res);
  }
  for (const Unit& u : units) res.fingerprint = fingerprint(*ctx.device, u.params, res.fingerprint);
}

}  // namespace

int main(int argc, char** argv) {
  return lesson_main([&] {
    Lesson lesson(argc, argv, kInfo);
    const LessonOptions& opt = lesson.options();
    lesson.run([&](RankContext& ctx, RankResult& res) { train_rank(ctx, opt, res); });

    // ---- what it should have cost: Ψ parameters, N ranks
    const GPTConfig cfg = lesson.config();
    const int64_t psi = cfg.num_params();
    const int N = lesson.ranks();
    lesson.note("units: root " + commas(unit_layout(cfg, kRootUnit).numel) + " params, " +
                std::to_string(cfg.n_layer) + " blocks of " + commas(unit_layout(cfg, 1).numel) +
                "; Ψ = " + commas(psi));
    lesson.expect_memory(MemCategory::params, false, "4Ψ", 4 * psi);
    lesson.expect_memory(MemCategory::grads, false, "4Ψ", 4 * psi);
    lesson.expect_memory(MemCategory::optimizer_state, false, "8Ψ (m and v)", 8 * psi);
    lesson.expect_persistent("16Ψ", 16 * psi);
    lesson.expect_memory(MemCategory::params_unsharded, true, "0: nothing gathered", 0);
    // A ring all-reduce sends 2(N-1)/N of the buffer; core/comm counts it per call.
    int64_t ar = 0;
    for (int u = 0; u < num_units(cfg); ++u) ar += 2 * 4 * unit_layout(cfg, u).numel * (N - 1) / N;
    lesson.expect_comm("all_reduce", "2·4Ψ(N-1)/N", ar);
    lesson.expect_buffer("4Ψ (the all-reduce)", 4 * psi);

    // ---- the replicas stayed identical, and the loss curve: core's reference GPT with the same
    // recipe, and one rank on the whole batch
    bool same = true;
    for (const RankResult& r : lesson.results())
      same &= r.fingerprint == lesson.results()[0].fingerprint;
    lesson.check(same, "every replica ends with the same weights, bit for bit");
    lesson.compare_losses("N replicas of core's reference GPT", lesson1_losses(opt, N), 0.0);
    if (N > 1) lesson.compare_losses("one rank on the whole batch", lesson1_losses(opt, 1), 1e-4);
    return lesson.finish();
  });
}
