// Activation checkpointing (EngineConfig::act_ckpt): forward keeps only each block's input, which
// the residual stream holds anyway, and drops the block's activations; backward runs the block's
// forward again from that input just before the block's backward. One extra forward per block
// buys L blocks' activations (docs/memory.md).
#include "core/fsdp/engine_impl.hpp"

namespace shardlab {

void Engine::Impl::drop_block_activations(BlockActivations& acts) {
  if (cfg.act_ckpt) acts.release();
}

void Engine::Impl::recompute_block(int layer, BlockActivations& acts, const float* x, int B,
                                   int T) {
  if (!cfg.act_ckpt) return;
  ComputeSpan s(rec, "recompute", wrap.mlp[layer].unit, cfg.compute_slowdown);
  acts.allocate();
  const int64_t btc = static_cast<int64_t>(B) * T * model.n_embd;
  Buffer y = dev.alloc(btc * 4, MemCategory::workspace);  // (B, T, C), discarded
  block_attn_forward(dev, model, acts, x, piece_params(wrap.attn[layer]), B, T);
  block_mlp_forward(dev, model, y.f32(), acts, piece_params(wrap.mlp[layer]), B, T);
}

}  // namespace shardlab
