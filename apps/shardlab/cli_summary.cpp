// `shardlab summary RUN_DIR`: a run directory's summary as tables (core/trace/summary.hpp); and
// add_directory_command, the shape it shares with `shardlab inspect CKPT_DIR`.
#include <CLI/CLI.hpp>

#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "apps/shardlab/cli.hpp"
#include "core/trace/summary.hpp"

namespace shardlab {

CliCommand add_directory_command(CLI::App& app, const std::string& name,
                                 const std::string& description, const std::string& dir_name,
                                 const std::string& dir_help,
                                 std::function<int(const std::string&)> run) {
  auto dir = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(name, description);
  cmd->add_option(dir_name, *dir, dir_help)->required();
  return {cmd, [dir, run = std::move(run)] { return run(*dir); }};
}

CliCommand add_summary_command(CLI::App& app) {
  auto dirs = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd = app.add_subcommand(
      "summary",
      "print a run directory's summary: step times, tokens/s, memory by category per rank, "
      "communication per step by op, waits for other ranks; with several run directories, the "
      "runs side by side per step and rank, and each against the first");
  cmd->add_option("run_dir", *dirs,
                  "run directories (e.g. runs/full_shard-n4-20250101-120000); two or more: "
                  "compared, the first is the reference")
      ->required();
  cmd->footer(
      "\nA run still going (or killed) is summarized from what its files hold so far.\n"
      "Figures under a \"per step\" heading are per step (means); run totals say so.\n"
      "Definitions: docs/observability.md \"Summary\".\n");
  return {cmd, [dirs] { return print_summaries(*dirs, std::cout); }};
}

}  // namespace shardlab
