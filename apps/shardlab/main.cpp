// `shardlab`: the command line. Subcommands (each declared in its apps/shardlab/cli_*.cpp):
//   shardlab train [options]          train a GPT on N ranks with any sharding strategy
//   shardlab demo                     DP against FSDP on 4 local ranks, side by side
//   shardlab plan [options]           per-rank memory of each strategy, before running anything
//   shardlab simulate [options]       one rank of N on a cluster: predicted time and memory
//   shardlab calibrate [--out FILE]   measure this machine, write a cluster spec for simulate
//   shardlab summary RUN_DIR          a run directory's summary as tables
//   shardlab inspect CKPT_DIR         what a checkpoint holds; verifies every checksum
//   shardlab export CKPT_DIR OUT      a checkpoint's parameters as one .safetensors file
//   shardlab data encode IN OUT       turn any file into an llm.c .bin shard (one token per byte)
//   shardlab data info FILE           what a data file holds, as the trainer would load it
// Exit codes: 0 ok; 1 failure (library errors become one line "shardlab: error: ..."); 2 usage
// (a bad command line; `plan` also returns 2 when no strategy fits --mem-limit).
#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>
#include <vector>

#include "apps/shardlab/cli.hpp"
#include "core/base/error.hpp"

using namespace shardlab;

int main(int argc, char** argv) {
  CLI::App app{
      "shardlab: an observable FSDP training lab. Trains a GPT-2 style model with hand-written\n"
      "forward and backward passes and shows where every byte of memory goes.\n"};
  app.name("shardlab");
  app.require_subcommand(1);
  app.footer(
      "\nStart with `shardlab demo`, then `shardlab train --help`.\n"
      "Example: shardlab train --model small --data synthetic --steps 300\n"
      "         shardlab summary runs/<the directory train printed>");

  const std::vector<CliCommand> commands = {
      add_train_command(app),   add_demo_command(app),     add_plan_command(app),
      add_summary_command(app), add_inspect_command(app),  add_export_command(app),
      add_data_command(app),    add_simulate_command(app), add_calibrate_command(app)};

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help (rc 0) or the usage error
    return rc == 0 ? 0 : 2;
  }

  try {
    for (const CliCommand& c : commands)
      if (*c.app) return c.run();
  } catch (const std::exception& e) {
    std::cerr << "shardlab: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
