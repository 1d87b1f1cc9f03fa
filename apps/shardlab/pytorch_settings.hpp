// A configuration of `plan --recommend` in the user's own framework: the PyTorch FSDP2 calls
// (torch.distributed.fsdp.fully_shard per unit, MixedPrecisionPolicy, the device mesh of HSDP)
// and a torchtitan TOML ([parallelism], [training], [activation_checkpoint]; field names as
// torchtitan's JobConfig spells them). Where PyTorch has no equivalent (ZeRO-1, optimizer-state
// offload on its own, a prefetch depth above 1 without explicit calls) the text says so.
#pragma once

#include <cstdint>
#include <string>

#include "apps/shardlab/recommend.hpp"

namespace shardlab {

// ranks N, global_batch N x B x K sequences, seq T.
std::string pytorch_settings(const RecommendCandidate& c, int ranks, int64_t global_batch, int seq);

}  // namespace shardlab
