// EngineConfig's checks, worded as the command line names the settings.
#include "core/fsdp/engine_config.hpp"

#include "core/base/error.hpp"
#include "core/fsdp/wrap_policy.hpp"

namespace shardlab {

const char* offload_name(Offload o) {
  switch (o) {
    case Offload::none: return "none";
    case Offload::optim: return "optim";
    case Offload::params: return "params";
  }
  return "?";
}

Offload parse_offload(const std::string& s) {
  if (s == "none") return Offload::none;
  if (s == "optim") return Offload::optim;
  if (s == "params") return Offload::params;
  SL_THROW(InvalidArgument, "--offload '", s, "': expected none, optim or params");
}

void EngineConfig::validate() const {
  optim.validate();
  parse_wrap_policy(wrap);
  if (prefetch < 0) SL_THROW(InvalidArgument, "--prefetch ", prefetch, ": must be >= 0");
  if (max_inflight_gathers < 0)
    SL_THROW(InvalidArgument, "--max-inflight-gathers ", max_inflight_gathers,
             ": must be >= 0 (0 = no cap)");
  if (!(clip >= 0.0f)) SL_THROW(InvalidArgument, "--clip ", clip, ": must be >= 0 (0 = off)");
  if (host_mem_limit < 0)
    SL_THROW(InvalidArgument, "--host-mem-limit ", host_mem_limit, ": must be >= 0 (0 = no limit)");
  if (host_mem_limit > 0 && offload == Offload::none)
    SL_THROW(InvalidArgument, "--host-mem-limit needs --offload: without it nothing is kept in ",
             "host memory");
  // Parameter offload copies a unit's shard up before its all-gather. The strategies that keep
  // full parameters on every rank have no shard to copy: the whole model would cross every step.
  if (offload == Offload::params && keeps_full_params(strategy))
    SL_THROW(InvalidArgument, "--offload params with --strategy ", strategy_name(strategy), ": ",
             strategy_name(strategy), " keeps full parameters on every rank, so there is no shard ",
             "to copy up before an all-gather; use full_shard or hybrid_shard, or --offload optim");
  if (hybrid_group < 0)
    SL_THROW(InvalidArgument, "--hybrid-group ", hybrid_group, ": must be >= 1");
}

}  // namespace shardlab
