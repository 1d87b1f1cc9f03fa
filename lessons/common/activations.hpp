// What one training step keeps between forward and backward, the same in every lesson (sharding
// changes where parameters live, not what the layers save): the batch on the device, the input of
// every block, each block's and the head's saved tensors, and the residual-stream gradient.
// Allocated when a step starts and freed when it ends, so a step's peak includes it and the
// memory left between steps is the persistent state alone.
#pragma once

#include <vector>

#include "core/device/device.hpp"
#include "core/model/layers.hpp"
#include "lessons/common/data.hpp"

namespace shardlab::lessons {

struct StepActivations {
  StepActivations(Device& dev, const GPTConfig& cfg, const Batch& batch)
      : B(static_cast<int>(batch.rows)),
        T(static_cast<int>(batch.seq)),
        nc(static_cast<int64_t>(B) * T * cfg.n_embd) {
    const int64_t tok_bytes = static_cast<int64_t>(batch.inputs.size() * sizeof(int32_t));
    tokens_buf = dev.alloc(tok_bytes, MemCategory::activations);
    targets_buf = dev.alloc(tok_bytes, MemCategory::activations);
    dev.copy_from_host(tokens_buf.data(), batch.inputs.data(), tok_bytes);
    dev.copy_from_host(targets_buf.data(), batch.targets.data(), tok_bytes);
    residuals = dev.alloc((cfg.n_layer + 1) * nc * 4, MemCategory::activations);
    for (int l = 0; l < cfg.n_layer; ++l) blocks.emplace_back(dev, cfg, B, T);
    head = HeadActivations(dev, cfg, B, T);
    dx_buf = dev.alloc(nc * 4, MemCategory::workspace);
  }

  const int* tokens() const { return tokens_buf.as<int>(); }    // (B, T)
  const int* targets() const { return targets_buf.as<int>(); }  // (B, T)
  float* x(int l) const { return residuals.f32() + l * nc; }    // (B, T, C) input of block l
  float* dx() const { return dx_buf.f32(); }                    // (B, T, C)

  int B, T;
  int64_t nc;  // B * T * C
  Buffer tokens_buf, targets_buf;
  Buffer residuals;  // (L + 1, B, T, C): x(l) feeds block l, x(L) feeds the head
  std::vector<BlockActivations> blocks;
  HeadActivations head;
  Buffer dx_buf;  // gradient of the residual stream, updated in place from the head down
};

}  // namespace shardlab::lessons
