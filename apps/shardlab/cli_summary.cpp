// `shardlab summary RUN_DIR`: a run directory's summary as tables (core/trace/summary.hpp).
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <string>

#include "core/trace/summary.hpp"
#include "apps/shardlab/cli.hpp"

namespace shardlab {

CliCommand add_summary_command(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "summary", "print a run directory's summary: step times, tokens/s, memory by category per "
                 "rank, communication by op");
  cmd->add_option("run_dir", *dir, "the run directory (e.g. runs/full_shard-n4-20250101-120000)")
      ->required();
  cmd->footer("\nA run still going (or killed) is summarized from what its files hold so far.\n"
              "Definitions: docs/observability.md \"Summary\".\n");
  return {cmd, [dir] { return print_summary(*dir, std::cout); }};
}

}  // namespace shardlab
