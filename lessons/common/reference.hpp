// Lesson 1's loss curve, recomputed in-process so that every lesson can check itself against it
// without reading another run: N replicas of core's reference GPT (core/model/gpt.hpp), gradients
// all-reduced to their mean (the local backend sums in rank order), AdamW on the whole replica.
// The arithmetic is lesson 1's element for element, so lessons 1-4 must match it bit for bit.
// With ranks = 1 it is one process training on the whole global batch.
#pragma once

#include <vector>

#include "core/comm/launcher.hpp"
#include "core/kernels/optim.hpp"
#include "core/model/gpt.hpp"
#include "lessons/common/data.hpp"
#include "lessons/common/options.hpp"

namespace shardlab::lessons {

inline std::vector<float> lesson1_losses(const LessonOptions& o, int ranks) {
  std::vector<float> losses(static_cast<size_t>(o.steps));
  LaunchOptions lo;
  lo.ranks = ranks;
  launch(lo, [&](RankContext& ctx) {
    const GPTConfig cfg = o.config();
    Device& dev = *ctx.device;
    GPT gpt(dev, cfg, o.seed);
    std::vector<Buffer> m, v;  // Adam moments, one pair per unit
    for (int u = 0; u < gpt.num_units(); ++u) {
      const int64_t n = gpt.layout(u).numel;
      m.push_back(dev.alloc_zeros(n * 4, MemCategory::optimizer_state));
      v.push_back(dev.alloc_zeros(n * 4, MemCategory::optimizer_state));
    }
    DataLoader data = make_loader(o, ctx.rank, ctx.world);
    for (int step = 0; step < o.steps; ++step) {
      const Batch b = data.next();
      const int64_t bytes = static_cast<int64_t>(b.inputs.size() * sizeof(int32_t));
      Buffer tok = dev.alloc(bytes, MemCategory::activations);
      Buffer tgt = dev.alloc(bytes, MemCategory::activations);
      dev.copy_from_host(tok.data(), b.inputs.data(), bytes);
      dev.copy_from_host(tgt.data(), b.targets.data(), bytes);
      gpt.zero_grad();
      float loss = gpt.forward(tok.as<int>(), tgt.as<int>(), int(b.rows), int(b.seq));
      gpt.backward();
      for (int u = 0; u < gpt.num_units(); ++u) {
        const int64_t n = gpt.layout(u).numel;
        ctx.comm->all_reduce(gpt.unit_grads(u), gpt.unit_grads(u), n, DType::f32, ReduceOp::avg);
        adamw_update(dev, gpt.unit_params(u), gpt.unit_grads(u), m[u].f32(), v[u].f32(), n, o.lr,
                     o.beta1, o.beta2, o.eps, o.weight_decay, step + 1);
      }
      ctx.comm->all_reduce(&loss, &loss, 1, DType::f32, ReduceOp::avg);
      if (ctx.rank == 0) losses[static_cast<size_t>(step)] = loss;
    }
  });
  return losses;
}

}  // namespace shardlab::lessons
