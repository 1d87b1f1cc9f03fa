// EngineConfig's checks, worded as the command line names the settings.
#include "core/fsdp/engine_config.hpp"

#include "core/base/error.hpp"
#include "core/fsdp/wrap_policy.hpp"

namespace shardlab {

void EngineConfig::validate() const {
  optim.validate();
  parse_wrap_policy(wrap);
  if (prefetch < 0) SL_THROW(InvalidArgument, "--prefetch ", prefetch, ": must be >= 0");
  if (max_inflight_gathers < 0)
    SL_THROW(InvalidArgument, "--max-inflight-gathers ", max_inflight_gathers,
             ": must be >= 0 (0 = no cap)");
  if (!(clip >= 0.0f)) SL_THROW(InvalidArgument, "--clip ", clip, ": must be >= 0 (0 = off)");
  if (hybrid_group < 0)
    SL_THROW(InvalidArgument, "--hybrid-group ", hybrid_group, ": must be >= 1");
}

}  // namespace shardlab
