// Lesson 5: hybrid sharding (HSDP) on a 2-D mesh. The N ranks form N/G groups of G ranks (think:
// G GPUs in a machine, N/G machines). Inside a group a unit is sharded over its G ranks exactly as
// in lesson 4; across groups, the ranks that hold the same shard are replicas, as in lesson 1.
// So gathers and reduce-scatters stay inside a group, and the only collective that crosses
// groups is an all-reduce of gradient shards: a rank keeps 16 bytes per parameter divided by G.
#include <algorithm>

#include "lessons/common/lesson.hpp"

using namespace shardlab;
using namespace shardlab::lessons;

namespace {

const LessonInfo kInfo = {5, "hybrid sharding", "hybrid_shard",
                          "Shard inside groups of G ranks, replicate across the N/G groups.",
                          /*has_group=*/true};

// The mesh as two communicators over the world's ranks: rank = g*G + s is shard s of group g.
struct Mesh {
  std::unique_ptr<Communicator> group;     // the G ranks of this rank's group: they shard a unit
  std::unique_ptr<Communicator> replicas;  // the N/G ranks holding shard s, one in every group
};
Mesh make_mesh(RankContext& ctx, int G) {
  return {ctx.comm->split(ctx.rank / G, ctx.rank), ctx.comm->split(ctx.rank % G, ctx.rank)};
}

// Rank r of a group of G owns elements [r*S, (r+1)*S) of a unit's flat buffer padded to G*S.
struct Shard {
  int64_t size = 0;    // S = ceil(numel / G)
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
  Buffer m, v;        // (S) Adam moments of this rank's shard
  Buffer full;        // (G*S) params_unsharded: the gathered unit while it computes, else empty
  Buffer dfull;       // (G*S) grads_unsharded: the unit's whole gradient until reduce-scattered
};

std::vector<Unit> build_shards(RankContext& ctx, Mesh& mesh, const GPTConfig& cfg, uint64_t seed) {
  Device& dev = *ctx.device;
  std::vector<Unit> units(static_cast<size_t>(num_units(cfg)));
  for (int u = 0; u < num_units(cfg); ++u) {
    Unit& unit = units[static_cast<size_t>(u)];
    unit.numel = unit_layout(cfg, u).numel;
    unit.shard = shard_of(unit.numel, mesh.group->rank(), mesh.group->size());
    // Every rank initialises the whole unit (same seed) and keeps its own slice of it.
    std::vector<float> host(static_cast<size_t>(unit.numel));
    init_unit(cfg, u, seed, host.data());
    unit.params = dev.alloc_zeros(unit.shard.size * 4, MemCategory::params);
    dev.copy_from_host(unit.params.data(), host.data() + unit.shard.offset, unit.shard.real * 4);
    unit.grads = dev.alloc_zeros(unit.shard.size * 4, MemCategory::grads);
    unit.m = dev.alloc_zeros(unit.shard.size * 4, MemCategory::optimizer_state);
    unit.v = dev.alloc_zeros(unit.shard.size * 4, MemCategory::optimizer_state);
  }
  return units;
}

// Before a unit computes: the G ranks of the group send their shards and receive all G, which is
// the whole padded flat buffer. Nothing crosses groups: every group holds a whole copy.
const float* gather(RankContext& ctx, Mesh& mesh, Unit& unit, int u) {
  ctx.recorder->unit(u, UnitState::gathering);
  unit.full =
      ctx.device->alloc(unit.shard.size * mesh.group->size() * 4, MemCategory::params_unsharded);
  mesh.group->all_gather(unit.params.data(), unit.full.data(), unit.shard.size, DType::f32, false,
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
float* start_grad(RankContext& ctx, Mesh& mesh, Unit& unit) {
  unit.dfull = ctx.device->alloc_zeros(unit.shard.size * mesh.group->size() * 4,
                                       MemCategory::grads_unsharded);
  return unit.dfull.f32();
}

// Two stages: a reduce-scatter averages over the group (shard s lands on rank s of the group),
// then an all-reduce averages shard s over the replicas. Equal groups: the mean of the group
// means is the mean over all N ranks, summed in a different order than lesson 1's.
void reduce_grad(Mesh& mesh, Unit& unit, int u) {
  mesh.group->reduce_scatter(unit.dfull.data(), unit.grads.data(), unit.shard.size, DType::f32,
                             ReduceOp::avg, false, {u, "grads"});
  unit.dfull.reset();
  mesh.replicas->all_reduce(unit.grads.data(), unit.grads.data(), unit.shard.size, DType::f32,
                            ReduceOp::avg, false, {u, "grads"});
}

// One step: lesson 4's, with the group in place of the world and a second stage of gradient
// reduction across groups.
float train_step(RankContext& ctx, Mesh& mesh, const LessonOptions& opt, const GPTConfig& cfg,
                 std::vector<Unit>& units, const Batch& batch, int step) {
  Device& dev = *ctx.device;
  Recorder* rec = ctx.recorder;
  const int L = cfg.n_layer, B = int(batch.rows), T = int(batch.seq);
  StepActivations a(dev, cfg, batch);
  Unit& root = units[kRootUnit];
  float loss = 0;
  // ---- forward: gather a unit, compute, free it (each layer call is one compute span in the
  // trace, so the viewer shows the all-gathers between them for what they are: waits)
  const float* w = gather(ctx, mesh, root, kRootUnit);
  {
    ScopedSpan s(rec, "forward", kRootUnit);
    embedding_forward(dev, cfg, a.x(0), a.tokens(), w, B, T);
  }
  reshard(ctx, root, kRootUnit);
  for (int l = 0; l < L; ++l) {
    const int u = block_unit(l);
    w = gather(ctx, mesh, units[u], u);
    {
      ScopedSpan s(rec, "forward", u);
      block_forward(dev, cfg, a.x(l + 1), a.blocks[l], a.x(l), w, B, T);
    }
    reshard(ctx, units[u], u);
  }
  // The head uses the root again (the LM head is tied to wte) and keeps it for its backward.
  w = gather(ctx, mesh, root, kRootUnit);
  {
    ScopedSpan s(rec, "forward", kRootUnit);
    loss = head_forward(dev, cfg, a.head, a.x(L), a.targets(), w, B, T);
  }
  // ---- backward, units in reverse
  // The root's gradient is complete only after the embedding's backward, at the very end.
  float* droot = start_grad(ctx, mesh, root);
  {
    ScopedSpan s(rec, "backward", kRootUnit);
    head_backward(dev, cfg, a.dx(), droot, a.head, a.x(L), a.targets(), w, B, T);
  }
  reshard(ctx, root, kRootUnit);
  for (int l = L - 1; l >= 0; --l) {
    const int u = block_unit(l);
    Unit& unit = units[u];
    w = gather(ctx, mesh, unit, u);
    float* dw = start_grad(ctx, mesh, unit);
    {
      ScopedSpan s(rec, "backward", u);
      block_backward(dev, cfg, a.dx(), dw, a.dx(), a.blocks[l], a.x(l), w, B, T);
    }
    reshard(ctx, unit, u);
    reduce_grad(mesh, unit, u);
  }
  {
    ScopedSpan s(rec, "backward", kRootUnit);
    embedding_backward(dev, cfg, droot, a.tokens(), a.dx(), B, T);  // needs no parameters
  }
  reduce_grad(mesh, root, kRootUnit);
  // Weights, gradients and moments are shards of the same range: AdamW is local, no offsets.
  ScopedSpan s(rec, "optimizer");
  for (Unit& u : units) {
    adamw_update(dev, u.params.f32(), u.grads.f32(), u.m.f32(), u.v.f32(), u.shard.real, opt.lr,
                 opt.beta1, opt.beta2, opt.eps, opt.weight_decay, step + 1);
  }
  return loss;
}

void train_rank(RankContext& ctx, const LessonOptions& opt, RankResult& res) {
  const GPTConfig cfg = opt.config();
  Mesh mesh = make_mesh(ctx, opt.group);
  std::vector<Unit> units = build_shards(ctx, mesh, cfg, opt.seed);
  DataLoader data = make_loader(opt, ctx.rank, ctx.world);
  for (int step = 0; step < opt.steps; ++step) {
    const Batch batch = data.next();
    StepMeter meter({{mesh.group.get(), "in group"}, {mesh.replicas.get(), "across groups"}});
    const float loss = train_step(ctx, mesh, opt, cfg, units, batch, step);
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

    // ---- what it should have cost: Ψ parameters, Ψ' after padding each unit to a multiple of G
    const GPTConfig cfg = lesson.config();
    const int N = lesson.ranks(), G = opt.group, R = N / G;  // R replica groups
    int64_t psi = 0, psi_pad = 0, largest = 0, largest_block = 0, ar = 0, flat = 0;
    for (int u = 0; u < num_units(cfg); ++u) {
      const int64_t n = unit_layout(cfg, u).numel, S = shard_of(n, 0, G).size;
      psi += n;
      psi_pad += S * G;
      largest = std::max(largest, S * G);
      if (u != kRootUnit) largest_block = std::max(largest_block, S * G);
      ar += 2 * 4 * S * (R - 1) / R;  // core/comm counts an all-reduce's ring traffic per call
      flat +=
          3 * 4 * shard_of(n, 0, N).size * (N - 1);  // lesson 4: 2 all-gathers, 1 reduce-scatter
    }
    const int64_t root_pad = shard_of(unit_layout(cfg, kRootUnit).numel, 0, G).size * G;
    lesson.note("units: root " + commas(unit_layout(cfg, kRootUnit).numel) + " params, " +
                std::to_string(cfg.n_layer) + " blocks of " + commas(unit_layout(cfg, 1).numel) +
                "; Ψ = " + commas(psi) + ", padded to multiples of G = " + std::to_string(G) +
                ": Ψ' = " + commas(psi_pad) + " (padding " + commas(psi_pad - psi) + ")");
    lesson.note("mesh: " + std::to_string(R) + " groups of " + std::to_string(G) +
                " ranks; bytes crossing groups per rank and step: " + commas(ar) +
                " here, against " + commas(flat) +
                " that lesson 4 sends in collectives spanning all " + std::to_string(N) + " ranks");
    lesson.expect_memory(MemCategory::params, false, "4Ψ'/G (a shard)", 4 * psi_pad / G);
    lesson.expect_memory(MemCategory::grads, false, "4Ψ'/G (a shard)", 4 * psi_pad / G);
    lesson.expect_memory(MemCategory::optimizer_state, false, "8Ψ'/G (a shard)", 8 * psi_pad / G);
    lesson.expect_persistent("16Ψ'/G", 16 * psi_pad / G);
    lesson.expect_memory(MemCategory::params_unsharded, true, "4 × largest unit", 4 * largest);
    lesson.expect_memory(MemCategory::grads_unsharded, true, "4 × (root + largest block)",
                         4 * (root_pad + largest_block));
    lesson.expect_comm("all_gather in group", "2·4Ψ'(G-1)/G", 2 * 4 * psi_pad * (G - 1) / G);
    lesson.expect_comm("reduce_scatter in group", "4Ψ'(G-1)/G", 4 * psi_pad * (G - 1) / G);
    lesson.expect_comm("all_reduce across groups", "2·4(Ψ'/G)(R-1)/R", ar);
    lesson.expect_buffer("3·4Ψ' + 4Ψ'/G", 3 * 4 * psi_pad + 4 * psi_pad / G);

    // ---- replicas of a shard agree bit for bit; the loss only within rounding: the mean of group
    // means sums in another order than lesson 1, except at the edges G = 1 and G = N
    bool same = true;
    for (int r = 0; r < N; ++r)
      same &= lesson.results()[r].fingerprint == lesson.results()[r % G].fingerprint;
    lesson.check(same, "the replicas of every shard end with the same weights, bit for bit");
    lesson.compare_losses("lesson 1", lesson1_losses(opt, N), G == 1 || G == N ? 0.0 : 1e-4);
    return lesson.finish();
  });
}
