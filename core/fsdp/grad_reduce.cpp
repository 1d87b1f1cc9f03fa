// Gradient reduction: where backward writes a unit's gradient, and the collective that turns it
// into this rank's reduced gradient as soon as the unit's backward ends. Both are the strategy's
// decisions (strategy.cpp): GradAccum says where the gradient accumulates and when it is reduced,
// GradCollective which collective reduces it:
//   all_reduce        no_shard: the full gradient, in place, across all N ranks
//   reduce_scatter    shard_optim: the full gradient in place, the owned range reduced;
//                     shard_grad_op, full_shard: the unit's fp32 gradient into the gradient shard
//   reduce_scatter_all_reduce   hybrid_shard: reduce-scatter inside the group of G, then an
//                     all-reduce of the shard across the N/G replica groups (advance, below),
//                     in flight behind the next units' backward as the reduce-scatter is
// Collectives sum; backward already scaled the loss by 1/(N K). The local backend sums each
// element in rank order in both all-reduce and reduce-scatter, so no_shard, shard_optim,
// shard_grad_op and full_shard get bit-identical reduced gradients.
#include <algorithm>
#include <vector>

#include "core/base/error.hpp"
#include "core/fsdp/engine_impl.hpp"
#include "core/kernels/elementwise.hpp"

namespace shardlab {

namespace {

// dst (n elements of t) += src (n elements of t), widening to fp32 for the addition.
void add_into(Device& dev, void* dst, const void* src, DType t, int64_t n) {
  if (t == DType::f32) {
    axpy(dev, static_cast<float*>(dst), 1.0f, static_cast<const float*>(src), n);
    return;
  }
  Buffer a = dev.alloc(n * 4, MemCategory::workspace);
  Buffer b = dev.alloc(n * 4, MemCategory::workspace);
  cast_to_f32(dev, a.f32(), dst, t, n);
  cast_to_f32(dev, b.f32(), src, t, n);
  axpy(dev, a.f32(), 1.0f, b.f32(), n);
  cast_from_f32(dev, dst, t, a.f32(), n);
}

}  // namespace

float* Engine::Impl::grad_target(FsdpUnit& u) {
  if (accum == GradAccum::direct) return u.grads.f32();
  if (u.dflat.empty()) {
    // Not zeroed: the unit's backward writes every parameter's gradient before adding to it
    // (GradWrite::overwrite, layers.hpp), so only what no parameter covers is zeroed here.
    u.dflat = dev.alloc(u.layout.padded_numel() * 4, MemCategory::grads_unsharded);
    zero_uncovered(u.layout, u.dflat.f32());
    u.dflat_unwritten = true;
  }
  return u.dflat.f32();
}

void Engine::Impl::zero_uncovered(const FlatLayout& layout, float* flat) {
  std::vector<ShardRange> covered;
  for (const FlatEntry& e : layout.entries()) covered.push_back({e.offset, e.numel});
  std::sort(covered.begin(), covered.end(),
            [](const ShardRange& a, const ShardRange& b) { return a.offset < b.offset; });
  int64_t at = 0;
  for (const ShardRange& c : covered) {
    if (c.offset > at) dev.fill_zero(flat + at, (c.offset - at) * 4);
    at = std::max(at, c.end());
  }
  if (layout.padded_numel() > at) dev.fill_zero(flat + at, (layout.padded_numel() - at) * 4);
}

void Engine::Impl::after_unit_backward(FsdpUnit& u, bool last_micro) {
  u.dflat_unwritten = false;  // under no_sync the next micro-batch adds to what this one wrote
  if (accum == GradAccum::fold) fold_grad(u);
  // Until then the gradient accumulates: in the full gradient (direct, fold) or in dflat (no_sync).
  if (!reduces_after(accum, last_micro)) return;
  issue_reduce(u);
  // One reduction stays in flight behind the next unit's backward; older ones complete now.
  drain(1);
}

void Engine::Impl::fold_grad(FsdpUnit& u) {
  const int64_t P = u.layout.padded_numel();
  if (u.grads_fresh) {
    cast_from_f32(dev, u.grads.data(), cfg.reduce_dtype, u.dflat.f32(), P);
  } else {
    Buffer kept = dev.alloc(P * 4, MemCategory::workspace);
    cast_to_f32(dev, kept.f32(), u.grads.data(), cfg.reduce_dtype, P);
    axpy(dev, u.dflat.f32(), 1.0f, kept.f32(), P);
    cast_from_f32(dev, u.grads.data(), cfg.reduce_dtype, u.dflat.f32(), P);
  }
  u.dflat.reset();
  u.grads_fresh = false;
}

void Engine::Impl::issue_reduce(FsdpUnit& u) {
  const int64_t P = u.layout.padded_numel(), S = u.own.size;
  const DType rd = cfg.reduce_dtype;
  PendingReduce p;
  p.unit = u.id;
  const void* send = nullptr;
  if (full_grads()) {
    // In place: the full gradient is the input and, in the owned range, the result.
    char* g = static_cast<char*>(u.grads.data());
    send = g;
    p.recv = g + u.own.offset * rsz();
  } else {
    send = u.dflat.data();
    if (rd != DType::f32) {
      p.staging = dev.alloc(P * rsz(), MemCategory::comm_buffers);
      cast_from_f32(dev, p.staging.data(), rd, u.dflat.f32(), P);
      send = p.staging.data();
      u.dflat.reset();
    } else {
      p.dflat = std::move(u.dflat);  // the collective reads it: free it once that is done
    }
    p.add = !u.grads_fresh;
    if (u.grads_fresh && !all_state_on_host()) {
      p.recv = u.grads.data();
    } else {  // an earlier micro-batch's shard to add to, or the kept shard is on the host
      p.recv_tmp = dev.alloc(S * rsz(), MemCategory::comm_buffers);
      p.recv = p.recv_tmp.data();
    }
    u.grads_fresh = false;
  }
  switch (spec->grad_collective) {
    case GradCollective::all_reduce:
      if (replica_comm)
        p.work =
            replica_comm->all_reduce(send, p.recv, P, rd, ReduceOp::sum, true, {u.id, "grads"});
      break;
    case GradCollective::reduce_scatter:
    case GradCollective::reduce_scatter_all_reduce:  // the all-reduce follows in advance()
      if (shard_comm)
        p.work =
            shard_comm->reduce_scatter(send, p.recv, S, rd, ReduceOp::sum, true, {u.id, "grads"});
      else if (!full_grads())
        dev.copy(p.recv, send, S * rsz());  // a group of one: the whole gradient is the shard
      break;
  }
  pending.push_back(std::move(p));
}

bool Engine::Impl::advance(PendingReduce& p) {
  p.work.wait();
  if (p.across_groups || spec->grad_collective != GradCollective::reduce_scatter_all_reduce ||
      !replica_comm)
    return true;
  // hybrid_shard: every group reduced its own data; sum the shards across groups, on its own
  // queue as FSDP2 runs it on its own stream, so that it overlaps the backward of the next units
  // instead of stalling it. What the reduce-scatter read is free now.
  p.staging.reset();
  p.dflat.reset();
  FsdpUnit& u = units[p.unit];
  p.work = replica_comm->all_reduce(p.recv, p.recv, u.own.size, cfg.reduce_dtype, ReduceOp::sum,
                                    true, {u.id, "grads"});
  p.across_groups = true;
  return false;
}

void Engine::Impl::finish_reduce(PendingReduce& p) {
  FsdpUnit& u = units[p.unit];
  const int64_t S = u.own.size;
  if (all_state_on_host()) {  // the reduced shard goes down to the host tier's gradient shard
    const int64_t bytes = S * rsz();
    if (!p.add) {
      copy_d2h(u.grads.data(), p.recv, bytes, u.id);
    } else {
      Buffer down = host_dev->alloc(bytes, MemCategory::workspace);
      copy_d2h(down.data(), p.recv, bytes, u.id);
      add_into(*host_dev, u.grads.data(), down.data(), cfg.reduce_dtype, S);
    }
  } else if (!p.recv_tmp.empty()) {
    add_into(dev, u.grads.data(), p.recv_tmp.data(), cfg.reduce_dtype, S);
  }
}

void Engine::Impl::drain(size_t keep) {
  auto finish_cross = [&](size_t k) {
    while (pending_cross.size() > k) {
      PendingReduce& p = pending_cross.front();
      p.work.wait();
      finish_reduce(p);
      pending_cross.pop_front();
    }
  };
  while (pending.size() > keep) {
    PendingReduce& p = pending.front();
    if (advance(p))
      finish_reduce(p);
    else
      pending_cross.push_back(std::move(p));
    pending.pop_front();
    finish_cross(keep);
  }
  finish_cross(keep);
}

}  // namespace shardlab
