// `shardlab demo`: DP against FSDP on 4 local ranks (apps/shardlab/demo.hpp).
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "apps/shardlab/cli.hpp"
#include "apps/shardlab/demo.hpp"

namespace shardlab {

CliCommand add_demo_command(CLI::App& app) {
  auto o = std::make_shared<DemoOptions>();
  CLI::App* cmd = app.add_subcommand(
      "demo", "DP against FSDP: the small model on 4 local ranks with no_shard and full_shard");
  cmd->add_option("--steps", o->steps, "steps per run")->capture_default_str();
  cmd->add_option("--ranks", o->ranks, "local ranks")->capture_default_str();
  cmd->add_option("--runs", o->runs_root, "where the two run directories go")
      ->capture_default_str();
  return {cmd, [o] { return run_demo(*o, std::cout); }};
}

}  // namespace shardlab
