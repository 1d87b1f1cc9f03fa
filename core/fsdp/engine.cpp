// The FSDP engine: construction (groups from the mesh, units, persistent state) and one
// micro-batch: the model's stages forward, then in reverse, each with its units gathered. The
// unit lifecycle pieces live in the files that engine_impl.hpp lists.
#include "core/fsdp/engine.hpp"

#include "core/base/error.hpp"
#include "core/fsdp/engine_impl.hpp"
#include "core/kernels/elementwise.hpp"

namespace shardlab {

// ---- construction -------------------------------------------------------------------------

Engine::Impl::Impl(Device& d, Communicator& w, Recorder* r, const Model& m, const EngineConfig& c)
    : dev(d),
      world(w),
      rec(r),
      model(m),
      cfg(c),
      spec(&strategy_spec(c.strategy)),
      accum(grad_accum(c.strategy, c.reduce_dtype, c.accum_mode)) {
  cfg.optim.validate();
  SL_CHECK(cfg.prefetch >= 0, "engine: prefetch ", cfg.prefetch, " must be >= 0");
  SL_CHECK(cfg.compute_slowdown >= 1.0 && cfg.compute_slowdown <= 1000.0,
           "engine: compute_slowdown ", cfg.compute_slowdown, " must be in [1, 1000]");
  SL_CHECK(cfg.max_inflight_gathers >= 0, "engine: max_inflight_gathers ", cfg.max_inflight_gathers,
           " must be >= 0 (0 = no limit)");
  mesh = make_mesh(cfg.strategy, world.size(), world.rank(), cfg.hybrid_group);
  SL_CHECK(cfg.host_mem_limit >= 0, "engine: host_mem_limit ", cfg.host_mem_limit,
           " must be >= 0 (0 = no limit)");
  if (cfg.offload != Offload::none) {
    // The host tier comes from the device (make_host_tier): cpu, a second CPU device; cuda, pinned
    // host memory and a copy stream (not yet run on a GPU); meta, a meta device (the simulator).
    host_tracker = std::make_unique<MemoryTracker>(world.rank(), cfg.host_mem_limit);
    if (rec && rec->enabled()) {
      Recorder* r = rec;
      host_tracker->set_listener([r](const MemoryTracker::Change& ch) { r->mem(ch, true); });
    }
    host_dev = dev.make_host_tier(*host_tracker);
    if (cfg.offload == Offload::params && !gathers())
      SL_THROW(InvalidArgument, "--offload params needs a shard group of 2 or more ranks (",
               strategy_name(cfg.strategy), " on ", world.size(), " ranks, group ", mesh.shard_size,
               "): with one rank per group nothing is gathered");
  }

  // Groups. Every rank calls split twice (collective), whatever its strategy; a group of one
  // rank is dropped. Keys are world ranks, so reductions run in world-rank order.
  std::unique_ptr<Communicator> sc =
      world.split_group(mesh.shard_color, mesh.rank, mesh.shard_ranks());
  std::unique_ptr<Communicator> rc =
      world.split_group(mesh.replica_color, mesh.rank, mesh.replica_ranks());
  SL_CHECK(sc->size() == mesh.shard_size && rc->size() == mesh.replica_size,
           "engine: split gave groups of ", sc->size(), " and ", rc->size(), " ranks, the mesh ",
           mesh.shard_size, " and ", mesh.replica_size);
  if (sc->size() > 1) shard_comm = std::move(sc);
  if (rc->size() > 1) replica_comm = std::move(rc);
  for (Communicator* c2 : {shard_comm.get(), replica_comm.get()})
    if (c2) c2->set_recorder(world.recorder() ? world.recorder() : rec);

  wrap = make_wrap_plan(model, parse_wrap_policy(cfg.wrap));
  init_units();
  fwd = forward_schedule(model, wrap, cfg.keep_root && gathers());
  bwd = backward_schedule(model, wrap, cfg.act_ckpt);
}

void Engine::Impl::init_units() {
  const int U = static_cast<int>(wrap.units.size());
  units.resize(U);
  for (int id = 0; id < U; ++id) {
    FsdpUnit& u = units[id];
    u.id = id;
    // The unit's entries: its stages' parameters, one after the other.
    std::vector<FlatEntry> entries;
    int64_t at = 0;
    for (int s : wrap.units[id].stages)
      for (const StageParam& p : model.stage(s).params()) {
        entries.push_back({p.name, p.shape, at, p.numel()});
        at += p.numel();
      }
    u.layout = FlatLayout(std::move(entries), mesh.shard_size);
    const int64_t P = u.layout.padded_numel();
    u.own = mesh.shard_size > 1 ? u.layout.shard_range(mesh.shard_rank) : ShardRange{0, P};
    const int64_t n_params = full_params() ? P : u.own.size;
    const int64_t n_grads = full_grads() ? P : u.own.size;

    Device& sdev = state_dev();  // the host tier under --offload params
    u.params = sdev.alloc(n_params * psz(), MemCategory::params);
    u.grads = sdev.alloc_zeros(n_grads * rsz(), MemCategory::grads);
    // The optimizer state (fp32 master when mixed, m, v) on the device, or on the host tier.
    Device& odev = optim_dev();
    if (mixed()) u.master = odev.alloc(u.own.size * 4, MemCategory::optimizer_state);
    u.opt = make_optimizer(odev, cfg.optim, u.own.size);

    // Every rank initialises the whole unit on the host (values depend only on seed and names)
    // and keeps its part; padding is zero and stays zero (zero gradient, zero weight decay).
    // A device that holds no data (the simulator's) gets the same allocations and copies, but no
    // host values: a 7B model's units are never materialised.
    std::vector<float> host;
    if (dev.holds_data()) {
      host.assign(static_cast<size_t>(P), 0.0f);
      for (int s : wrap.units[id].stages)
        init_params(model.stage(s).params(), cfg.seed, host.data() + wrap.place[s].offset);
    }
    const auto from = [&](int64_t offset) { return host.empty() ? nullptr : host.data() + offset; };
    const int64_t first = full_params() ? 0 : u.own.offset;
    if (!mixed()) {
      sdev.copy_from_host(u.params.data(), from(first), n_params * 4);
    } else if (all_state_on_host()) {  // cast on the host, from the initial values
      odev.copy_from_host(u.master.data(), from(u.own.offset), u.own.size * 4);
      cast_from_f32(sdev, u.params.data(), cfg.param_dtype, u.master.f32(), n_params);
    } else {
      odev.copy_from_host(u.master.data(), from(u.own.offset), u.own.size * 4);
      Buffer tmp = dev.alloc(n_params * 4, MemCategory::workspace);
      dev.copy_from_host(tmp.data(), from(first), n_params * 4);
      cast_from_f32(dev, u.params.data(), cfg.param_dtype, tmp.f32(), n_params);
    }
    if (rec && gathers()) rec->unit(id, UnitState::sharded);
  }
}

// ---- one micro-batch ------------------------------------------------------------------------

float Engine::Impl::forward_backward(const int* tokens, const int* targets, int B, int T, int micro,
                                     int K) {
  const int max_t = model.max_seq_len();
  SL_CHECK(B >= 1 && T >= 1 && (max_t <= 0 || T <= max_t), "engine: batch (B ", B, ", T ", T,
           ") must have B >= 1 and 1 <= T <= max_seq_len ", max_t);
  SL_CHECK(micro >= 0 && micro < K, "engine: micro-batch ", micro, " outside [0, ", K, ")");
  SL_CHECK(targets != nullptr, "engine: training needs targets");
  // Each rank's loss is a mean over its own tokens; the reductions sum over N ranks and the
  // micro-batches add up, so the gradient of the global mean needs 1 / (N K).
  const float loss_scale = 1.0f / static_cast<float>(static_cast<int64_t>(mesh.world) * K);
  // What flows between the stages (GPT-2: the residual stream), for the forward and the backward.
  std::unique_ptr<Pass> pass = model.begin(dev, MicroBatch{tokens, targets, B, T, loss_scale});
  run_forward(*pass);
  pass->begin_backward();
  // A unit kept from the forward (--keep-root) is gathered already, so the first backward use's
  // unshard_at returns at once: start the gathers after it here, as that call would have.
  if (gathers() && units[bwd.order.front()].unsharded) prefetch(bwd.order, 0);
  run_backward(*pass, micro == K - 1);
  pass->end_backward();
  const float loss = pass->loss;
  pass.reset();
  drain(0);
  return loss;
}

// Each use gathers the units it needs (and prefetches those after them), runs its stages, and
// reshards the units it used last.
void Engine::Impl::run_forward(Pass& pass) {
  for (const StageUse& use : fwd.uses) {
    for (int id : use.units) unshard_at(fwd.order, fwd.pos[id]);
    {
      StragglerSpan span(rec, "forward", use.units.front(), cfg.compute_slowdown);
      for (int s : use.stages) model.stage(s).forward(pass, stage_args(s, false));
    }
    if (cfg.act_ckpt && use.layer >= 0 && use.ends_layer) release_saved(pass, use);
    for (int id : use.release) reshard(units[id]);
  }
}

// The stages in reverse; a unit's gradient is reduced as soon as its last use here is done.
void Engine::Impl::run_backward(Pass& pass, bool last_micro) {
  for (const StageUse& use : bwd.uses) {
    for (int id : use.units) unshard_at(bwd.order, bwd.pos[id]);
    if (use.recompute) {
      recompute(pass, use);
    } else {
      StragglerSpan span(rec, "backward", use.units.front(), cfg.compute_slowdown);
      for (int s : use.stages) model.stage(s).backward(pass, stage_args(s, true));
    }
    if (use.ends_layer) release_saved(pass, use);
    for (int id : use.release) {
      reshard(units[id]);
      after_unit_backward(units[id], last_micro);
    }
  }
}

StageArgs Engine::Impl::stage_args(int s, bool backward) {
  const auto view = [&](const StagePlace& p, int64_t offset) {
    FsdpUnit& u = units[p.unit];
    ParamView v;
    v.w = compute_params(u) + p.offset + offset;
    if (backward) {  // grad_target first: it may start the unit's gradient, unwritten
      v.g = grad_target(u) + p.offset + offset;
      v.write = u.dflat_unwritten ? GradWrite::overwrite : GradWrite::accumulate;
    }
    return v;
  };
  StageArgs a;
  a.own = view(wrap.place[s], 0);
  for (const TieRef& t : model.ties(s)) a.tied.push_back(view(wrap.place[t.owner], t.offset));
  return a;
}

// ---- public API -----------------------------------------------------------------------------

Engine::Engine(Device& dev, Communicator& world, Recorder* recorder, const Model& model,
               const EngineConfig& cfg)
    : impl_(std::make_unique<Impl>(dev, world, recorder, model, cfg)) {}

Engine::~Engine() {
  // Collectives still in flight read and write buffers about to be freed: finish them first.
  // After a failure they may end in an error (the launcher aborted the world): nothing to report
  // from a destructor, the original exception is already on its way.
  if (!impl_) return;
  auto finish = [](Work& w) {
    try {
      w.wait();
    } catch (...) {
    }
  };
  for (FsdpUnit& u : impl_->units)
    if (u.gather_inflight) finish(u.gather_work);
  for (PendingReduce& p : impl_->pending) finish(p.work);
  for (PendingReduce& p : impl_->pending_cross) finish(p.work);
}

StepStats Engine::step(const std::vector<const int*>& tokens,
                       const std::vector<const int*>& targets, int B, int T) {
  SL_CHECK(!tokens.empty() && tokens.size() == targets.size(), "engine: step needs K >= 1 ",
           "micro-batches of tokens and as many of targets (got ", tokens.size(), " and ",
           targets.size(), ")");
  Impl& m = *impl_;
  const Communicator::Traffic a0 = m.traffic_intra(), e0 = m.traffic_inter();
  const int64_t h2d0 = m.copied_h2d, d2h0 = m.copied_d2h;
  const int K = static_cast<int>(tokens.size());
  StepStats st;
  double loss = 0;
  for (int k = 0; k < K; ++k) loss += m.forward_backward(tokens[k], targets[k], B, T, k, K);
  st.loss = static_cast<float>(loss / K);
  m.check_loss_finite(st.loss);
  st.grad_norm = m.cfg.clip > 0 ? m.clip_grad_norm(m.cfg.clip) : 0.0f;
  m.optimizer_step();
  st.tokens = static_cast<int64_t>(K) * B * T;
  const Communicator::Traffic a1 = m.traffic_intra(), e1 = m.traffic_inter();
  st.comm_intra = a1.total() - a0.total();
  st.comm_inter = e1.total() - e0.total();
  st.comm_buffer = (a1.buffer - a0.buffer) + (e1.buffer - e0.buffer);
  st.comm_all_gather = (a1.all_gather - a0.all_gather) + (e1.all_gather - e0.all_gather);
  st.comm_reduce_scatter =
      (a1.reduce_scatter - a0.reduce_scatter) + (e1.reduce_scatter - e0.reduce_scatter);
  st.comm_all_reduce = (a1.all_reduce - a0.all_reduce) + (e1.all_reduce - e0.all_reduce);
  st.copy_h2d = m.copied_h2d - h2d0;
  st.copy_d2h = m.copied_d2h - d2h0;
  return st;
}

float Engine::forward_backward(const int* tokens, const int* targets, int B, int T, int micro,
                               int K) {
  return impl_->forward_backward(tokens, targets, B, T, micro, K);
}
void Engine::optimizer_step() { impl_->optimizer_step(); }

float Engine::world_mean(float v) {
  Communicator& w = impl_->world;
  if (w.size() == 1) return v;
  w.all_reduce(&v, &v, 1, DType::f32, ReduceOp::sum);
  return v / static_cast<float>(w.size());
}

const Model& Engine::model() const { return impl_->model; }
const EngineConfig& Engine::config() const { return impl_->cfg; }
int Engine::num_units() const { return static_cast<int>(impl_->units.size()); }
int Engine::rank() const { return impl_->world.rank(); }
int Engine::world() const { return impl_->mesh.world; }
int Engine::shard_group() const { return impl_->mesh.shard_size; }
int Engine::shard_rank() const { return impl_->mesh.shard_rank; }
const FlatLayout& Engine::layout(int unit) const {
  SL_CHECK(unit >= 0 && unit < num_units(), "engine: unit ", unit, " outside [0, ", num_units(),
           ")");
  return impl_->units[unit].layout;
}
int64_t Engine::num_params() const { return impl_->model.num_params(); }
int Engine::steps_done() const { return impl_->steps; }
void Engine::set_steps_done(int t) {
  SL_CHECK(t >= 0, "engine: step count ", t, " must be >= 0");
  impl_->steps = t;
  for (FsdpUnit& u : impl_->units) u.opt->set_step_count(t);
}

void Engine::set_lr(float lr) {
  SL_CHECK(lr >= 0, "engine: learning rate ", lr, " must be >= 0");
  impl_->cfg.optim.lr = lr;
  for (FsdpUnit& u : impl_->units) u.opt->set_lr(lr);
}

namespace {
// Persistent bytes by category of the buffers on `dev`.
MemArray persistent_on(const std::vector<FsdpUnit>& units, const Device* dev,
                       const Device* optim_dev) {
  MemArray out{};
  for (const FsdpUnit& u : units) {
    for (const Buffer* b : {&u.params, &u.grads, &u.master})
      if (b->device() == dev) out[static_cast<int>(b->category())] += b->bytes();
    if (optim_dev == dev)
      out[static_cast<int>(MemCategory::optimizer_state)] += u.opt->state_bytes();
  }
  return out;
}
}  // namespace

MemArray Engine::persistent_bytes() const {
  return persistent_on(impl_->units, &impl_->dev, &impl_->optim_dev());
}

MemArray Engine::host_persistent_bytes() const {
  if (!impl_->host_dev) return MemArray{};
  return persistent_on(impl_->units, impl_->host_dev.get(), &impl_->optim_dev());
}

const MemoryTracker* Engine::host_tracker() const { return impl_->host_tracker.get(); }

void Engine::Impl::copy_d2h(void* host_dst, const void* src, int64_t bytes, int unit) {
  const bool traced = rec && rec->enabled();
  const int64_t t0 = traced ? trace_now_ns() : 0;
  dev.copy_to_host_tier(host_dst, src, bytes);
  copied_d2h += bytes;
  if (traced) rec->span(Lane::copy, "d2h", unit, bytes, DType::f32, t0, t0, trace_now_ns());
}

void Engine::Impl::copy_h2d(void* dst, const void* host_src, int64_t bytes, int unit,
                            ReadBy read_by) {
  const bool traced = rec && rec->enabled();
  const int64_t t0 = traced ? trace_now_ns() : 0;
  dev.copy_from_host_tier(dst, host_src, bytes, read_by);
  copied_h2d += bytes;
  if (traced) rec->span(Lane::copy, "h2d", unit, bytes, DType::f32, t0, t0, trace_now_ns());
}

Communicator::Traffic Engine::Impl::traffic_intra() const {
  return shard_comm ? shard_comm->traffic() : Communicator::Traffic{};
}
Communicator::Traffic Engine::Impl::traffic_inter() const {
  return replica_comm ? replica_comm->traffic() : Communicator::Traffic{};
}

}  // namespace shardlab
