// Global-norm gradient clipping (EngineConfig::clip, torch.nn.utils.clip_grad_norm_): the norm of
// the whole model's reduced gradient, summed over the shards of a shard group, and the factor
// optimizer_step scales each gradient by when the norm exceeds the limit.
#include <cmath>

#include "core/base/error.hpp"
#include "core/fsdp/engine_impl.hpp"
#include "core/kernels/elementwise.hpp"

namespace shardlab {

float Engine::Impl::clip_grad_norm(float max_norm) {
  ScopedSpan span(rec, "clip");
  drain(0);
  // Each rank squares its owned range; a shard group's ranks together hold every element once.
  // Replica groups (no_shard's N ranks, hybrid's N/G groups) hold identical reduced values, so
  // the sum runs over the shard group only: never counting a replica twice.
  double local = 0;
  Device& gd = state_dev();  // where the gradient shards are (the host under --offload params)
  for (FsdpUnit& u : units) {
    const int64_t n = u.own.size;
    if (cfg.reduce_dtype == DType::f32) {
      local += sum_squares(gd, static_cast<const float*>(owned_grads(u)), n);
    } else {
      Buffer tmp = gd.alloc(n * 4, MemCategory::workspace);
      cast_to_f32(gd, tmp.f32(), owned_grads(u), cfg.reduce_dtype, n);
      local += sum_squares(gd, tmp.f32(), n);
    }
  }
  double total = local;
  if (mesh.shard_size > 1) {
    // Gather every rank's partial sum (bytes only, no arithmetic in the collective) and add the
    // group's in rank order, so every rank computes the same bits. On the world communicator:
    // not part of the step's gradient and parameter traffic.
    const int n = world.size();
    Buffer mine = dev.alloc(8, MemCategory::comm_buffers);
    Buffer all = dev.alloc(8 * n, MemCategory::comm_buffers);
    dev.copy_from_host(mine.data(), &local, 8);
    world.all_gather(mine.data(), all.data(), 2, DType::f32);
    std::vector<double> partial(n);
    dev.copy_to_host(partial.data(), all.data(), 8 * n);
    total = 0;
    for (int r : mesh.shard_ranks()) total += partial[r];
  }
  // The sum of squares is finite exactly when every element is (elementwise.hpp, all_finite).
  grads_known_finite = std::isfinite(total);
  const float norm = static_cast<float>(std::sqrt(total));
  grad_coef = (max_norm > 0 && norm > max_norm) ? max_norm / (norm + 1e-6f) : 1.0f;
  return norm;
}

float Engine::clip_grad_norm(float max_norm) { return impl_->clip_grad_norm(max_norm); }

}  // namespace shardlab
