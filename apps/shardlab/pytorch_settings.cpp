// PyTorch FSDP2 and torchtitan settings of a recommended configuration (pytorch_settings.hpp).
#include "apps/shardlab/pytorch_settings.hpp"

#include <sstream>

namespace shardlab {

namespace {

const char* torch_dtype(DType d) {
  switch (d) {
    case DType::bf16: return "torch.bfloat16";
    case DType::f16: return "torch.float16";
    case DType::f32: break;
  }
  return "torch.float32";
}

const char* titan_dtype(DType d) {
  switch (d) {
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
    case DType::f32: break;
  }
  return "float32";
}

// What fully_shard is called on, for the wrap policy (core/fsdp/wrap_policy.hpp's forms).
std::string units_of(const std::string& wrap) {
  if (wrap == "block") return "each transformer block (decoder layer), then the root";
  if (wrap == "layer") return "each block's attention and its MLP apart, then the root";
  if (wrap == "whole") return "the root only (one unit)";
  return "units as --wrap " + wrap + " groups them (see docs/fsdp.md), then the root";
}

}  // namespace

std::string pytorch_settings(const RecommendCandidate& c, int ranks, int64_t global_batch,
                             int seq) {
  const int64_t per_rank = global_batch / ranks, b = per_rank / c.accum;
  const int shard = c.strategy == Strategy::hybrid_shard ? c.hybrid_group
                    : c.strategy == Strategy::no_shard || c.strategy == Strategy::shard_optim
                        ? 1
                        : ranks;
  const int replicate = ranks / shard;
  std::ostringstream s;
  s << "in PyTorch (torch.distributed.fsdp, FSDP2), one process per rank:\n";
  if (c.strategy == Strategy::no_shard || c.strategy == Strategy::shard_optim) {
    s << "  model = DistributedDataParallel(model)   # " << strategy_name(c.strategy) << "\n";
    if (c.strategy == Strategy::shard_optim)
      s << "  optimizer = ZeroRedundancyOptimizer(model.parameters(), torch.optim.AdamW)"
           "   # ZeRO-1: no fully_shard setting\n";
    if (c.param_dtype != DType::f32)
      s << "  # parameters in " << titan_dtype(c.param_dtype) << ": torch.autocast(\"cuda\", "
        << torch_dtype(c.param_dtype) << ") around the forward (DDP keeps fp32 weights)\n";
  } else {
    if (c.strategy == Strategy::hybrid_shard)
      s << "  mesh = init_device_mesh(\"cuda\", (" << replicate << ", " << shard
        << "), mesh_dim_names=(\"replicate\", \"shard\"))   # HSDP: replicate x shard\n";
    else
      s << "  mesh = init_device_mesh(\"cuda\", (" << ranks << ",))\n";
    s << "  mp = MixedPrecisionPolicy(param_dtype=" << torch_dtype(c.param_dtype)
      << ", reduce_dtype=" << torch_dtype(c.reduce_dtype) << ")\n";
    const bool reshard = c.strategy != Strategy::shard_grad_op;
    s << "  # fully_shard(unit, mesh=mesh, mp_policy=mp, reshard_after_forward="
      << (reshard ? "True" : "False")
      << (c.offload == Offload::params ? ", offload_policy=CPUOffloadPolicy()" : "") << ") on "
      << units_of(c.wrap) << "\n";
    s << "  for block in model.layers:\n"
      << "      fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward="
      << (reshard ? "True" : "False")
      << (c.offload == Offload::params ? ", offload_policy=CPUOffloadPolicy()" : "") << ")\n"
      << "  fully_shard(model, mesh=mesh, mp_policy=mp"
      << (c.offload == Offload::params ? ", offload_policy=CPUOffloadPolicy()" : "") << ")\n";
    if (c.prefetch > 1)
      s << "  # prefetch " << c.prefetch << ": block.set_modules_to_forward_prefetch(the next "
        << c.prefetch
        << " blocks) and set_modules_to_backward_prefetch (FSDP2 prefetches 1 by itself)\n";
    if (c.prefetch == 0)
      s << "  # prefetch 0: FSDP2 always prefetches the next block (its default); this "
           "configuration was simulated without\n";
  }
  if (c.offload == Offload::optim)
    s << "  # --offload optim (the optimizer state and its step on the host): no FSDP2 setting "
         "does this alone\n";
  if (c.act_ckpt)
    s << "  # activation checkpointing: wrap each block in "
         "torch.distributed.algorithms._checkpoint.checkpoint_wrapper before fully_shard\n";
  s << "  # per step: " << c.accum << " micro-batch" << (c.accum == 1 ? "" : "es") << " of " << b
    << " x " << seq << " tokens per rank"
    << (c.accum > 1 ? ", each one's gradient reduced after its backward (the default of both; "
                      "ShardLab's --accum-mode reduce_each)"
                    : "")
    << "\n";
  s << "as a torchtitan config (TOML):\n"
    << "  [training]\n"
    << "  local_batch_size = " << b << "\n"
    << "  global_batch_size = " << global_batch << "   # " << c.accum
    << " gradient accumulation step" << (c.accum == 1 ? "" : "s") << "\n"
    << "  seq_len = " << seq << "\n"
    << "  mixed_precision_param = \"" << titan_dtype(c.param_dtype) << "\"\n"
    << "  mixed_precision_reduce = \"" << titan_dtype(c.reduce_dtype) << "\"\n";
  if (c.offload == Offload::params) s << "  enable_cpu_offload = true\n";
  s << "  [parallelism]\n"
    << "  data_parallel_replicate_degree = " << replicate << "\n"
    << "  data_parallel_shard_degree = " << shard << "\n";
  if (shard > 1)
    s << "  fsdp_reshard_after_forward = \""
      << (c.strategy == Strategy::shard_grad_op ? "never" : "default") << "\"\n";
  s << "  [activation_checkpoint]\n"
    << "  mode = \"" << (c.act_ckpt ? "full" : "none") << "\"\n";
  if (c.strategy == Strategy::shard_optim)
    s << "  # torchtitan has no ZeRO-1: the nearest is the DDP above (replicate only)\n";
  return s.str();
}

}  // namespace shardlab
