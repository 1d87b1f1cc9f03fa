// The FSDP engine: construction (groups from the mesh, units, persistent state) and the schedule
// of one micro-batch's forward and backward. The unit lifecycle pieces live in the files that
// engine_impl.hpp lists.
#include "core/fsdp/engine.hpp"

#include <numeric>

#include "core/base/error.hpp"
#include "core/fsdp/engine_impl.hpp"
#include "core/kernels/elementwise.hpp"
#include "core/model/params.hpp"

namespace shardlab {

// ---- construction -------------------------------------------------------------------------

Engine::Impl::Impl(Device& d, Communicator& w, Recorder* r, const GPTConfig& m,
                   const EngineConfig& c)
    : dev(d),
      world(w),
      rec(r),
      model(m),
      cfg(c),
      spec(&strategy_spec(c.strategy)),
      accum(grad_accum(c.strategy, c.reduce_dtype, c.accum_mode)) {
  model.validate();
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
  fwd = forward_schedule(wrap, model.n_layer, cfg.keep_root && gathers());
  bwd = backward_schedule(wrap, model.n_layer, cfg.act_ckpt);
}

void Engine::Impl::init_units() {
  const int U = static_cast<int>(wrap.units.size());
  std::vector<UnitLayout> model_units;
  for (int m = 0; m < shardlab::num_units(model); ++m) model_units.push_back(unit_layout(model, m));
  units.resize(U);
  for (int id = 0; id < U; ++id) {
    FsdpUnit& u = units[id];
    u.id = id;
    // The unit's entries: its segments' parameters, one after the other.
    std::vector<FlatEntry> entries;
    int64_t at = 0;
    for (const WrapSegment& seg : wrap.units[id].segments) {
      for (const ParamEntry& e : model_units[seg.model_unit].entries)
        if (e.offset >= seg.offset && e.offset < seg.offset + seg.numel)
          entries.push_back({e.name, e.shape, at + e.offset - seg.offset, e.numel});
      at += seg.numel;
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
      int64_t dst = 0;
      for (const WrapSegment& seg : wrap.units[id].segments) {
        std::vector<float> whole(model_units[seg.model_unit].numel);
        init_unit(model, seg.model_unit, cfg.seed, whole.data());
        std::copy(whole.begin() + seg.offset, whole.begin() + seg.offset + seg.numel,
                  host.begin() + dst);
        dst += seg.numel;
      }
    }
    const auto from = [&](int64_t offset) { return host.empty() ? nullptr : host.data() + offset; };
    const int64_t first = full_params() ? 0 : u.own.offset;
    if (!mixed()) {
      sdev.copy_from_host(u.params.data(), from(first), n_params * 4);
    } else if (params_off()) {  // cast on the host, from the initial values
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
  SL_CHECK(B >= 1 && T >= 1 && T <= model.max_seq_len, "engine: batch (B ", B, ", T ", T,
           ") must have B >= 1 and 1 <= T <= max_seq_len ", model.max_seq_len);
  SL_CHECK(micro >= 0 && micro < K, "engine: micro-batch ", micro, " outside [0, ", K, ")");
  SL_CHECK(targets != nullptr, "engine: training needs targets");
  const bool last = micro == K - 1;
  const int L = model.n_layer;
  const int64_t btc = static_cast<int64_t>(B) * T * model.n_embd;
  // Each rank's loss is a mean over its own tokens; the reductions sum over N ranks and the
  // micro-batches add up, so the gradient of the global mean needs 1 / (N K).
  const float loss_scale = 1.0f / static_cast<float>(static_cast<int64_t>(mesh.world) * K);
  // The residual stream: the input of every block, then the head's input.
  Buffer residuals = dev.alloc((L + 1) * btc * 4, MemCategory::activations);  // (L+1, B, T, C)
  float* res = residuals.f32();
  std::vector<BlockActivations> acts;
  acts.reserve(L);
  HeadActivations head;

  // ---- forward: root (embeddings), blocks in order, root (head and loss). Each use gathers the
  // units it needs (and prefetches those after them), and reshards the units it used last.
  float loss = 0;
  for (const UnitUse& use : fwd.uses) {
    for (int id : use.units) unshard_at(fwd.order, fwd.pos[id]);
    const int l = use.layer;
    const int span_unit = use.units.front();
    switch (use.kind) {
      case UseKind::embed: {
        ComputeSpan s(rec, "forward", span_unit, cfg.compute_slowdown);
        embedding_forward(dev, model, res, tokens, piece_params(wrap.root), B, T);
        break;
      }
      case UseKind::block:
      case UseKind::attn:
      case UseKind::mlp: {
        if (use.kind != UseKind::mlp) acts.emplace_back(dev, model, B, T);
        {
          ComputeSpan s(rec, "forward", span_unit, cfg.compute_slowdown);
          if (use.kind != UseKind::mlp)
            block_attn_forward(dev, model, acts[l], res + l * btc, piece_params(wrap.attn[l]), B,
                               T);
          if (use.kind != UseKind::attn)
            block_mlp_forward(dev, model, res + (l + 1) * btc, acts[l], piece_params(wrap.mlp[l]),
                              B, T);
        }
        if (use.kind != UseKind::attn) drop_block_activations(acts[l]);
        break;
      }
      case UseKind::head: {
        head = HeadActivations(dev, model, B, T);
        ComputeSpan s(rec, "forward", span_unit, cfg.compute_slowdown);
        loss =
            head_forward(dev, model, head, res + L * btc, targets, piece_params(wrap.root), B, T);
        break;
      }
      case UseKind::recompute: SL_CHECK(false, "engine: recompute in the forward schedule");
    }
    for (int id : use.release) reshard(units[id]);
  }

  // ---- backward: root (head), blocks in reverse, root (embeddings); a unit's gradient is
  // reduced as soon as its last use here is done.
  Buffer dres = dev.alloc(btc * 4, MemCategory::workspace);  // (B, T, C), reused through the stack
  // A root kept from the forward (--keep-root) is gathered already, so the head's unshard_at
  // returns at once: start the gathers after it here, as that call would have.
  const int root = wrap.root.unit;
  if (units[root].unsharded && gathers()) prefetch(bwd.order, bwd.pos[root]);
  for (const UnitUse& use : bwd.uses) {
    for (int id : use.units) unshard_at(bwd.order, bwd.pos[id]);
    const int l = use.layer;
    const int span_unit = use.units.front();
    switch (use.kind) {
      case UseKind::head: {
        {
          ComputeSpan s(rec, "backward", span_unit, cfg.compute_slowdown);
          float* g = piece_grads(wrap.root);
          head_backward(dev, model, dres.f32(), g, head, res + L * btc, targets,
                        piece_params(wrap.root), B, T, loss_scale, piece_grad_write(wrap.root));
        }
        head.release();
        break;
      }
      case UseKind::recompute: recompute_block(l, acts[l], res + l * btc, B, T); break;
      case UseKind::block:
      case UseKind::mlp:
      case UseKind::attn: {
        {
          ComputeSpan s(rec, "backward", span_unit, cfg.compute_slowdown);
          if (use.kind != UseKind::attn) {
            float* g = piece_grads(wrap.mlp[l]);
            block_mlp_backward(dev, model, dres.f32(), g, dres.f32(), acts[l],
                               piece_params(wrap.mlp[l]), B, T, piece_grad_write(wrap.mlp[l]));
          }
          if (use.kind != UseKind::mlp) {
            float* g = piece_grads(wrap.attn[l]);
            block_attn_backward(dev, model, dres.f32(), g, acts[l], res + l * btc,
                                piece_params(wrap.attn[l]), B, T, piece_grad_write(wrap.attn[l]));
          }
        }
        if (use.kind != UseKind::mlp) acts[l].release();
        break;
      }
      case UseKind::embed: {
        ComputeSpan s(rec, "backward", span_unit, cfg.compute_slowdown);
        float* g = piece_grads(wrap.root);
        embedding_backward(dev, model, g, tokens, dres.f32(), B, T, piece_grad_write(wrap.root));
        break;
      }
    }
    for (int id : use.release) {
      reshard(units[id]);
      after_unit_backward(units[id], last);
    }
  }
  dres.reset();
  residuals.reset();
  drain(0);
  return loss;
}

// ---- public API -----------------------------------------------------------------------------

Engine::Engine(Device& dev, Communicator& world, Recorder* recorder, const GPTConfig& model,
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

const GPTConfig& Engine::model() const { return impl_->model; }
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
