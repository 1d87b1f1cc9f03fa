// The options `shardlab train` and `shardlab plan` share: the engine's settings, K and the
// per-rank memory limit, declared once for both commands (apps/shardlab/cli.hpp).
#include <CLI/CLI.hpp>

#include "apps/shardlab/cli.hpp"
#include "core/memory/tracker.hpp"

namespace shardlab {

void add_engine_options(CLI::App* cmd, EngineConfig& engine, int& accum, EngineOptionStrings& s,
                        const EngineOptionHelp& help) {
  cmd->add_option("--wrap", engine.wrap, help.wrap)->group(help.group);
  cmd->add_option("--hybrid-group", engine.hybrid_group, help.hybrid_group)->group(help.group);
  cmd->add_option("--prefetch", engine.prefetch, help.prefetch)->group(help.group);
  cmd->add_option("--param-dtype", s.param_dtype, help.param_dtype)->group(help.group);
  cmd->add_option("--reduce-dtype", s.reduce_dtype, help.reduce_dtype)->group(help.group);
  cmd->add_option("--accum", accum, help.accum)->group(help.group);
  cmd->add_flag("--act-ckpt", engine.act_ckpt, help.act_ckpt)->group(help.group);
  cmd->add_flag("--keep-root", engine.keep_root, help.keep_root)->group(help.group);
  cmd->add_option("--mem-limit", s.mem_limit, help.mem_limit)->group(help.group);
  cmd->add_option("--offload", s.offload, help.offload)->group(help.group);
  cmd->add_option("--host-mem-limit", s.host_mem_limit, help.host_mem_limit)->group(help.group);
}

void apply_engine_options(const EngineOptionStrings& s, EngineConfig& engine, int64_t& mem_limit) {
  engine.param_dtype = parse_dtype(s.param_dtype);
  engine.reduce_dtype = parse_dtype(s.reduce_dtype);
  mem_limit = parse_bytes(s.mem_limit, "--mem-limit");
  engine.offload = parse_offload(s.offload);
  engine.host_mem_limit = parse_bytes(s.host_mem_limit, "--host-mem-limit");
}

}  // namespace shardlab
